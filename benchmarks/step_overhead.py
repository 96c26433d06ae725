"""What a compiled step costs outside the network: one process, a gloo group of one.

    python -m benchmarks.step_overhead [--members 64 256] [--steps 200]

The compiled-step bench's all-gather program (N members, bf16 and f32, each
doubled) with every collective a local copy, so what is left is the work each
variant does around its collectives: our pass with the copy-out as our op
(`lower_copy_out="never"`, the CPU default) and lowered into C++ kernels
(`"always"`), the unbucketed program and the single-collective limit (members
pre-packed before the step, handed out as views). Prints the median step time of
each over three rounds, taken in turns.

The program takes its N members as N inputs, the limit one pre-packed buffer,
and Dynamo's guards and Inductor's input checks cost per input. Two more
programs without any collective measure that part side by side: the doubling
of N inputs, and of N slices of one input. Their difference is what the
program's signature costs over the limit's, whatever a pass does; the last
column is the limit plus it, the floor for any pass on this program.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time

import torch
import torch.distributed as dist

from conformance.timing import fresh_copy

from .compiled_step import _inputs, _limit, _program


def _doubled(*xs):
    return [x * 2 for x in xs]


def _doubled_slices(sizes: list[int]):
    def step(flat):
        return [part * 2 for part in flat.split(sizes)]
    return step


def _variants(n: int, group: str) -> dict:
    import bucketing.core as bc

    xs = _inputs("all_gather", n, 1, 0)
    program = _program("all_gather", group, 1)
    limit_program, limit_inputs = _limit("all_gather", xs, group, 1)
    same = [x.float() for x in xs]  # one dtype, so the slices come from one buffer
    return {
        "N inputs, no collective": (_doubled, same, None),
        "1 input, no collective": (_doubled_slices([x.numel() for x in same]), [torch.cat(same)], None),
        "ours, default (op)": (program, xs, bc.BucketingPass(lower_copy_out="never")),
        "ours, copy-out lowered": (program, xs, bc.BucketingPass(lower_copy_out="always")),
        "ours, copy-out packed": (program, xs, bc.BucketingPass(copy_out="packed")),
        "unbucketed": (program, xs, None),
        "limit": (limit_program, limit_inputs, None),
    }


def measure(n: int, steps: int, names, rounds: int = 3) -> dict[str, float]:
    """Median step time in microseconds per variant."""
    group = dist.group.WORLD.group_name
    calls = {}
    for name, (program, inputs, custom) in _variants(n, group).items():
        if name not in names:
            continue
        compiled = torch.compile(fresh_copy(program, name), fullgraph=True)
        with torch._inductor.config.patch(post_grad_custom_post_pass=custom, fx_graph_cache=False):
            compiled(*inputs)
        calls[name] = functools.partial(compiled, *inputs)
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            for _ in range(steps // 10):  # warm
                call()
            for _ in range(steps):
                start = time.perf_counter()
                call()
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) * 1e6 for name, s in samples.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--steps", type=int, default=200)
    # The unbucketed program (N collectives in flight on gloo) sometimes dies in
    # torch/gloo with a heap corruption (README, Performance); leave it out to
    # time the others.
    parser.add_argument("--without-unbucketed", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        names = [v for v in _variants(1, dist.group.WORLD.group_name)
                 if not (args.without_unbucketed and v == "unbucketed")]
        print("| N | " + " | ".join(names) + " | floor: limit + N inputs |")
        print("|---|" + "---|" * (len(names) + 1))
        for n in args.members:
            times = measure(n, args.steps, names)
            limit = times["limit"]
            floor = limit + times["N inputs, no collective"] - times["1 input, no collective"]
            print(f"| {n} | " + " | ".join(f"{t:.0f} us ({t / limit:.2f}x)" for t in times.values())
                  + f" | {floor:.0f} us ({floor / limit:.2f}x) |")
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
