"""Bucketing policy on an FSDP-style model: unbucketed vs merge-all vs the default (the
model has no module blocks, so the locality rule decides).

    python -m benchmarks.policy [--layers 8] [--dim 1024] [--world-size 2]

Every variant runs in the same rank processes: collective counts, estimated
peak live bytes of the post-grad graphs (and their rise over unbucketed),
median step time, bit-identity. A fourth variant forces one bucket per layer
(`locality_flops=0`) to show what the locality rule does where compute is big
enough to hide collectives.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch
import torch.distributed as dist


def _worker(rank, world, args, init_file, out_file):
    from conformance import demo
    from conformance.timing import bitwise_equal

    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch._inductor.config.fx_graph_cache = False
    group = dist.group.WORLD
    dargs = argparse.Namespace(model="toy", layers=args.layers, dim=args.dim, batch=8, steps=args.steps)
    counting = demo.CountingPass()
    base = demo.compile_variant("unbucketed", counting, dargs, rank, world, group, "cpu")
    variants = (
        ("merge_all", {"policy": "merge_all"}),
        ("default (no module blocks in this model: the locality rule)", {}),
        ("locality, one layer per bucket", {"locality_flops": 0}),
    )
    compiled, passes = [base], [counting]
    for name, options in variants:
        passes.append(demo.RecordingBucketingPass(**options))
        compiled.append(demo.compile_variant(name, passes[-1], dargs, rank, world, group, "cpu"))
    demo.time_side_by_side(compiled, args.steps, "cpu")
    rows = [("unbucketed", demo.total_counts(counting.counts), sum(counting.peaks), base.median_s, True)]
    for v, p in zip(compiled[1:], passes[1:]):
        same = bitwise_equal(base.loss, v.loss) and all(
            bitwise_equal(a, b) for a, b in zip(base.grads, v.grads))
        rows.append((v.name, demo.total_counts(p.after), sum(p.peaks), v.median_s, same))
    if rank == 0:
        lines = ["| variant | all-gathers | reduce-scatters | est. peak bytes (fwd+bwd) | rise over unbucketed "
                 "| median step (ms) | bit-identical |",
                 "| --- | --- | --- | --- | --- | --- | --- |"]
        base_peak = rows[0][2]
        for name, counts, peak, step, same in rows:
            lines.append(f"| {name} | {counts['all_gather']} | {counts['reduce_scatter']} | {peak:,} | "
                         f"{peak - base_peak:+,} | {step * 1e3:.2f} | {same} |")
        text = f"### Policy on a {args.layers}-layer FSDP-style model (dim {args.dim}), {world} gloo ranks\n\n" + "\n".join(lines) + "\n"
        print(text, flush=True)
        with open(out_file, "w") as f:
            f.write(text)
    dist.destroy_process_group()


def main(argv=None, out_file: str | None = None) -> str:
    p = argparse.ArgumentParser(prog="python -m benchmarks.policy")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--world-size", type=int, default=2)
    args = p.parse_args(argv)
    out_file = out_file or os.path.join(tempfile.mkdtemp(), "policy.md")
    init_file = os.path.join(tempfile.mkdtemp(), "rendezvous")
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.multiprocessing.spawn(_worker, args=(args.world_size, args, init_file, out_file), nprocs=args.world_size)
    with open(out_file) as f:
        return f.read()


if __name__ == "__main__":
    main()
