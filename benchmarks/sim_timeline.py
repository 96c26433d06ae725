"""A GPU step as streams: the compute in graph order on one stream, each process
group's collectives in issue order on a stream of its own.

A collective is issued where it sits in the graph: it starts once the compute
before it has run (its inputs exist) and its group's stream is free. A wait
holds the compute stream until its collective has ended. Durations come from
two functions of a node (the seam: torch's estimators in the simulator,
chosen numbers in tests).

Memory is counted in graph order, the order the allocator sees: a node's new
outputs are allocated where it runs (a collective's result where it is
issued), and freed after the last use of any alias of them (views, `getitem`
of an op returning views, a wait's result, an in-place op's result). An op
that returns several new tensors (the copy-out of a merged collective, an
attention kernel's outputs) allocates each at its `getitem` and frees each
after that item's own last use, as Inductor frees its MultiOutput buffers. A
collective's inputs stay live until its wait. Graph inputs stay live to the
end unless `free_inputs` (Inductor frees a backward graph's inputs after
their last use); inputs named in `held` are counted once in `held_bytes`.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable

import torch
import torch.fx as fx

WAIT = torch.ops._c10d_functional.wait_tensor.default
_COLLECTIVE_NAMESPACES = ("_c10d_functional", "c10d_functional")


def is_wait(node: fx.Node) -> bool:
    return node.op == "call_function" and node.target is WAIT


def is_collective(node: fx.Node) -> bool:
    target = node.target
    return (node.op == "call_function" and isinstance(target, torch._ops.OpOverload)
            and target.namespace in _COLLECTIVE_NAMESPACES and target is not WAIT)


def collective_kind(node: fx.Node) -> str:
    name = node.target._opname
    for kind in ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast"):
        if name.startswith(kind):
            return kind
    return name


def group_of(node: fx.Node) -> str:
    """The process group a collective runs on (its `group_name`)."""
    from torch.fx.operator_schemas import normalize_function

    normalized = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True)
    if normalized is not None and "group_name" in normalized[1]:
        return str(normalized[1]["group_name"])
    strings = [a for a in node.args if isinstance(a, str)]
    return strings[-1] if strings else "?"


def collective_of(wait: fx.Node) -> fx.Node | None:
    """The collective a wait waits on (through `getitem` of a coalesced one)."""
    node = wait.args[0] if wait.args else None
    while isinstance(node, fx.Node):
        if is_collective(node):
            return node
        if node.op == "call_function" and node.target is operator.getitem:
            node = node.args[0]
            continue
        return None
    return None


@functools.cache
def _view_packets() -> frozenset:
    from torch.utils._runtime_estimation import _VIEW_OPS

    aten = torch.ops.aten
    return frozenset(_VIEW_OPS) | {aten._unsafe_view, aten.alias, aten._reshape_alias, aten.narrow,
                                   aten.view_as_real, aten.view_as_complex, aten.slice}


def is_view(node: fx.Node) -> bool:
    """A node whose result is a view of an input: no kernel, no memory of its own."""
    from torch._inductor.fx_passes.fusion_regions import is_view_node

    if node.op != "call_function":
        return False
    target = node.target
    views = _view_packets()
    if getattr(target, "overloadpacket", None) in views or target in views:
        return True
    if isinstance(target, torch._ops.OpOverload):
        returns = target._schema.returns
        if returns and all(r.alias_info is not None and not r.alias_info.is_write for r in returns):
            return True
    try:
        return bool(is_view_node(node))
    except Exception:
        return False


# The allocations Inductor lowers to no kernel: each becomes `empty_strided`,
# whose lowering zeroes the buffer's ranges so the scheduler makes it a
# NopKernelSchedulerNode (torch/_inductor/lowering.py). `full`, `zeros` and
# `ones` are not among them: their lowering is a pointwise fill.
_ALLOCATIONS = frozenset({"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided"})


def is_allocation(node: fx.Node) -> bool:
    """An uninitialised allocation: memory, no kernel."""
    target = node.target
    return (node.op == "call_function" and isinstance(target, torch._ops.OpOverload)
            and target.namespace == "aten" and target._opname in _ALLOCATIONS)


def is_free(node: fx.Node) -> bool:
    """Nodes that put no kernel on the compute stream, and why each is free:

    - anything but a `call_function` (placeholders, the output, `get_attr`):
      graph inputs and results exist already; nothing runs.
    - `operator.getitem`: picks one result of a multi-output node; the
      producing node is what runs (and is charged).
    - views (`is_view`: torch's view ops, and any op whose every return
      aliases an input without writing it): new sizes and strides over the
      same memory, which Inductor folds into the indexing of whatever reads them.
      `aten.reshape` is one: its schema says it aliases, and in a post-grad
      graph it is a renamed `view` (Inductor's `view_to_reshape`).
    - uninitialised allocations (`is_allocation`): an allocator call, no kernel.
    - collectives and their waits (`_c10d_functional`, `c10d_functional`):
      they run on their group's stream, which the communication model times;
      a wait holds the compute stream until its collective ends (`run_graph`).

    Everything else runs a kernel, including the copies a bucketing pass adds
    around its collectives (`bucketing_ops` and the like): those are the costs
    the simulator exists to count. (`bucketing_ops.verify_plan` is a host-side
    check with no tensor to move: the roofline's fallback gives it 0 ms, plus
    the launch every added node is charged.)"""
    if node.op != "call_function":
        return True
    if node.target is operator.getitem:
        return True
    return is_collective(node) or is_wait(node) or is_view(node) or is_allocation(node)


@dataclasses.dataclass
class CollectiveRun:
    node: str
    kind: str
    group: str
    graph: str
    position: int  # the collective's index in its graph
    issue_ms: float  # when the compute before it had run
    start_ms: float
    end_ms: float
    bytes: int
    wait_node: str | None = None
    wait_position: int | None = None
    stall_ms: float = 0.0  # how long its wait held the compute stream

    @property
    def ms(self) -> float:
        return self.end_ms - self.start_ms


@dataclasses.dataclass
class GraphRun:
    name: str
    start_ms: float
    end_ms: float
    compute_ms: float
    comm_ms: dict  # group -> busy ms
    collectives: list  # CollectiveRun
    compute_spans: list  # (start, end) on the compute stream, merged
    peak_bytes: int
    peak_position: int
    counts: dict  # kind -> collectives in this graph


def tensor_bytes(val) -> int:
    if isinstance(val, torch.Tensor):
        return val.numel() * val.element_size()
    if isinstance(val, (list, tuple)):
        return sum(tensor_bytes(v) for v in val)
    return 0


def _alias_source(node: fx.Node) -> fx.Node | None:
    """The node whose memory `node`'s result shares, or None for a new allocation."""
    if node.op != "call_function":
        return None
    if node.target is operator.getitem or is_wait(node):
        src = node.args[0]
        if not isinstance(src, fx.Node) or node.target is operator.getitem and makes_new_items(src):
            return None
        return src
    if is_view(node):
        src = node.args[0] if node.args else None
        return src if isinstance(src, fx.Node) else None
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        returns = target._schema.returns
        if returns and all(r.alias_info is not None for r in returns):
            alias_sets = {s for r in returns for s in r.alias_info.before_set}
            for arg, value in zip(target._schema.arguments, node.args):
                if arg.alias_info is not None and set(arg.alias_info.before_set) & alias_sets \
                        and isinstance(value, fx.Node):
                    return value
            for arg in target._schema.arguments:
                value = node.kwargs.get(arg.name)
                if arg.alias_info is not None and set(arg.alias_info.before_set) & alias_sets \
                        and isinstance(value, fx.Node):
                    return value
    return None


def makes_new_items(node: fx.Node) -> bool:
    """Does `node` return several tensors of its own (no views, no collective's list
    result awaited as one)? Then each item is its own allocation."""
    return (node.op == "call_function" and isinstance(node.meta.get("val"), (list, tuple))
            and not is_wait(node) and not is_collective(node) and _alias_source(node) is None)


def _allocated_bytes(node: fx.Node) -> int:
    """What `node` allocates: nothing for a list of new tensors, counted at their getitems."""
    return 0 if makes_new_items(node) else tensor_bytes(node.meta.get("val"))


def memory_profile(graph: fx.Graph, free_inputs: bool = False, held: frozenset = frozenset(),
                   held_bytes: int = 0) -> tuple[int, int, list[int]]:
    """(peak bytes, position of the peak, live bytes after each node's allocation)."""
    nodes = list(graph.nodes)
    position = {n: i for i, n in enumerate(nodes)}
    root: dict[fx.Node, fx.Node] = {}
    for n in nodes:
        src = _alias_source(n)
        root[n] = root.get(src, src) if src is not None else n
    end = len(nodes)
    last_use: dict[fx.Node, int] = {}
    waits: dict[fx.Node, int] = {}
    for n in nodes:
        if is_wait(n):
            c = collective_of(n)
            if c is not None:
                waits[c] = max(waits.get(c, -1), position[n])
    for n in nodes:
        i = end if n.op == "output" else position[n]
        if is_collective(n) and n in waits:
            i = max(i, waits[n])  # a collective's inputs live until its wait
        for inp in n.all_input_nodes:
            r = root[inp]
            last_use[r] = max(last_use.get(r, -1), i)
    frees: dict[int, list] = {}
    live = held_bytes
    for n in nodes:
        if root[n] is not n:
            continue
        if n.op == "placeholder" and (n.name in held or not free_inputs):
            if n.name not in held:
                live += tensor_bytes(n.meta.get("val"))
            continue
        frees.setdefault(max(last_use.get(n, position[n]), position[n]), []).append(n)
    profile = []
    peak, peak_at = live, 0
    for i, n in enumerate(nodes):
        if root[n] is n and not (n.op == "placeholder" and (n.name in held or not free_inputs)):
            live += _allocated_bytes(n)
        profile.append(live)
        if live > peak:
            peak, peak_at = live, i
        for f in frees.get(i, ()):
            live -= _allocated_bytes(f)
    return peak, peak_at, profile


def run_graph(graph: fx.Graph, name: str, compute_ms: Callable[[fx.Node], float],
              comm_ms: Callable[[fx.Node], float], start_ms: float = 0.0, streams: dict | None = None,
              free_inputs: bool = False, held: frozenset = frozenset(), held_bytes: int = 0) -> GraphRun:
    """Play `graph` on the streams. `streams` (group -> when it is free) carries
    over between graphs of one step."""
    streams = {} if streams is None else streams
    now = start_ms
    busy_compute = 0.0
    busy_comm: dict[str, float] = {}
    runs: dict[fx.Node, CollectiveRun] = {}
    spans: list[list[float]] = []
    counts: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        if is_collective(node):
            group = group_of(node)
            ms = comm_ms(node)
            start = max(now, streams.get(group, start_ms))
            streams[group] = start + ms
            busy_comm[group] = busy_comm.get(group, 0.0) + ms
            kind = collective_kind(node)
            counts[kind] = counts.get(kind, 0) + 1
            runs[node] = CollectiveRun(node.name, kind, group, name, i, now, start, start + ms,
                                       tensor_bytes(node.meta.get("val")))
        elif is_wait(node):
            c = collective_of(node)
            run = runs.get(c)
            if run is not None:
                if run.wait_node is None:
                    run.wait_node, run.wait_position = node.name, i
                if run.end_ms > now:
                    run.stall_ms += run.end_ms - now
                    now = run.end_ms
        elif not is_free(node):
            ms = compute_ms(node)
            if ms > 0:
                if spans and spans[-1][1] == now:
                    spans[-1][1] = now + ms
                else:
                    spans.append([now, now + ms])
                now += ms
                busy_compute += ms
    end = max([now, *(r.end_ms for r in runs.values())])
    peak, peak_at, _ = memory_profile(graph, free_inputs, held, held_bytes)
    return GraphRun(name, start_ms, end, busy_compute, busy_comm, list(runs.values()),
                    [tuple(s) for s in spans], peak, peak_at, counts)


@dataclasses.dataclass
class StepRun:
    graphs: list  # GraphRun per graph, in order

    @property
    def step_ms(self) -> float:
        return self.graphs[-1].end_ms - self.graphs[0].start_ms

    @property
    def compute_ms(self) -> float:
        return sum(g.compute_ms for g in self.graphs)

    @property
    def comm_by_group(self) -> dict:
        out: dict[str, float] = {}
        for g in self.graphs:
            for group, ms in g.comm_ms.items():
                out[group] = out.get(group, 0.0) + ms
        return out

    @property
    def comm_ms(self) -> float:
        """The busiest stream's communication."""
        return max(self.comm_by_group.values(), default=0.0)

    @property
    def exposed_comm_ms(self) -> float:
        """Time the compute stream spends waiting on communication."""
        return max(0.0, self.step_ms - self.compute_ms)

    @property
    def bound_ms(self) -> float:
        return max(self.compute_ms, self.comm_ms)

    @property
    def peak_bytes(self) -> int:
        return max(g.peak_bytes for g in self.graphs)

    @property
    def collectives(self) -> list:
        return [c for g in self.graphs for c in g.collectives]


def run_step(graphs: list[tuple[str, fx.Graph]], compute_ms, comm_ms) -> StepRun:
    """Play the graphs of one step in order (forward, then backward): each graph's
    inputs held by the caller in the first, a later graph's own inputs freed after
    their last use (inputs named as a first-graph input are the caller's)."""
    streams: dict[str, float] = {}
    runs = []
    now = 0.0
    first_inputs = {n.name: tensor_bytes(n.meta.get("val")) for n in graphs[0][1].nodes if n.op == "placeholder"}
    for k, (name, graph) in enumerate(graphs):
        if k == 0:
            run = run_graph(graph, name, compute_ms, comm_ms, now, streams)
        else:
            run = run_graph(graph, name, compute_ms, comm_ms, now, streams, free_inputs=True,
                            held=frozenset(first_inputs), held_bytes=sum(first_inputs.values()))
        runs.append(run)
        now = run.end_ms
    return StepRun(runs)
