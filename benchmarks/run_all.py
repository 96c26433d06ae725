"""`nox -s bench`: pass cost and compiled-step benchmarks, written to results/.

    python -m benchmarks.run_all [--quick] [--out results]

Writes pass_cost.csv, compiled_step.csv, pass_cost.png, compiled_step.png and
bench.md (the tables the README quotes). Every ratio compares variants
measured side by side in the same run.
"""

from __future__ import annotations

import argparse
import csv
import os
import time

from . import pass_cost

STEP_CONFIGS_FULL = [  # (world, kind, n)
    (2, "all_gather", 64), (2, "all_gather", 256), (4, "all_gather", 64),
    (2, "reduce_scatter", 64), (2, "reduce_scatter", 256),
]
STEP_CONFIGS_QUICK = [(2, "all_gather", 64), (2, "reduce_scatter", 64)]


def run_steps(configs, copy_out: str = "copy", time_unbucketed: bool = True) -> list[dict]:
    from conformance.pool import RankPool, raise_on_failure

    rows = []
    pools: dict[int, RankPool] = {}
    try:
        for world, kind, n in configs:
            pool = pools.setdefault(world, RankPool(world, timeout_s=900))
            start = time.perf_counter()
            results = raise_on_failure(
                pool.run("benchmarks.compiled_step:bench_step", timeout_s=900, kind=kind, n=n, copy_out=copy_out,
                         time_unbucketed=time_unbucketed), f"{kind} N={n}"
            )
            for row in results[0]:
                rows.append(row)
                print(f"step {kind:<15} world={world} N={n:<4} {row['variant']:<11} "
                      f"{row['median_ms']:8.3f} ms  compile {row['compile_s']:5.1f}s  "
                      f"peak {row['peak_bytes']:>10,} B  identical={row['identical']}", flush=True)
            print(f"  ({time.perf_counter() - start:.0f}s)", flush=True)
    finally:
        for pool in pools.values():
            pool.close()
    return rows


def write_csv(path: str, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def plot(pass_rows, step_rows, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for kind in sorted({r["kind"] for r in pass_rows}):
        rows = [r for r in pass_rows if r["kind"] == kind]
        ax.plot([r["n"] for r in rows], [r["ours_s"] for r in rows], "o-", label=f"ours {kind}")
        theirs = [r for r in rows if r["torch_s"] is not None]
        if theirs:
            ax.plot([r["n"] for r in theirs], [r["torch_s"] for r in theirs], "x--", label=f"torch {kind}")
    ax.set_xscale("log")
    ax.set_xlabel("collectives in the graph (N)")
    _finish(fig, ax, "pass time (s)", "Pass cost", os.path.join(out, "pass_cost.png"))

    if not step_rows:
        return
    configs = sorted({(r["kind"], r["world"], r["n"]) for r in step_rows})
    variants = ["unbucketed", "torch", "ours", "limit"]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(configs)), 4))
    width = 0.2
    for i, v in enumerate(variants):
        ys = [next((r["median_ms"] for r in step_rows if (r["kind"], r["world"], r["n"]) == c and r["variant"] == v), 0)
              for c in configs]
        ax.bar([j + i * width for j in range(len(configs))], ys, width, label=v)
    ax.set_xticks([j + 1.5 * width for j in range(len(configs))])
    ax.set_xticklabels([f"{k}\nw={w} N={n}" for k, w, n in configs], fontsize=7)
    _finish(fig, ax, "median step (ms)", "Compiled step", os.path.join(out, "compiled_step.png"))


def _finish(fig, ax, ylabel: str, title: str, path: str) -> None:
    ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def markdown(pass_rows, step_rows) -> str:
    lines = ["### Pass cost (fake process group of 8, alternating bf16/f32)", "",
             "| kind | N | ours (s) | torch built-in (s) | torch / ours |", "| --- | --- | --- | --- | --- |"]
    for r in pass_rows:
        theirs = "-" if r["torch_s"] is None else f"{r['torch_s']:.2f}"
        ratio = "-" if r["torch_s"] is None else f"{r['torch_s'] / r['ours_s']:.0f}x"
        lines.append(f"| {r['kind']} | {r['n']} | {r['ours_s']:.3f} | {theirs}{' (' + r['note'] + ')' if r['note'] else ''} | {ratio} |")
    for kind in sorted({r["kind"] for r in pass_rows}):
        by_n = {r["n"]: r["ours_s"] for r in pass_rows if r["kind"] == kind}
        if 1600 in by_n and 6400 in by_n:
            lines.append(f"\n{kind}: time(6400) / time(1600) = {by_n[6400] / by_n[1600]:.2f}")
    lines += ["", "### Compiled step (gloo, CPU, OMP_NUM_THREADS=1; median of 30 steps, variants timed in turns)", "",
              "| kind | world | N | variant | median (ms) | / limit | ours / variant | compile (s) "
              "| compile / unbucketed | peak bytes | bit-identical |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for kind, world, n in sorted({(r["kind"], r["world"], r["n"]) for r in step_rows}):
        rows = {r["variant"]: r for r in step_rows if (r["kind"], r["world"], r["n"]) == (kind, world, n)}
        limit, ours = rows["limit"]["median_ms"], rows["ours"]["median_ms"]
        base_compile = rows["unbucketed"]["compile_s"]
        for v, r in rows.items():
            lines.append(f"| {kind} | {world} | {n} | {v} | {r['median_ms']:.3f} | {r['median_ms'] / limit:.2f} | "
                         f"{ours / r['median_ms']:.2f} | {r['compile_s']:.1f} | {r['compile_s'] / base_compile:.2f} | "
                         f"{r['peak_bytes']:,} | "
                         f"{'-' if r['identical'] is None else r['identical']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run_all")
    p.add_argument("--out", default="results")
    p.add_argument("--quick", action="store_true", help="fewer sizes and configurations")
    p.add_argument("--skip-steps", action="store_true")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    started = time.perf_counter()
    sizes = (100, 400, 1600) if args.quick else pass_cost.SIZES
    pass_rows = pass_cost.run(sizes=sizes, torch_limit_s=30 if args.quick else pass_cost.TORCH_LIMIT_S)
    write_csv(os.path.join(args.out, "pass_cost.csv"), pass_rows)
    step_rows = [] if args.skip_steps else run_steps(STEP_CONFIGS_QUICK if args.quick else STEP_CONFIGS_FULL)
    if step_rows:
        write_csv(os.path.join(args.out, "compiled_step.csv"), step_rows)
    plot(pass_rows, step_rows, args.out)
    text = markdown(pass_rows, step_rows)
    if not args.skip_steps:
        from . import policy

        # Layers wide enough (dim 1024) that their matmuls could hide a collective.
        policy_args = (["--layers", "4", "--dim", "256"] if args.quick
                       else ["--layers", "8", "--dim", "1024", "--steps", "60"])
        text += "\n" + policy.main(policy_args, os.path.join(args.out, "policy.md"))
    with open(os.path.join(args.out, "bench.md"), "w") as f:
        f.write(text)
    print(text)
    print(f"bench finished in {time.perf_counter() - started:.0f}s; results in {args.out}/")


if __name__ == "__main__":
    main()
