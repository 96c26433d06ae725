"""What the copy-out op costs and gains, over several runs of the compiled-step bench.

    python -m benchmarks.copy_out [--runs 3] [--sizes 64 256] [--modes copy packed views]

Each run compiles and times every variant side by side (benchmarks.compiled_step)
for a 2-rank all-gather step of N members, once with the copy-out op and once
with fused views (copy_out="views"); this prints each run's ratios and their
medians: step time ours/limit and ours/torch, compile time over the
unbucketed compile, and peak bytes over unbucketed plus one bucket.
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
        "compile ours/unbucketed": ours["compile_s"] / base["compile_s"],
        "peak over unbucketed + bucket (B)": ours["peak_bytes"] - (base["peak_bytes"] + bucket_bytes),
        "bit-identical": float(all(r["identical"] for r in by.values() if r["identical"] is not None)),
    }


def _run(sizes: list[int], copy_out: str, attempts: int, time_unbucketed: bool) -> list[dict]:
    """One run, tried again when a rank dies: on gloo, 64 functional all-gathers
    in flight at once sometimes corrupt the heap (`malloc(): unaligned tcache
    chunk detected`), in the unbucketed program alone too, with no pass and none
    of this package's ops in the graph."""
    for attempt in range(1, attempts + 1):
        try:
            return run_steps([(2, "all_gather", n) for n in sizes], copy_out=copy_out,
                             time_unbucketed=time_unbucketed)
        except AssertionError as exc:
            if attempt == attempts:
                raise
            print(f"a rank died ({str(exc).splitlines()[0]}); attempt {attempt + 1} of {attempts}", flush=True)
    raise AssertionError("unreachable")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.copy_out")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 256])
    p.add_argument("--modes", nargs="+", default=["copy", "views"], choices=["copy", "packed", "views"])
    p.add_argument("--attempts", type=int, default=3, help="tries per run when a rank dies (see _run)")
    # The ratios below never read the unbucketed step time; timing it (30
    # steps of N collectives in flight) is what crashes gloo most (see _run).
    p.add_argument("--time-unbucketed", action="store_true", help="time the unbucketed step too")
    args = p.parse_args(argv)
    per: dict[tuple, list[dict]] = {}
    for run in range(args.runs):
        for copy_out in args.modes:
            rows = _run(args.sizes, copy_out, args.attempts, args.time_unbucketed)
            for n in args.sizes:
                r = ratios(rows, n)
                per.setdefault((n, copy_out), []).append(r)
                print(f"run {run + 1} N={n} copy_out={copy_out}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items()),
                      flush=True)
    names = list(next(iter(per.values()))[0])
    print(f"\nmedians of {args.runs} runs\n\n| N | copy_out | {' | '.join(names)} |")
    print("|" + " --- |" * (len(names) + 2))
    for (n, copy_out), runs in sorted(per.items()):
        medians = [statistics.median(r[k] for r in runs) for k in names]
        print(f"| {n} | {copy_out} | " + " | ".join(f"{m:.2f}" for m in medians) + " |")


if __name__ == "__main__":
    main()
