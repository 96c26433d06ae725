"""A pool of rank processes that keeps one process group alive across many tests.

Spawning ranks and importing torch costs seconds, so each pool starts its ranks
once (gloo on CPU, or NCCL) and then runs task after task on all of them. A task
is a module-level function `fn(ctx, **kwargs)` named as "module:function".

Failure isolation: every task has a deadline. When any rank raises, or a rank
does not answer in time (it is stuck in a collective its peers never joined),
the whole pool is torn down and the next task gets a fresh one, so one bad
rank fails its test promptly instead of hanging the run.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import importlib
import multiprocessing as mp
import os
import signal
import tempfile
import time
import traceback
from datetime import timedelta


@dataclasses.dataclass
class RankContext:
    """What a task sees on its rank."""

    rank: int
    world_size: int
    backend: str
    device: str
    groups: dict  # name -> (group_name, group_size, ProcessGroup); see make_groups


@dataclasses.dataclass
class RankResult:
    rank: int
    ok: bool
    value: object = None
    error: str = ""


class PoolBroken(RuntimeError):
    pass


def make_groups(world_size: int) -> dict:
    import torch.distributed as dist

    groups = {}
    world = dist.group.WORLD
    groups["world"] = (world.group_name, world_size, world)
    # A second group over the same ranks: interleaving two groups must not merge them.
    alt = dist.new_group(list(range(world_size)))
    groups["alt"] = (alt.group_name, world_size, alt)
    if world_size % 2 == 0 and world_size > 2:
        mine, _ = dist.new_subgroups(group_size=2)
        groups["pairs"] = (mine.group_name, 2, mine)
        half, _ = dist.new_subgroups(group_size=world_size // 2)
        groups["halves"] = (half.group_name, world_size // 2, half)
        strided, _ = dist.new_subgroups_by_enumeration(
            [list(range(0, world_size, 2)), list(range(1, world_size, 2))])
        groups["strided"] = (strided.group_name, world_size // 2, strided)
    return groups


def _worker(rank, world_size, backend, device, store_path, timeout_s, conn):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # A rank killed by a fatal signal (a crash in a backend's own threads) prints
    # every thread's Python stack to stderr, which the test's captured output keeps.
    faulthandler.enable(all_threads=True)
    try:
        import torch

        torch.set_num_threads(1)
        import torch.distributed as dist

        store = dist.FileStore(store_path, world_size)
        if device == "cuda":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        dist.init_process_group(
            backend, store=store, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout_s)
        )
        ctx = RankContext(rank, world_size, backend, device, make_groups(world_size))
        conn.send(RankResult(rank, True, "ready"))
    except BaseException:
        conn.send(RankResult(rank, False, error=traceback.format_exc()))
        return
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            break
        fn_path, kwargs = task
        try:
            module, name = fn_path.split(":")
            fn = getattr(importlib.import_module(module), name)
            conn.send(RankResult(rank, True, fn(ctx, **kwargs)))
        except BaseException:
            conn.send(RankResult(rank, False, error=traceback.format_exc()))
    try:
        dist.destroy_process_group()
    except Exception:
        pass


# The fatal signals faulthandler reports on.
_FAULTS = {signal.SIGSEGV, signal.SIGFPE, signal.SIGABRT, signal.SIGBUS, signal.SIGILL}


class RankPool:
    def __init__(self, world_size: int, backend: str = "gloo", device: str = "cpu", timeout_s: float = 60.0):
        self.world_size = world_size
        self.backend = backend
        self.device = device
        self.timeout_s = timeout_s
        self.procs: list = []
        self.conns: list = []

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        fd, store_path = tempfile.mkstemp(prefix="bucketing-store-")
        os.close(fd)
        os.unlink(store_path)
        env_threads = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = "1"  # inherited by spawned ranks
        try:
            for rank in range(self.world_size):
                parent, child = ctx.Pipe()
                p = ctx.Process(
                    target=_worker,
                    args=(rank, self.world_size, self.backend, self.device, store_path, self.timeout_s, child),
                    daemon=True,
                )
                p.start()
                self.procs.append(p)
                self.conns.append(parent)
        finally:
            if env_threads is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = env_threads
        results = self._collect(deadline=time.monotonic() + 120)
        bad = [r for r in results if not r.ok]
        if bad:
            self.close()
            raise PoolBroken("rank start-up failed:\n" + "\n".join(r.error for r in bad))

    def _collect(self, deadline: float) -> list[RankResult]:
        results: list[RankResult | None] = [None] * self.world_size
        failed_at = None
        while any(r is None for r in results):
            now = time.monotonic()
            # Once one rank failed, give the others a short grace, then stop waiting.
            limit = min(deadline, failed_at + 5.0) if failed_at is not None else deadline
            if now >= limit:
                break
            for rank, conn in enumerate(self.conns):
                if results[rank] is None and conn.poll(0.01):
                    try:
                        results[rank] = conn.recv()
                    except EOFError:
                        results[rank] = RankResult(rank, False, error="rank process died" + self._death(rank))
                    if not results[rank].ok and failed_at is None:
                        failed_at = time.monotonic()
            for rank, p in enumerate(self.procs):
                if results[rank] is None and not p.is_alive() and not self.conns[rank].poll():
                    results[rank] = RankResult(rank, False, error="rank process died" + self._death(rank))
                    failed_at = failed_at or time.monotonic()
        return [
            r if r is not None else RankResult(i, False, error="no answer before the deadline (hung or aborted)")
            for i, r in enumerate(results)
        ]

    def _death(self, rank: int) -> str:
        """How rank `rank`'s process ended: its exit code, or the signal that killed it."""
        p = self.procs[rank]
        p.join(timeout=5)
        code = p.exitcode
        if code is None:
            return " (its pipe closed; the process is still running)"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            # faulthandler prints for the fatal signals it handles; SIGKILL (the OOM killer) leaves nothing.
            stacks = "; its threads' Python stacks are in the captured stderr" if -code in _FAULTS else ""
            return f" (killed by {name}{stacks})"
        return f" (exit code {code})"

    def run(self, fn_path: str, timeout_s: float | None = None, **kwargs) -> list[RankResult]:
        """Run `fn_path` on every rank; restart the pool if any rank fails."""
        if not self.procs:
            self._start()
        for conn in self.conns:
            conn.send((fn_path, kwargs))
        results = self._collect(time.monotonic() + (timeout_s or self.timeout_s))
        if not all(r.ok for r in results):
            self.close()
        return results

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
            except Exception:
                pass
        for p in self.procs:
            p.join(timeout=1)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        self.procs, self.conns = [], []


def raise_on_failure(results: list[RankResult], what: str) -> list:
    bad = [r for r in results if not r.ok]
    if bad:
        first = bad[0]
        raise AssertionError(f"{what}: rank {first.rank} failed:\n{first.error}")
    return [r.value for r in results]
