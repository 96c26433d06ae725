"""A simulated training step on H100/H200/A100 GPUs at real model sizes.

    python -m benchmarks.simulate --model llama3-8b --world-size 8 64 512 --gpu h200 \\
        [--passes unbucketed,torch,torch-overlap,project,project-merge_all] [--layers K] \\
        [--seq 8192] [--batch 1] [--mesh RxS] [--json PATH] [--plot PATH] [--exposed N]

The model is traced once per world size, forward and backward, on fake tensors
and a fake process group, to the post-grad graphs Inductor compiles for the GPU
(sim_trace.py); every pass runs on a copy of those graphs, then the step is
played on streams (sim_timeline.py): the compute in graph order on one
stream, each process group's collectives in issue order on one of their own.

Durations are torch's own estimates, inside the GPU's figures
(sim_trace.estimation):
- a compute node: `estimate_roofline_runtime_ms` (max of FLOPs at 75% of the
  dense peak and bytes read + written at HBM bandwidth; views free; no fusion);
- a collective: `estimate_nccl_collective_runtime_from_fx_node`, torch's
  NCCL ring/tree model (tuning.cc's latencies and protocols) on its input +
  output bytes and its group's size: a group within a node of 8 GPUs on
  NVLink (Hopper 370 GB/s per GPU, Ampere 240), a larger one on InfiniBand at
  one NIC per GPU (NDR 50 GB/s, HDR 25; scaled by torch's NIC-efficiency and
  multi-rail corrections); the figures are printed with the table;
- an op a pass adds (copy-in, copy-out, a copy per member): its roofline
  (bytes at HBM bandwidth) plus `LAUNCH_US` per kernel it launches;
- views, allocations, waits: nothing.

Per pass and world size: the collectives per graph, step_ms (forward +
backward), compute_ms (the compute stream's busy time), comm_ms (the busiest
communication stream's), exposed_comm_ms (the step less the compute: time the
compute stream waits on a collective) and its share of the step, bound_ms =
max(compute_ms, comm_ms), step / bound, and peak_bytes (live bytes along the
step, gathered parameters and the caller's inputs included). `--json` writes
those as a list of objects; `--plot` a PNG of each pass's streams (one per
world size, `-wN` added to the name when there are several); `--exposed K`
lists each pass's K collectives whose waits held the compute longest, with
their positions in the graph.

Left out: fusion (every node is its own kernel, so memory-bound work is
overcounted alike for every pass), NCCL channels and their contention with
compute, CPU launch gaps, and where a group's ranks sit (torch's model knows a
group's size only: a group of 8 is one node).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import logging
import math
import sys
import time

import torch
import torch.fx as fx

from . import sim_timeline as tl
from . import sim_trace

LAUNCH_US = 5.0  # one kernel or op launch on the GPU
FOREACH_MEMBERS = 125  # copies per Inductor foreach kernel (it splits a group by kernel arguments)

DEFAULT_PASSES = ("unbucketed", "torch", "torch-overlap", "project", "project-merge_all")
# A pass name -> (adapter name, options); any other adapter name conformance accepts runs with no options.
NAMED_PASSES = {
    "unbucketed": (None, {}),
    "torch": ("torch", {}),
    "torch-overlap": ("torch-overlap", {}),
    "project": ("project", {}),
    "project-merge_all": ("project", {"policy": "merge_all"}),
}

KEYS = ("pass", "world_size", "model", "gpu", "collectives", "step_ms", "compute_ms", "comm_ms", "exposed_comm_ms",
        "exposed_comm_pct", "bound_ms", "step_over_bound", "peak_bytes")


def resolve_pass(name: str):
    """(adapter or None, options) for a pass name."""
    from conformance import adapters

    if name in NAMED_PASSES:
        adapter, options = NAMED_PASSES[name]
        return (adapters.load(adapter) if adapter else None), dict(options)
    if name in adapters.BUILTIN or ":" in name:
        try:
            return adapters.load(name), {}
        except Exception as e:
            raise ValueError(f"--passes: cannot load pass {name!r}: {e}") from e
    raise ValueError(f"--passes: {name!r} is not a known pass; choose from "
                     f"{sorted(set(NAMED_PASSES) | set(adapters.BUILTIN))} or module:object")


def parse_passes(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise ValueError("--passes: no pass named")
    for name in names:
        resolve_pass(name)
    return names


def parse_mesh(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        r, s = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"--mesh: expected RxS (replicas x shards), got {text!r}") from None
    if r < 1 or s < 1:
        raise ValueError(f"--mesh: expected positive sizes, got {text!r}")
    return r, s


# ---------------------------------------------------------------------------
# Estimates.


def check_torch() -> None:
    """The estimators this simulator calls are torch 2.13's."""
    from torch._inductor.fx_passes import overlap_scheduling

    if not hasattr(overlap_scheduling, "estimate_roofline_runtime_ms"):
        raise RuntimeError(f"torch {torch.__version__} has no overlap_scheduling.estimate_roofline_runtime_ms: "
                           "the simulator needs torch 2.13 or later")


def _signature(node: fx.Node):
    """What a node's estimate depends on: its op, its arguments' and result's layouts."""

    def dims(sizes):  # a symbolic size (a dynamic shape) by its expression: SymInts do not hash
        return tuple(d if isinstance(d, int) else repr(d) for d in sizes)

    def layout(x):
        if isinstance(x, fx.Node):
            x = x.meta.get("val")
        if isinstance(x, torch.Tensor):
            return (dims(x.shape), dims(x.stride()), x.dtype, x.device.type)
        if isinstance(x, (list, tuple)):
            return tuple(layout(v) for v in x)
        if isinstance(x, dict):
            return tuple((k, layout(v)) for k, v in x.items())
        return repr(x)

    return node.target, layout(node.args), layout(node.kwargs), layout(node.meta.get("val"))


COMM_MODELS = ("torch", "measured")


def group_layout(group: str) -> tuple[int, int]:
    """(ranks, ranks per node) of process group `group`, its ranks placed in nodes of
    `sim_trace.GPUS_PER_NODE` consecutive ranks (an HSDP replica group has one rank
    per node when the shard group fills a node)."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _resolve_process_group

    return ranks_layout(dist.get_process_group_ranks(_resolve_process_group(group)))


def ranks_layout(ranks: list[int], per_node: int = sim_trace.GPUS_PER_NODE) -> tuple[int, int]:
    """(ranks, ranks per node) of a group of global ranks, nodes holding `per_node` consecutive ranks."""
    nodes = {r // per_node for r in ranks}
    return len(ranks), max(1, len(ranks) // max(1, len(nodes)))


def collective_bytes(node: fx.Node) -> int:
    """A collective's larger side: an all-gather's output, a reduction's input."""
    inputs = [a.meta.get("val") for a in node.all_input_nodes]
    return max(tl.tensor_bytes(node.meta.get("val")), sum(tl.tensor_bytes(v) for v in inputs))


@dataclasses.dataclass
class Estimator:
    """The simulated durations of nodes of graphs on GPU `gpu`, cached by signature
    (a model's layers repeat). `added`: names of nodes a pass added, charged a launch
    per kernel besides their bytes.

    `comm_model`: "torch" (torch's NCCL model) or "measured" (published nccl-tests bus
    bandwidths by message size, group size and node count: benchmarks/comm_published.py).
    `compute_efficiency`: the fraction of torch's roofline speed the compute reaches
    (1: the roofline; a measured stack's MFU / the roofline's)."""

    gpu: sim_trace.Gpu
    comm_model: str = "torch"
    compute_efficiency: float = 1.0
    cache: dict = dataclasses.field(default_factory=dict)
    failures: dict = dataclasses.field(default_factory=dict)
    added: frozenset = frozenset()

    def __post_init__(self):
        if self.comm_model not in COMM_MODELS:
            raise ValueError(f"--comm-model: {self.comm_model!r} is not one of {COMM_MODELS}")
        if not 0 < self.compute_efficiency <= 1:
            raise ValueError(f"--compute-efficiency: expected a fraction in (0, 1], got {self.compute_efficiency}")

    def with_models(self, comm_model: str, compute_efficiency: float) -> Estimator:
        """This estimator under other models, sharing its cache (keyed by comm model)."""
        return dataclasses.replace(self, comm_model=comm_model, compute_efficiency=compute_efficiency)

    def for_pass(self, added) -> Estimator:
        return dataclasses.replace(self, added=frozenset(added))

    def _fail(self, what: str, node: fx.Node, e: Exception) -> None:
        key = f"{what}: {node.target}: {type(e).__name__}"
        self.failures[key] = self.failures.get(key, 0) + 1

    def compute_ms(self, node: fx.Node) -> float:
        key = ("compute", _signature(node))
        ms = self.cache.get(key)
        if ms is None:
            ms = self._roofline(node)
            self.cache[key] = ms
        ms /= self.compute_efficiency
        if node.name in self.added:
            ms += self.launches(node) * LAUNCH_US / 1e3
        return ms

    @staticmethod
    def launches(node: fx.Node) -> int:
        val = node.meta.get("val")
        outputs = len(val) if isinstance(val, (list, tuple)) else 1
        return max(1, math.ceil(outputs / FOREACH_MEMBERS))

    def _roofline(self, node: fx.Node) -> float:
        from torch._inductor.fx_passes.overlap_scheduling import estimate_roofline_runtime_ms

        try:
            return float(estimate_roofline_runtime_ms(node))
        except Exception as e:
            self._fail("roofline", node, e)
        # Fallback: the bytes read and written at HBM bandwidth (torch's transfer time).
        try:
            from torch.utils._pytree import tree_flatten
            from torch.utils._runtime_estimation import get_transfer_time

            def val(x):
                return x.meta.get("val") if isinstance(x, fx.Node) else x

            args = fx.node.map_arg((node.args, node.kwargs), val)
            return float(get_transfer_time(tree_flatten(args)[0], tree_flatten(node.meta.get("val"))[0])) / 1e6
        except Exception as e:
            self._fail("transfer", node, e)
            return 0.0

    def comm_ms(self, node: fx.Node) -> float:
        from torch._inductor.comm_analysis import estimate_nccl_collective_runtime_from_fx_node

        key = ("comm", self.comm_model, _signature(node))
        ms = self.cache.get(key)
        if ms is None:
            try:
                if self.comm_model == "measured":
                    from . import comm_published

                    ranks, per_node = group_layout(tl.group_of(node))
                    ms = comm_published.collective_ms(tl.collective_kind(node), collective_bytes(node), ranks,
                                                      self.gpu.key, per_node)
                else:
                    ms = float(estimate_nccl_collective_runtime_from_fx_node(node, use_nccl_estimator=False))
            except Exception as e:
                self._fail(self.comm_model, node, e)
                ms = 0.0
            self.cache[key] = ms
        return ms


# ---------------------------------------------------------------------------
# Passes on copies of the traced graphs.


def copy_module(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of `gm` whose graph a pass may rewrite: new nodes, same names, in the same
    order, each node's meta a copy of the original's (its fake values shared). The order is
    kept even where it is not topological (torch's FSDP pre-bucketing leaves merged
    collectives after some of their users): torch's overlap scheduler reads it before it
    sorts, so a sorted copy schedules differently."""
    graph = fx.Graph(tracer_cls=gm.graph._tracer_cls)
    graph._codegen = copy.deepcopy(gm.graph._codegen)
    val_map: dict = {}
    old_output = gm.graph.output_node()
    for node in _inputs_first(gm.graph):
        if node is not old_output:
            val_map[node] = graph.node_copy(node, lambda n: val_map[n])
    last = graph._root
    for node in gm.graph.nodes:
        if node is not old_output:
            last.append(val_map[node])
            last = val_map[node]
    new_output = graph.output(fx.node.map_arg(old_output.args[0], lambda n: val_map[n]), type_expr=old_output.type)
    new_output.meta = copy.copy(old_output.meta)
    return fx.GraphModule(gm, graph)


def _inputs_first(graph: fx.Graph) -> list[fx.Node]:
    """`graph`'s nodes with every node after its inputs, otherwise in the graph's order (the
    graph's order itself where that is topological)."""
    placed: set = set()
    order: list[fx.Node] = []
    for root in graph.nodes:
        stack = [(root, False)]
        while stack:
            node, inputs_placed = stack.pop()
            if node in placed:
                continue
            if inputs_placed:
                placed.add(node)
                order.append(node)
                continue
            stack.append((node, True))
            stack.extend((n, False) for n in reversed(node._input_nodes) if n not in placed)
    return order


def apply_pass(name: str, gm: fx.GraphModule, gpu: sim_trace.Gpu) -> fx.GraphModule:
    adapter, options = resolve_pass(name)
    out = copy_module(gm)
    if adapter is not None:
        with sim_trace.estimation(gpu):
            adapter.apply_fx(out, **options)
    return out


# ---------------------------------------------------------------------------
# One world size.


@dataclasses.dataclass
class PassResult:
    name: str
    step: tl.StepRun
    graphs: list  # [(name, GraphModule)]
    seconds: float

    def row(self, model: str, gpu: str, world_size: int) -> dict:
        s = self.step
        step_ms, bound = s.step_ms, s.bound_ms
        return {
            "pass": self.name, "world_size": world_size, "model": model, "gpu": gpu,
            "collectives": {g.name: dict(sorted(g.counts.items())) for g in s.graphs},
            "step_ms": round(step_ms, 3), "compute_ms": round(s.compute_ms, 3), "comm_ms": round(s.comm_ms, 3),
            "exposed_comm_ms": round(s.exposed_comm_ms, 3),
            "exposed_comm_pct": round(100 * s.exposed_comm_ms / step_ms, 2) if step_ms else 0.0,
            "bound_ms": round(bound, 3), "step_over_bound": round(step_ms / bound, 4) if bound else 0.0,
            "peak_bytes": int(s.peak_bytes),
        }


@dataclasses.dataclass
class WorldResult:
    world_size: int
    traced: sim_trace.Traced
    passes: list  # PassResult
    estimator: Estimator
    trace_seconds: float
    total_seconds: float
    group_sizes: dict  # process group name -> ranks


def simulate_world(traced: sim_trace.Traced, gpu: sim_trace.Gpu, passes: list[str],
                   estimator: Estimator | None = None, log=None) -> list[PassResult]:
    estimator = estimator or Estimator(gpu)
    base = [("forward", traced.graphs[0]), ("backward", traced.graphs[1])]
    base_names = [{n.name for n in gm.graph.nodes} for _, gm in base]
    results = []
    for name in passes:
        start = time.perf_counter()
        graphs = [(g, apply_pass(name, gm, gpu)) for g, gm in base]
        added = {n.name for (_, gm), names in zip(graphs, base_names) for n in gm.graph.nodes if n.name not in names}
        est = estimator.for_pass(added)
        with sim_trace.estimation(gpu):
            step = tl.run_step([(g, gm.graph) for g, gm in graphs], est.compute_ms, est.comm_ms)
        results.append(PassResult(name, step, graphs, time.perf_counter() - start))
        if log:
            log(f"  {name}: {results[-1].seconds:.1f} s")
    return results


def simulate(model: str, world_sizes: list[int], gpu: str = "h200", passes=DEFAULT_PASSES, layers: int | None = None,
             seq: int = 8192, batch: int = 1, mesh: tuple[int, int] | None = None, log=None,
             comm_model: str = "torch", compute_efficiency: float = 1.0, ac: str = "none") -> list[WorldResult]:
    """Trace `model` once per world size and play every pass's step. Unknown names raise
    ValueError naming the parameter."""
    sim_trace.check_model(model)
    g = sim_trace.gpu(gpu)
    passes = list(passes)
    for p in passes:
        resolve_pass(p)
    if not world_sizes or any(n < 1 for n in world_sizes):
        raise ValueError(f"--world-size: expected positive rank counts, got {world_sizes}")
    if mesh is not None:
        bad = [n for n in world_sizes if n != mesh[0] * mesh[1]]
        if bad:
            raise ValueError(f"--mesh: {mesh[0]}x{mesh[1]} is {mesh[0] * mesh[1]} ranks, not {bad}")
    if seq < 1 or batch < 1:
        raise ValueError("--seq and --batch must be positive")
    Estimator(g, comm_model, compute_efficiency)  # checks the models' names
    if ac not in sim_trace.AC_MODES:
        raise ValueError(f"--ac: {ac!r} is not one of {sim_trace.AC_MODES}")
    check_torch()
    out = []
    for n in world_sizes:
        start = time.perf_counter()
        program = sim_trace.build(model, n, mesh, layers, seq, batch, ac)
        traced = sim_trace.trace(program, g)
        if log:
            log(f"world {n}: traced in {traced.seconds:.1f} s")
        estimator = Estimator(g, comm_model, compute_efficiency)
        results = simulate_world(traced, g, passes, estimator, log)
        out.append(WorldResult(n, traced, results, estimator, traced.seconds, time.perf_counter() - start,
                               _group_sizes(results)))
    return out


def _group_sizes(results: list[PassResult]) -> dict:
    from torch.distributed.distributed_c10d import _get_group_size_by_name

    sizes = {}
    for c in (c for r in results for c in r.step.collectives):
        if c.group not in sizes:
            try:
                sizes[c.group] = _get_group_size_by_name(c.group)
            except Exception:
                sizes[c.group] = None
    return sizes


# ---------------------------------------------------------------------------
# Output.


def _gb(n: float) -> str:
    return f"{n / 2**30:.2f}"


def _ms(x: float) -> str:
    return f"{x:.1f}" if x >= 10 else f"{x:.3f}"


def _count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e8 else f"{n / 1e6:.2f} M"


def _counts(collectives: dict) -> str:
    short = {"all_gather": "ag", "reduce_scatter": "rs", "all_reduce": "ar", "forward": "fw", "backward": "bw"}
    parts = []
    for graph, counts in collectives.items():
        label = short.get(graph, graph)
        parts.append(label + " " + "+".join(f"{v} {short.get(k, k)}" for k, v in counts.items()) if counts
                     else label + " 0")
    return "; ".join(parts)


def table(rows: list[dict]) -> str:
    head = ["pass", "ranks", "collectives per graph", "step ms", "compute ms", "comm ms", "exposed ms (%)",
            "bound ms", "step/bound", "peak GiB"]
    body = [[r["pass"], str(r["world_size"]), _counts(r["collectives"]), _ms(r["step_ms"]),
             _ms(r["compute_ms"]), _ms(r["comm_ms"]),
             f"{_ms(r['exposed_comm_ms'])} ({r['exposed_comm_pct']:.1f}%)", _ms(r["bound_ms"]),
             f"{r['step_over_bound']:.3f}", _gb(r["peak_bytes"])] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in body]
    return "\n".join(lines)


def targets(rows: list[dict], block_bytes: int | None, candidate: str = "project") -> list[str]:
    """Whether `candidate` meets the step, exposed-communication and peak targets, per world size."""
    lines = []
    for n in sorted({r["world_size"] for r in rows}):
        by = {r["pass"]: r for r in rows if r["world_size"] == n}
        if candidate not in by:
            continue
        c = by[candidate]
        checks = [f"step/bound {c['step_over_bound']:.3f} <= 1.10: {'yes' if c['step_over_bound'] <= 1.10 else 'NO'}"]
        torch_best = [by[p]["step_ms"] for p in ("torch", "torch-overlap") if p in by]
        if torch_best:
            best = min(torch_best)
            checks.append(f"step {c['step_ms']:.1f} <= best torch {best:.1f}: "
                          f"{'yes' if c['step_ms'] <= best else 'NO'}")
        lowest = min(by.values(), key=lambda r: r["exposed_comm_ms"])
        checks.append(f"exposed lowest: {'yes' if c['exposed_comm_ms'] <= lowest['exposed_comm_ms'] else 'NO'}"
                      f" ({c['exposed_comm_ms']:.1f} ms; lowest {lowest['pass']} {lowest['exposed_comm_ms']:.1f})")
        if "unbucketed" in by and block_bytes:
            limit = by["unbucketed"]["peak_bytes"] + 2 * block_bytes
            checks.append(f"peak {_gb(c['peak_bytes'])} <= unbucketed + 2 blocks {_gb(limit)} GiB: "
                          f"{'yes' if c['peak_bytes'] <= limit else 'NO'}")
        lines.append(f"{candidate} at {n} ranks: " + "; ".join(checks))
    return lines


def exposed_report(result: PassResult, top: int) -> list[str]:
    """The collectives whose waits held the compute stream longest."""
    runs = sorted(result.step.collectives, key=lambda c: -c.stall_ms)[:top]
    peak = max(result.step.graphs, key=lambda g: g.peak_bytes)
    nodes = list(dict(result.graphs)[peak.name].graph.nodes)
    lines = [f"{result.name}: peak {_gb(peak.peak_bytes)} GiB in the {peak.name} graph at "
             f"{nodes[peak.peak_position].name}@{peak.peak_position}",
             f"{result.name}: top {len(runs)} exposed collectives (graph, node @ issue position -> wait position)"]
    for c in runs:
        if c.stall_ms <= 0:
            break
        lines.append(f"  {c.graph:8s} {c.node} [{c.kind}, {c.bytes / 2**20:.1f} MiB, {c.ms:.2f} ms] "
                     f"@{c.position} issued {c.issue_ms:.2f} start {c.start_ms:.2f} end {c.end_ms:.2f} "
                     f"-> wait {c.wait_node}@{c.wait_position} stalls {c.stall_ms:.2f} ms")
    return lines


def plot(worlds: list[WorldResult], path: str, model: str, gpu: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    colors = {"all_gather": "tab:blue", "reduce_scatter": "tab:orange", "all_reduce": "tab:green"}
    for w in worlds:
        out = path if len(worlds) == 1 else _suffixed(path, f"-w{w.world_size}")
        fig, axes = plt.subplots(len(w.passes), 1, figsize=(16, 1.6 + 1.3 * len(w.passes)), squeeze=False)
        for ax, p in zip(axes[:, 0], w.passes):
            groups = sorted({c.group for c in p.step.collectives})
            lanes = ["compute"] + [f"group {grp} ({w.group_sizes.get(grp)} ranks)" for grp in groups]
            spans = [s for g in p.step.graphs for s in g.compute_spans]
            ax.broken_barh([(a, b - a) for a, b in spans], (len(lanes) - 1 - 0.4, 0.8), color="tab:gray")
            for i, group in enumerate(groups):
                y = len(lanes) - 2 - i
                for kind in colors:
                    bars = [(c.start_ms, c.ms) for c in p.step.collectives if c.group == group and c.kind == kind]
                    if bars:
                        ax.broken_barh(bars, (y - 0.4, 0.8), color=colors[kind], label=kind)
            for g in p.step.graphs[1:]:
                ax.axvline(g.start_ms, color="black", lw=0.5)
            ax.set_yticks(range(len(lanes)), list(reversed(lanes)))
            ax.set_title(f"{p.name}: step {p.step.step_ms:.1f} ms, exposed {p.step.exposed_comm_ms:.1f} ms", fontsize=9)
            handles, labels = ax.get_legend_handles_labels()
            if handles:
                uniq = dict(zip(labels, handles))
                ax.legend(uniq.values(), uniq.keys(), loc="upper right", fontsize=7)
        axes[-1, 0].set_xlabel("ms")
        fig.suptitle(f"{model}, {w.world_size} ranks, {gpu}: compute stream and collective streams")
        fig.tight_layout()
        fig.savefig(out, dpi=110)
        plt.close(fig)
        paths.append(out)
    return paths


def _suffixed(path: str, suffix: str) -> str:
    stem, dot, ext = path.rpartition(".")
    return f"{stem}{suffix}.{ext}" if dot else path + suffix


def quiet_torch_logs() -> None:
    """The traces' and passes' chatter off (torch's loggers at ERROR)."""
    for name in ("torch._dynamo", "torch._inductor", "torch._functorch", "torch.distributed", "torch._logging"):
        logging.getLogger(name).setLevel(logging.ERROR)


def main(argv=None) -> int:
    from conformance import adapters

    parser = argparse.ArgumentParser(prog="python -m benchmarks.simulate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, choices=sim_trace.model_names(), metavar="MODEL",
                        help="one of: " + ", ".join(sim_trace.model_names()))
    parser.add_argument("--world-size", type=int, nargs="+", required=True, metavar="N")
    parser.add_argument("--gpu", default="h200", choices=sorted(sim_trace.GPUS))
    parser.add_argument("--passes", default=",".join(DEFAULT_PASSES),
                        help="comma-separated: " + ", ".join(DEFAULT_PASSES) + ", or any adapter name ("
                             + ", ".join(sorted(adapters.BUILTIN)) + ", module:object)")
    parser.add_argument("--layers", type=int, help="keep the first K transformer blocks")
    parser.add_argument("--seq", type=int, default=8192, help="tokens per sequence")
    parser.add_argument("--batch", type=int, default=1, help="sequences per rank")
    parser.add_argument("--mesh", help="RxS: HSDP, R replicas of S shards (R x S = the world size)")
    parser.add_argument("--comm-model", default="torch", choices=COMM_MODELS,
                        help="collective durations: torch's NCCL model, or published nccl-tests bus bandwidths")
    parser.add_argument("--compute-efficiency", type=float, default=1.0, metavar="E",
                        help="the fraction of torch's roofline speed the compute reaches (default 1)")
    parser.add_argument("--ac", default="none", choices=sim_trace.AC_MODES,
                        help="activation checkpointing: none, selective (every second layer), full")
    parser.add_argument("--json", help="write the rows as a JSON list")
    parser.add_argument("--plot", help="write a PNG of the streams per pass (one per world size: -wN suffix)")
    parser.add_argument("--exposed", type=int, default=0, metavar="K",
                        help="list each pass's K most exposed collectives")
    args = parser.parse_args(argv)
    quiet_torch_logs()
    try:
        passes = parse_passes(args.passes)
        mesh = parse_mesh(args.mesh)
    except ValueError as e:
        parser.error(str(e))
    g = sim_trace.gpu(args.gpu)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    try:
        worlds = simulate(args.model, args.world_size, args.gpu, passes, args.layers, args.seq, args.batch, mesh, log,
                          args.comm_model, args.compute_efficiency, args.ac)
    except ValueError as e:
        parser.error(str(e))
    rows = [p.row(args.model, args.gpu, w.world_size) for w in worlds for p in w.passes]
    program = worlds[0].traced.program
    figures = sim_trace.link_figures(g)
    layers = f", {args.layers} layers" if args.layers else ""
    batch = f"seq {args.seq} x batch {args.batch}" if args.model in sim_trace.LLAMAS else f"{program.tokens} tokens"
    sharding = f"HSDP {args.mesh}" if mesh else "SimpleFSDP"
    print(f"{args.model}{layers}, {batch} per rank, {args.gpu} ({figures['bf16_tflops']:.0f} dense bf16 TFLOPS, "
          f"{figures['dram_gbps']:.0f} GB/s HBM), {sharding}; {_count(program.parameters)} parameters")
    print(f"NCCL model: {figures['gpu_type']}, nodes of {figures['gpus_per_node']}: "
          f"{figures['intra_interconnect']} {figures['intra_node_gbps']:.0f} GB/s per GPU inside a node, "
          f"{figures['inter_interconnect']} {figures['inter_node_gbps']:.0f} GB/s per GPU across nodes")
    print()
    print(table(rows))
    print()
    for line in targets(rows, program.block_bytes):
        print(line)
    if program.block_bytes:
        print(f"one transformer block's gathered parameters: {_gb(program.block_bytes)} GiB")
    for w in worlds:
        extra = ""
        if w.estimator.failures:
            extra = "; estimator fallbacks: " + ", ".join(f"{k} x{v}" for k, v in w.estimator.failures.items())
        if w.traced.cuda_fallbacks:
            extra += "; traced on the CPU (no fake-CUDA kernel): " + ", ".join(
                f"{k} x{v}" for k, v in w.traced.cuda_fallbacks.items())
        print(f"{w.world_size} ranks: traced in {w.trace_seconds:.0f} s, all passes in {w.total_seconds:.0f} s"
              + extra)
    if args.exposed:
        for w in worlds:
            print(f"\n{w.world_size} ranks:")
            for p in w.passes:
                print("\n".join(exposed_report(p, args.exposed)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.plot:
        for path in plot(worlds, args.plot, args.model, args.gpu):
            print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
