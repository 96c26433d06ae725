"""The simulated step over a grid: models, GPUs, sequence lengths, world sizes and meshes.

    python -m benchmarks.sweep [--out results/sweep] [--jobs 2] [--grid full|quick]
        [--comm-models torch,measured] [--compute-efficiency E] [--only TEXT]
        [--ablate] [--resume]

Every pass runs side by side in every cell (benchmarks/simulate.py does one
cell). A cell is (model, GPU, sequence length, mesh); the grid:
- models: llama3-8b (32 layers), llama3-70b (its first 8 layers) and
  mixtral-8x7b (its first 4 layers: 8 experts, 2 per token, transformers'
  grouped-matmul experts), at their real widths;
- GPUs: a100, h100, h200; sequences of 2,048 and 8,192 tokens, batch 1;
- meshes: FSDP over 8, 64 and 1,024 ranks; HSDP of 32 replicas of 8 shards
  (256 ranks).

Each (model, sequence, mesh) is traced once, on the h200 preset, and its graphs
serve every GPU: the traced graphs do not depend on the GPU (checked by
`tests/test_sweep.py` on a small llama3). Passes that read no estimate
(`unbucketed`, `torch`) run once per trace; the others once per GPU. Each
pass's graphs are played under every comm model (`torch`: torch's NCCL model;
`measured`: published nccl-tests figures); the passes plan with torch's
estimates under both, as they would on a real cluster.

torch's overlap scheduler runs at its defaults (`torch-overlap:defaults`), as
torchtitan's graph trainer sets it (`torch-overlap:titan`) and over a small
search of its knobs (`OVERLAP_SEARCH`: memory, bytes in flight and compute
prefetched over relaxed together; the same with a larger bucket cap);
`torch-overlap-best` is, per cell and comm model, the setting with the
shortest step.

`--ablate` also runs the default options with each planning rule turned off
(benchmarks/ablation.py) and adds a table of what each rule's absence costs.
`--resume` keeps the rows a previous run wrote and runs only the passes a
unit's cells lack.

Writes `OUT/cells/<cell>.json` (the rows of every pass and comm model),
`OUT/sweep.json` (all rows) and `OUT/summary.md` (a table per model and GPU,
the worst cell per pass, and each cell where the default options miss a
target, with its numbers), and prints the summary.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import json
import multiprocessing
import os
import sys
import time
from unittest import mock

from . import ablation

TRACE_GPU = "h200"
GPUS = ("a100", "h100", "h200")
SEQS = (2048, 8192)
# model -> layers kept (None: all)
MODELS = {"llama3-8b": None, "llama3-70b": 8, "mixtral-8x7b": 4}
# (label, world size, HSDP mesh or None)
MESHES = (("fsdp-8", 8, None), ("fsdp-64", 64, None), ("fsdp-1024", 1024, None), ("hsdp-32x8", 256, (32, 8)))
QUICK = {"models": {"llama3-8b": 2}, "gpus": ("h100",), "seqs": (2048,),
         "meshes": (("fsdp-64", 64, None), ("hsdp-4x8", 32, (4, 8)))}

# torchtitan's graph trainer (main at b5bcd76, 2026-08-21; no release holds it yet), pass
# "auto_bucketing" on the inductor backend: `schedule_overlap_bucketing_from_inductor_configs`
# with `aten_distributed_optimizations.collective_bucketing = True`, so every other knob at
# Inductor's config defaults, of which one differs from the function's: fusion regions on.
# (Its compute estimator there is "benchmark", which needs a GPU: the analytical one stands in.)
TITAN_OVERLAP = {"enable_fusion_regions": True}
# More room to prefetch than the defaults: memory (1 GB / 5% of the peak), bytes in flight
# (5 GB) and compute nodes prefetched over (200 matmuls).
RELAXED = {**TITAN_OVERLAP, "max_memory_increase_gb": 4.0, "max_memory_increase_ratio": 0.2,
           "max_in_flight_gb": 10.0, "max_compute_pre_fetch": 400}
# A small search over the scheduler's documented knobs; each entry is adapter options.
OVERLAP_SEARCH = {
    "defaults": {},
    "titan": TITAN_OVERLAP,
    "prefetch-relaxed": RELAXED,
    # Larger buckets than FSDP pre-bucketing's default cap (torch's bucket_cap_mb_by_bucket_idx_default).
    "bucket-cap-400mb": {**RELAXED, "bucket_cap_mb": 400},
}
GPU_INDEPENDENT = ("unbucketed", "torch")
PASSES = ("unbucketed", "torch", "project", "project-merge_all")
CANDIDATE = "project"


@dataclasses.dataclass(frozen=True)
class Unit:
    """One trace: a model at a sequence length on a mesh."""

    model: str
    layers: int | None
    seq: int
    mesh_label: str
    world_size: int
    mesh: tuple[int, int] | None

    @property
    def name(self) -> str:
        return f"{self.model}-seq{self.seq}-{self.mesh_label}"


def grid(kind: str = "full") -> tuple[list[Unit], tuple[str, ...]]:
    if kind not in ("full", "quick"):
        raise ValueError(f"--grid: expected 'full' or 'quick', got {kind!r}")
    spec = QUICK if kind == "quick" else {"models": MODELS, "gpus": GPUS, "seqs": SEQS, "meshes": MESHES}
    units = [Unit(m, layers, s, label, n, mesh) for m, layers in spec["models"].items() for s in spec["seqs"]
             for label, n, mesh in spec["meshes"]]
    return units, tuple(spec["gpus"])


def pass_names(ablate: bool) -> list[str]:
    """The passes every cell runs (the ablations with `ablate`)."""
    return list(PASSES) + list(overlap_passes()) + (ablation_passes() if ablate else [])


def ablation_passes() -> list[str]:
    """The candidate with one rule off, per rule (benchmarks/ablation.py)."""
    return [ablation.pass_name(rule) for rule in ablation.RULES]


def overlap_passes() -> dict[str, dict]:
    """Pass name -> the overlap scheduler's adapter options, one per search setting."""
    return {f"torch-overlap:{name}": options for name, options in OVERLAP_SEARCH.items()}


# ---------------------------------------------------------------------------
# One unit, in a worker process.


def _apply(name: str, base, gpu, prebucketed: dict | None = None):
    """(graph name, GraphModule) pairs of pass `name` over the traced graphs. `prebucketed`
    keeps the overlap scheduler's FSDP pre-bucketing per graph, GPU and bucket cap across its
    search settings: it is the first step of every setting and reads none of their other knobs."""
    from . import simulate as sim

    if name.startswith("torch-overlap:"):
        from conformance import adapters

        options = overlap_passes()[name]
        out = []
        for g, gm in base:
            start, options_after = _pre_bucketed(g, gm, gpu, options, {} if prebucketed is None else prebucketed)
            copy = sim.copy_module(start)
            with sim.sim_trace.estimation(gpu), _unlogged_overlap_estimates():
                try:
                    adapters.load("torch-overlap").apply_fx(copy, **options_after)
                except RuntimeError as e:
                    if "cyclic" not in str(e):
                        raise
                    # The scheduler's own remedy, which its error names; the row says it was used.
                    copy = sim.copy_module(start)
                    with autofix_cycles():
                        adapters.load("torch-overlap").apply_fx(copy, **options_after)
                    copy.meta[AUTOFIXED] = True
            out.append((g, copy))
        return out
    rule = ablation.rule_of(name)
    if rule is not None:
        with ablation.turned_off(rule):
            return [(g, sim.apply_pass(CANDIDATE, gm, gpu)) for g, gm in base]
    return [(g, sim.apply_pass(name, gm, gpu)) for g, gm in base]


def _pre_bucketed(graph_name: str, gm, gpu, options: dict, memo: dict):
    """The graph the overlap scheduler starts from under `options` and the options that then
    skip its pre-bucketing: torch's `pre_bucket_fsdp_collectives`, run once per graph and
    bucket cap (the cap it resolves under `gpu`: its default reads the interconnect). Where
    the scheduler has no such step (torch 2.11), the traced graph and `options` unchanged."""
    from torch._inductor.fx_passes import fsdp, overlap_scheduling

    from . import simulate as sim

    if "pre_bucketing_fsdp_collectives" not in inspect.signature(overlap_scheduling.schedule_overlap_bucketing).parameters:
        return gm, options
    cap = options.get("bucket_cap_mb")
    cap = None if cap is None else float(cap)
    with sim.sim_trace.estimation(gpu):
        if hasattr(fsdp, "compute_pre_bucket_cap_mb") and hasattr(fsdp, "identify_fsdp_groups"):
            groups, group_size = fsdp.identify_fsdp_groups(gm)
            if groups and group_size is not None:
                cap = fsdp.compute_pre_bucket_cap_mb(group_size, cap)
            key = (graph_name, options.get("bucket_mode"), cap)
        else:
            key = (graph_name, options.get("bucket_mode"), gpu.key, cap)
        if key not in memo:
            copy = sim.copy_module(gm)
            fsdp.pre_bucket_fsdp_collectives(copy, mode=options.get("bucket_mode"), bucket_cap_mb=cap)
            memo[key] = copy
    return memo[key], {**options, "pre_bucketing_fsdp_collectives": False}


@contextlib.contextmanager
def _unlogged_overlap_estimates():
    """torch's overlap scheduler without its table of compute estimates: it always builds one
    for structured logging (counting every node's flops, a tenth of its time here), which the
    sweep never reads. The estimates themselves are untouched."""
    from torch._inductor.fx_passes import node_runtime_estimation

    if not hasattr(node_runtime_estimation, "_log_compute_estimations"):
        yield
        return
    with mock.patch.object(node_runtime_estimation, "_log_compute_estimations", lambda *args, **kwargs: None):
        yield


AUTOFIXED = "sweep_autofix_cycles"


@contextlib.contextmanager
def autofix_cycles():
    """torch's overlap scheduler with `overlap_scheduling_autofix_cycles` on: where its
    bucketing would make a cycle (an extra dependency against the graph's order) it drops
    the dependency instead of raising."""
    import torch._inductor.config as inductor_config

    opts = inductor_config.aten_distributed_optimizations
    if not hasattr(opts, "overlap_scheduling_autofix_cycles"):
        yield
        return
    with inductor_config.patch({"aten_distributed_optimizations.overlap_scheduling_autofix_cycles": True}):
        yield


def _play(name: str, graphs, base_names, estimator, gpu):
    from . import sim_timeline as tl
    from . import simulate as sim

    added = {n.name for (_, gm), names in zip(graphs, base_names) for n in gm.graph.nodes if n.name not in names}
    est = estimator.for_pass(added)
    with sim.sim_trace.estimation(gpu):
        return tl.run_step([(g, gm.graph) for g, gm in graphs], est.compute_ms, est.comm_ms)


def run_unit(unit: Unit, gpus: tuple[str, ...], comm_models: tuple[str, ...], efficiency: float,
             out_dir: str, ablate: bool = False, done: list[dict] | None = None) -> list[dict]:
    """Trace `unit` once; every pass on every GPU under every comm model, but those the
    rows `done` (of a previous run) already hold. Returns the rows, `done`'s among them."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from . import sim_trace
    from . import simulate as sim

    sim.quiet_torch_logs()

    start = time.perf_counter()
    program = sim_trace.build(unit.model, unit.world_size, unit.mesh, unit.layers, unit.seq, 1)
    traced = sim_trace.trace(program, sim_trace.gpu(TRACE_GPU))
    base = [("forward", traced.graphs[0]), ("backward", traced.graphs[1])]
    base_names = [{n.name for n in gm.graph.nodes} for _, gm in base]
    done = [r for r in done or [] if r["pass"] != "torch-overlap-best" and r["comm_model"] in comm_models]
    once: dict = {}
    prebucketed: dict = {}
    rows = []
    for gpu_name in gpus:
        gpu = sim_trace.gpu(gpu_name)
        estimator = sim.Estimator(gpu, compute_efficiency=efficiency)
        cell_rows = [r for r in done if r["gpu"] == gpu_name]
        had = {r["pass"] for r in cell_rows}
        for name in [n for n in pass_names(ablate) if n not in had]:
            t0 = time.perf_counter()
            try:
                graphs = once.get(name) or _apply(name, base, gpu, prebucketed)
            except Exception as e:  # torch's pass failing on a graph: the cell says so, the sweep goes on
                if name in PASSES:
                    raise
                print(f"{unit.name}-{gpu_name}: {name} failed: {e}", file=sys.stderr, flush=True)
                cell_rows += [{"pass": name, "model": unit.model, "gpu": gpu_name, "seq": unit.seq,
                               "mesh": unit.mesh_label, "comm_model": cm, "failed": str(e).splitlines()[0][:300]}
                              for cm in comm_models]
                continue
            if name in GPU_INDEPENDENT:
                once[name] = graphs
            pass_s = time.perf_counter() - t0
            for cm in comm_models:
                step = _play(name, graphs, base_names, estimator.with_models(cm, efficiency), gpu)
                result = sim.PassResult(name, step, graphs, pass_s)
                row = result.row(unit.model, gpu_name, unit.world_size)
                graph_bound = sum(max(g.compute_ms, max(g.comm_ms.values(), default=0.0)) for g in step.graphs)
                row.update(graph_bound_ms=round(graph_bound, 3),
                           step_over_graph_bound=round(step.step_ms / graph_bound, 4) if graph_bound else 0.0)
                if any(gm.meta.get(AUTOFIXED) for _, gm in graphs):
                    row["note"] = "autofix_cycles"
                row.update(seq=unit.seq, mesh=unit.mesh_label, layers=unit.layers, comm_model=cm,
                           compute_efficiency=efficiency, pass_seconds=round(pass_s, 2),
                           block_bytes=program.block_bytes)
                cell_rows.append(row)
        cell_rows += _best_overlap(cell_rows)
        cell = f"{unit.name}-{gpu_name}"
        with open(os.path.join(out_dir, "cells", cell + ".json"), "w") as f:
            json.dump(cell_rows, f, indent=1)
        rows += cell_rows
    print(f"{unit.name}: traced in {traced.seconds:.0f} s, done in {time.perf_counter() - start:.0f} s",
          file=sys.stderr, flush=True)
    return rows


def _best_overlap(rows: list[dict]) -> list[dict]:
    """Per comm model, the overlap scheduler's fastest search setting, as `torch-overlap-best`."""
    out = []
    for cm in sorted({r["comm_model"] for r in rows}):
        tried = [r for r in rows if r["comm_model"] == cm and r["pass"].startswith("torch-overlap")
                 and "failed" not in r]
        if tried:
            best = min(tried, key=lambda r: r["step_ms"])
            out.append({**best, "pass": "torch-overlap-best", "setting": best["pass"]})
    return out


# ---------------------------------------------------------------------------
# Summary.


def cell_key(r: dict) -> tuple:
    return r["model"], r["gpu"], r["seq"], r["mesh"], r["comm_model"]


def verdicts(rows: list[dict], candidate: str = CANDIDATE) -> list[dict]:
    """Per cell and comm model: the candidate's numbers and whether it meets each target."""
    cells: dict = {}
    for r in rows:
        if "failed" not in r:
            cells.setdefault(cell_key(r), {})[r["pass"]] = r
    out = []
    for key, by in sorted(cells.items()):
        c = by.get(candidate)
        if c is None:
            continue
        torch_passes = [p for p in by if p in ("torch", "torch-overlap-best")]
        best_torch = min(by[p]["step_ms"] for p in torch_passes) if torch_passes else None
        other_rows = [r for p, r in by.items() if p != candidate and ablation.rule_of(p) is None]
        peak_limit = by["unbucketed"]["peak_bytes"] + 2 * (c["block_bytes"] or 0) if "unbucketed" in by else None
        others = [r["exposed_comm_ms"] for r in other_rows]
        # The same comparison among the passes that keep the peak target: less exposed
        # communication bought with memory over the limit is told apart.
        others_in_peak = [r["exposed_comm_ms"] for r in other_rows if peak_limit is None or r["peak_bytes"] <= peak_limit]
        out.append({
            "cell": key, "step_ms": c["step_ms"], "step_over_bound": c["step_over_bound"],
            "exposed_comm_ms": c["exposed_comm_ms"], "best_torch_ms": best_torch,
            "step_over_best_torch": round(c["step_ms"] / best_torch, 4) if best_torch else None,
            "least_other_exposed_ms": min(others) if others else None,
            "least_other_exposed_in_peak_ms": min(others_in_peak) if others_in_peak else None,
            "peak_gib": c["peak_bytes"] / 2**30, "peak_limit_gib": peak_limit / 2**30 if peak_limit else None,
            "bound": c["step_over_bound"] <= 1.10,
            "torch": best_torch is None or c["step_ms"] <= best_torch,
            "exposed": not others or c["exposed_comm_ms"] <= min(others) + 1e-6,
            "exposed_in_peak": not others_in_peak or c["exposed_comm_ms"] <= min(others_in_peak) + 1e-6,
            "peak": peak_limit is None or c["peak_bytes"] <= peak_limit,
            "comm_over_compute": round(c["comm_ms"] / c["compute_ms"], 3) if c["compute_ms"] else None,
            "step_over_graph_bound": c.get("step_over_graph_bound"),
        })
    return out


def _md(head: list[str], body: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"] + \
        ["| " + " | ".join(row) + " |" for row in body]


def summary(rows: list[dict]) -> str:
    """The tables: one per (model, GPU), the worst cell per pass, the candidate's misses,
    and the passes that failed on a cell (rows with `failed`, left out of every table)."""
    lines = []
    failed, rows = [r for r in rows if "failed" in r], [r for r in rows if "failed" not in r]
    order = ["unbucketed", "torch", *overlap_passes(), "torch-overlap-best", "project", "project-merge_all"]
    passes = [p for p in order if any(r["pass"] == p for r in rows)]
    rows_ablated, rows = rows, [r for r in rows if ablation.rule_of(r["pass"]) is None]
    for model, gpu in sorted({(r["model"], r["gpu"]) for r in rows}):
        sub = [r for r in rows if r["model"] == model and r["gpu"] == gpu]
        lines += [f"### {model}, {gpu}", "",
                  "step ms / exposed ms / step÷bound per pass; cells: sequence, mesh, comm model", ""]
        body = []
        for key in sorted({(r["seq"], r["mesh"], r["comm_model"]) for r in sub}):
            by = {r["pass"]: r for r in sub if (r["seq"], r["mesh"], r["comm_model"]) == key}
            body.append([f"{key[0]}, {key[1]}, {key[2]}"] + [
                f"{by[p]['step_ms']:.0f} / {by[p]['exposed_comm_ms']:.0f} / {by[p]['step_over_bound']:.3f}"
                if p in by else "-" for p in passes])
        lines += _md(["cell"] + passes, body) + [""]
    lines += ["### Worst cell per pass", ""]
    body = []
    for p in passes:
        sub = [r for r in rows if r["pass"] == p]
        worst_bound = max(sub, key=lambda r: r["step_over_bound"])
        worst_exposed = max(sub, key=lambda r: r["exposed_comm_pct"])
        best_torch = _best_torch_by_cell(rows)
        ratio = [(r["step_ms"] / best_torch[cell_key(r)], r) for r in sub if best_torch.get(cell_key(r))]
        worst_ratio = max(ratio, key=lambda x: x[0]) if ratio else None
        body.append([p, f"{worst_bound['step_over_bound']:.3f} ({_where(worst_bound)})",
                     f"{worst_exposed['exposed_comm_pct']:.1f}% ({_where(worst_exposed)})",
                     f"{worst_ratio[0]:.3f} ({_where(worst_ratio[1])})" if worst_ratio else "-"])
    lines += _md(["pass", "worst step÷bound", "worst exposed share", "worst step ÷ best torch"], body) + [""]
    v = verdicts(rows)
    misses = [x for x in v if not (x["bound"] and x["torch"] and x["exposed"] and x["peak"])]
    lines += [f"### Cells where `{CANDIDATE}` misses a target ({len(misses)} of {len(v)})", ""]
    lines += [f"Least exposed communication: missed in {sum(not x['exposed'] for x in v)} cells; against only the passes "
              f"whose peak is within the limit, in {sum(not x['exposed_in_peak'] for x in v)}.", ""]
    body = [[", ".join(str(k) for k in x["cell"]), _mark(x["bound"], f"{x['step_over_bound']:.3f}"),
             _mark(x["torch"], f"{x['step_over_best_torch']:.3f}" if x["step_over_best_torch"] else "-"),
             _mark(x["exposed"], f"{x['exposed_comm_ms']:.0f} vs {x['least_other_exposed_ms']:.0f}"
                   + (f" ({x['least_other_exposed_in_peak_ms']:.0f} within peak)"
                      if x["least_other_exposed_in_peak_ms"] not in (None, x["least_other_exposed_ms"]) else "")),
             _mark(x["peak"], f"{x['peak_gib']:.2f} / {x['peak_limit_gib']:.2f}" if x["peak_limit_gib"] else "-"),
             str(x["comm_over_compute"]), str(x["step_over_graph_bound"])] for x in misses]
    lines += _md(["cell", "step÷bound ≤ 1.10", "step ÷ best torch ≤ 1", "exposed ms vs least other",
                  "peak GiB / limit", "comm ÷ compute", "step ÷ per-graph bound"], body)
    lines += ["", "Per-graph bound: each graph's max(compute, busiest stream) summed; a backward's "
              "reductions cannot hide behind the forward, so where the backward's communication exceeds its "
              "compute, step ÷ bound cannot reach 1.10 whatever the pass."]
    if len(rows_ablated) > len(rows):
        lines += ["", *ablation_summary(rows_ablated)]
    if failed:
        lines += ["", "### Passes that failed on a cell", ""]
        lines += _md(["cell", "pass", "error"], [[_where(r), r["pass"], r["failed"]] for r in failed])
    autofixed = sorted({(_where(r), r["pass"]) for r in rows if r.get("note") == "autofix_cycles"})
    if autofixed:
        lines += ["", "torch's overlap scheduler raised on a cycle its bucketing made and ran again with "
                  "`overlap_scheduling_autofix_cycles` (the remedy its error names) in: "
                  + "; ".join(f"{p} ({w})" for w, p in autofixed) + "."]
    return "\n".join(lines) + "\n"


TARGETS = ("bound", "torch", "exposed", "peak")


def ablation_summary(rows: list[dict]) -> list[str]:
    """Per rule: the cells where the default meets a target and the rule turned off
    misses it, and the worst change in step, exposed communication and peak."""
    base = {v["cell"]: v for v in verdicts(rows)}
    lines = ["### Each rule turned off", "",
             "targets the default meets and the rule off misses (cells, of "
             f"{len(base)}); worst change of the rule off against the default, with its cell", ""]
    body = []
    for rule, (what, _) in ablation.RULES.items():
        name = ablation.pass_name(rule)
        off = {v["cell"]: v for v in verdicts(rows, candidate=name)}
        cells = [k for k in base if k in off]
        if not cells:
            continue
        lost = {t: sum(base[k][t] and not off[k][t] for k in cells) for t in TARGETS}
        gained = sum(not base[k][t] and off[k][t] for k in cells for t in TARGETS)

        def worst(field: str, ratio: bool):
            key = (lambda k: off[k][field] / base[k][field] if base[k][field] else 1.0) if ratio else \
                (lambda k: off[k][field] - base[k][field])
            k = max(cells, key=key)
            return key(k), k
        step, step_at = worst("step_ms", True)
        fastest = min(cells, key=lambda k: off[k]["step_ms"] / base[k]["step_ms"])
        exposed, exposed_at = worst("exposed_comm_ms", False)
        peak, peak_at = worst("peak_gib", False)
        body.append([f"`{rule}`: {what}", ", ".join(f"{t} {n}" for t, n in lost.items() if n) or "none",
                     str(gained), f"x{step:.3f} ({_cell(step_at)})",
                     f"x{off[fastest]['step_ms'] / base[fastest]['step_ms']:.3f} ({_cell(fastest)})",
                     f"{exposed:+.0f} ms ({_cell(exposed_at)})", f"{peak:+.2f} GiB ({_cell(peak_at)})"])
    return lines + _md(["rule", "targets lost", "targets gained", "slowest step", "fastest step",
                        "most exposed", "highest peak"], body)


def _cell(key: tuple) -> str:
    return " ".join(str(k) for k in key)


def _mark(ok: bool, text: str) -> str:
    return text if ok else f"**{text}**"


def _where(r: dict) -> str:
    return f"{r['model']} {r['gpu']} seq {r['seq']} {r['mesh']} {r['comm_model']}"


def _best_torch_by_cell(rows: list[dict]) -> dict:
    best: dict = {}
    for r in rows:
        if r["pass"] in ("torch", "torch-overlap-best"):
            k = cell_key(r)
            best[k] = min(best.get(k, r["step_ms"]), r["step_ms"])
    return best


# ---------------------------------------------------------------------------


def _cells_of(unit: Unit, gpus: tuple[str, ...], out_dir: str) -> list[dict] | None:
    """The rows a previous run wrote for `unit` on every GPU, or None if any cell is missing."""
    rows = []
    for gpu in gpus:
        path = os.path.join(out_dir, "cells", f"{unit.name}-{gpu}.json")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            rows += json.load(f)
    return rows


def resumed(units: list[Unit], gpus: tuple[str, ...], comm_models: tuple[str, ...], ablate: bool,
            out_dir: str) -> tuple[list[dict], list[tuple[Unit, list[dict] | None]]]:
    """The rows of the units `out_dir` holds whole, and the rest, each with the rows
    it has (None: it runs again whole, as where a comm model or a GPU is missing)."""
    rows, todo = [], []
    for u in units:
        done = _cells_of(u, gpus, out_dir)
        if done is not None and not {r["comm_model"] for r in done} >= set(comm_models):
            done = None
        have = {(r["gpu"], r["pass"], r["comm_model"]) for r in done or []}
        if done is not None and all((g, p, cm) in have for g in gpus for p in pass_names(ablate)
                                    for cm in comm_models):
            rows += [r for r in done if r["comm_model"] in comm_models]
        else:
            todo.append((u, done))  # a pass missing (a new search setting, the ablations): only those run
    return rows, todo


def main(argv=None) -> int:
    from . import simulate as sim

    parser = argparse.ArgumentParser(prog="python -m benchmarks.sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="results/sweep", help="folder for the JSON and summary")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (one trace each at a time)")
    parser.add_argument("--grid", default="full", help="full (the grid above) or quick (one small cell)")
    parser.add_argument("--comm-models", default=",".join(sim.COMM_MODELS),
                        help="comma-separated: " + ", ".join(sim.COMM_MODELS))
    parser.add_argument("--compute-efficiency", type=float, default=1.0, metavar="E",
                        help="the fraction of torch's roofline speed the compute reaches")
    parser.add_argument("--only", help="run only the units whose name contains this")
    parser.add_argument("--ablate", action="store_true",
                        help="also run the candidate with each planning rule turned off (benchmarks/ablation.py)")
    parser.add_argument("--resume", action="store_true",
                        help="reuse the rows OUT/cells already holds: a unit runs only the passes its cells lack")
    args = parser.parse_args(argv)
    try:
        units, gpus = grid(args.grid)
        comm_models = tuple(c.strip() for c in args.comm_models.split(",") if c.strip())
        for cm in comm_models:
            sim.Estimator(sim.sim_trace.gpu(TRACE_GPU), cm, args.compute_efficiency)
        if args.jobs < 1:
            raise ValueError(f"--jobs: expected at least 1, got {args.jobs}")
    except ValueError as e:
        parser.error(str(e))
    if args.only:
        units = [u for u in units if args.only in u.name]
    os.makedirs(os.path.join(args.out, "cells"), exist_ok=True)
    start = time.perf_counter()
    if args.resume:
        rows, todo = resumed(units, gpus, comm_models, args.ablate, args.out)
    else:
        rows, todo = [], [(u, None) for u in units]
    work = [(u, gpus, comm_models, args.compute_efficiency, args.out, args.ablate, done) for u, done in todo]
    # Largest traces first, so the two workers finish together.
    work.sort(key=lambda w: -(w[0].world_size * w[0].seq * (w[0].layers or 32)))
    with multiprocessing.get_context("spawn").Pool(args.jobs, maxtasksperchild=4) as pool:
        rows += [r for part in pool.starmap(run_unit, work, chunksize=1) for r in part]
    with open(os.path.join(args.out, "sweep.json"), "w") as f:
        json.dump(rows, f, indent=1)
    text = summary(rows) + (f"\n{len(todo)} traces run ({len(units) - len(todo)} reused), {len(rows)} rows in "
                            f"{time.perf_counter() - start:.0f} s\n")
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
