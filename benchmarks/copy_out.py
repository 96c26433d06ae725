"""What the copy-out op costs and gains, over several runs of the compiled-step bench.

    python -m benchmarks.copy_out [--runs 3] [--sizes 64 256]

Each run compiles and times every variant side by side (benchmarks.compiled_step)
for a 2-rank all-gather step of N members; this prints each run's ratios and
their medians: step time ours/limit and ours/torch, ours/views (the same
buckets with fused views), compile time over the unbucketed compile, and
peak bytes over unbucketed plus one bucket.
"""

from __future__ import annotations

import argparse
import statistics

from .run_all import run_steps


def ratios(rows: list[dict], n: int) -> dict[str, float]:
    by = {r["variant"]: r for r in rows if r["n"] == n}
    ours, base = by["ours"], by["unbucketed"]
    bucket_bytes = 256 * n * 2 * 3  # members of 256 elements, bf16/f32 alternating (3 bytes each on average), 2 ranks
    return {
        "ours/limit": ours["median_ms"] / by["limit"]["median_ms"],
        "ours/torch": ours["median_ms"] / by["torch"]["median_ms"],
        "ours/views": ours["median_ms"] / by["ours (views)"]["median_ms"],
        "compile ours/unbucketed": ours["compile_s"] / base["compile_s"],
        "compile views/unbucketed": by["ours (views)"]["compile_s"] / base["compile_s"],
        "peak - (unbucketed + bucket) bytes": ours["peak_bytes"] - (base["peak_bytes"] + bucket_bytes),
        "bit-identical": float(all(r["identical"] for r in by.values() if r["identical"] is not None)),
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.copy_out")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 256])
    args = p.parse_args(argv)
    per_size: dict[int, list[dict]] = {n: [] for n in args.sizes}
    for run in range(args.runs):
        rows = run_steps([(2, "all_gather", n) for n in args.sizes])
        for n in args.sizes:
            r = ratios(rows, n)
            per_size[n].append(r)
            print(f"run {run + 1} N={n}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items()), flush=True)
    print()
    print(f"| N | {' | '.join(per_size[args.sizes[0]][0])} |")
    print("|" + " --- |" * (len(per_size[args.sizes[0]][0]) + 1))
    for n, runs in per_size.items():
        medians = [statistics.median(r[k] for r in runs) for k in runs[0]]
        print(f"| {n} | " + " | ".join(f"{m:.2f}" for m in medians) + " |")


if __name__ == "__main__":
    main()
