"""Helpers for timing compiled steps side by side on a process group.

Shared by the demo, the model family's checks and `benchmarks/`.
"""

from __future__ import annotations

import re
import time
import types
from collections.abc import Callable

import torch
import torch.distributed as dist


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape and the same bytes."""
    return a.shape == b.shape and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def fresh_copy(fn, label: str):
    """`fn` under a code object of its own: dynamo caches compiled code per code
    object, so each variant compiled from a copy keeps its own compilation."""
    suffix = re.sub(r"\W", "_", label)
    code = fn.__code__.replace(co_name=f"{fn.__name__}_{suffix}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)


def time_in_turns(steps: dict[str, Callable[[], object]], rounds: int, device: str) -> dict[str, list[float]]:
    """Seconds of each step, run in turns (one of each per round) so drift on a
    busy machine hits all alike; every step starts from a barrier."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            if device == "cuda":
                torch.cuda.synchronize()
            dist.barrier()
            start = time.perf_counter()
            step()
            if device == "cuda":
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
    return times
