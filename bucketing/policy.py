"""When results are needed: compute between collectives, overlap, and memory.

A byte cap alone can gather every layer's parameters at the start of a forward
pass: peak memory jumps to the unsharded model and the prefetch of layer i+1
no longer overlaps layer i's compute. The locality policy reads three facts of
each collective, all in graph order:

- where it is needed: the first user of an all-gather's result, or where a
  reduction's input is produced (gradients become ready layer by layer);
- the compute in between, as FLOPs of matmuls, convolutions and attention
  (`torch.utils.flop_counter`'s formulas on the nodes' shapes);
- live bytes, from a sweep over the node order (each output lives until its
  last user).

A member joins a bucket only while the bucket spans at most `locality_flops`
of compute. The default is what one collective's latency is worth in compute
on the graph's device: splitting a bucket where less compute separates its
members cannot hide the extra collective, so merging gives nothing up there.
A member is refused if it would shrink the bucket's overlap window (compute
between its inputs being ready and its first use) below that same amount. After planning, buckets that
raise the estimated peak beyond the memory budget are split where the peak is.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.fx as fx
from torch.utils.flop_counter import flop_registry

# Rough device figures: a small collective's fixed latency and sustained matmul
# throughput. Their product is the compute one collective's latency is worth.
_LATENCY_S = {"cpu": 500e-6, "cuda": 30e-6}
_FLOPS_PER_S = {"cpu": 3e10, "cuda": 2e14}


def default_locality_flops(device_type: str) -> float:
    kind = "cpu" if device_type == "cpu" else "cuda"
    return _LATENCY_S[kind] * _FLOPS_PER_S[kind]


def node_flops(node: fx.Node) -> float:
    """Estimated FLOPs of one node; 0 for anything without a formula or with symbolic sizes."""
    if node.op != "call_function":
        return 0.0
    formula = flop_registry.get(getattr(node.target, "overloadpacket", None))
    if formula is None:
        return 0.0

    def val(n: fx.Node):
        return n.meta.get("val")

    try:
        flops = formula(*fx.node.map_arg(node.args, val), **fx.node.map_arg(node.kwargs, val),
                        out_val=node.meta.get("val"))
    except Exception:
        return 0.0
    return float(flops) if isinstance(flops, (int, float)) else 0.0


class Timeline:
    """Node positions and the estimated FLOPs of the compute before each position."""

    def __init__(self, graph: fx.Graph):
        self.position: dict[fx.Node, int] = {}
        self.flops_before: list[float] = []
        total = 0.0
        for i, node in enumerate(graph.nodes):
            self.position[node] = i
            self.flops_before.append(total)
            total += node_flops(node)
        self.flops_before.append(total)

    def flops_between(self, start: int, end: int) -> float:
        return max(0.0, self.flops_before[end] - self.flops_before[start]) if end > start else 0.0


@dataclasses.dataclass(frozen=True)
class When:
    """Where one collective sits and what it holds, in original graph positions."""

    position: int  # the collective itself
    ready: int  # the producer of what it reads
    first_use: int  # earliest user of its result
    last_use: int  # latest user of its result
    in_bytes: int
    out_bytes: int
    anchor_flops: float  # all-gathers: compute before the first use; reductions: before the input is ready


def when(c, timeline: Timeline) -> When:
    pos = timeline.position
    source = c.cast_source if c.cast_source is not None else c.input
    users = [pos[u] for u in c.wait.users]
    first_use = min(users, default=pos[c.wait])
    in_bytes = c.numel * c.dtype.itemsize
    if c.kind == "all_gather":
        out_bytes = in_bytes * c.group_size
    elif c.kind == "reduce_scatter":
        out_bytes = in_bytes // max(c.group_size, 1)
    else:
        out_bytes = in_bytes
    anchor = first_use if c.kind == "all_gather" else pos[source]
    return When(pos[c.node], pos[source], first_use, max(users, default=pos[c.wait]),
                in_bytes, out_bytes, timeline.flops_before[anchor])


@dataclasses.dataclass(frozen=True)
class Span:
    """What a bucket's members cover: the anchor range, last input, first use."""

    low: float
    high: float
    ready: int
    first_use: int

    @staticmethod
    def of(w: When) -> Span:
        return Span(w.anchor_flops, w.anchor_flops, w.ready, w.first_use)

    def add(self, w: When) -> Span:
        return Span(min(self.low, w.anchor_flops), max(self.high, w.anchor_flops),
                    max(self.ready, w.ready), min(self.first_use, w.first_use))


def refusal(span: Span, w: When, timeline: Timeline, window_flops: float) -> str | None:
    """The locality and overlap rules: why a collective with `w` may not join a
    bucket covering `span`, or None if it may."""
    grown = span.add(w)
    if grown.high - grown.low > window_flops:
        return (f"{grown.high - grown.low:.3g} FLOPs of compute would lie inside the bucket, "
                f"over the locality window of {window_flops:.3g}")

    # Compute between issue and wait is what hides the collective: a bucket
    # whose window could hide one keeps it.
    def hides(s: Span) -> bool:
        return timeline.flops_between(s.ready + 1, s.first_use) > window_flops

    if hides(span) and not hides(grown):
        return "joining would shrink the bucket's overlap window below what hides a collective"
    return None


def issue_positions(buckets: list, whens: dict) -> dict[int, int]:
    """Per merged bucket (by id): the position it is issued before.

    As early as its inputs allow, but not before the previous bucket of its
    kind and group is waited on: each bucket is prefetched while the one before
    it is used (FSDP's forward prefetch), and at most two are in flight.
    """
    out: dict[int, int] = {}
    previous_use: dict[tuple, int] = {}
    merged = sorted((b for b in buckets if len(b.members) > 1),
                    key=lambda b: whens[b.members[0].node].position)
    for b in merged:
        ws = [whens[m.node] for m in b.members]
        first = min(w.position for w in ws)
        ready = max(w.ready for w in ws) + 1
        stream = (b.kind, b.group_name)
        out[id(b)] = max(ready, min(first, previous_use.get(stream, first)))
        previous_use[stream] = min(w.first_use for w in ws)
    return out


def bucket_extra_intervals(bucket, whens: dict, issue: int, views: bool = False) -> list[tuple[int, int, int]]:
    """(start, end inclusive, bytes): how merging changes live bytes (negative: frees).

    With the default copy-out, the merged result lives from the bucket's issue
    to its first use, where one op copies every member out; each member then
    lives to its own last use, in place of its own collective's result. With
    `views` (copy_out="views") members share the merged buffer, which exists
    from the issue and is held until every member is read (an all-gather
    member's clone is made at its first use; reduce-scatter and all-reduce
    members are slices, held to the bucket's last use). Either way an input
    read after its own collective's place is held until the issue. The
    packed input, and the copy-out's moment when the merged result and its
    members coexist, are bounded by the cap and not counted here.
    """
    ws = [whens[m.node] for m in bucket.members]
    first_use = min(w.first_use for w in ws)
    out = []
    if views:
        held_until = max(w.first_use if bucket.kind == "all_gather" else w.last_use for w in ws)
        for w in ws:
            if issue < w.position:
                out.append((issue, w.position - 1, w.out_bytes))
            if w.last_use < held_until:
                out.append((w.last_use + 1, held_until, w.out_bytes))
    else:
        out.append((issue, first_use - 1, sum(w.out_bytes for w in ws)))
        for w in ws:
            out.append((first_use, w.last_use, w.out_bytes))
            out.append((w.position, w.last_use, -w.out_bytes))
    for w in ws:
        if issue > w.position:
            out.append((w.position + 1, issue, w.in_bytes))
    return out


def peak_of(intervals: list[tuple[int, int, int]]) -> int:
    events: dict[int, int] = {}
    for start, end, size in intervals:
        events[start] = events.get(start, 0) + size
        events[end + 1] = events.get(end + 1, 0) - size
    live = peak = 0
    for t in sorted(events):
        live += events[t]
        peak = max(peak, live)
    return peak


def split_for_memory(buckets: list, whens: dict, base_live: list[int], budget: float, views: bool = False) -> list:
    """Halve the bucket that adds most at the estimated peak until it is within `budget` of the unbucketed one."""
    limit = max(base_live, default=0) + budget
    size = len(base_live) + 2
    while True:
        issue = issue_positions(buckets, whens)
        extra = [0] * size
        per_bucket = {}
        for b in buckets:
            if len(b.members) < 2 or b.explicit:  # the user's module_buckets entries stay whole
                continue
            per_bucket[id(b)] = intervals = bucket_extra_intervals(b, whens, issue[id(b)], views)
            for start, end, nbytes in intervals:
                extra[start] += nbytes
                extra[end + 1] -= nbytes
        live, worst, at = 0, -1, 0
        for t, base in enumerate(base_live):
            live += extra[t]
            if base + live > worst:
                worst, at = base + live, t
        if worst <= limit:
            return buckets

        adds = {bid: sum(n for s, e, n in spans if s <= at <= e) for bid, spans in per_bucket.items()}
        culprit = max(buckets, key=lambda b: adds.get(id(b), 0))
        if adds.get(id(culprit), 0) == 0:
            return buckets
        i = next(k for k, b in enumerate(buckets) if b is culprit)
        buckets[i:i + 1] = halve(culprit, f"split to keep the estimated peak within the memory budget "
                                          f"({budget:.0f} bytes over the unbucketed peak)")


def halve(bucket, why: str) -> list:
    """Two buckets of about half the bytes each, members in graph order.

    Balanced parts keep the most merging; any split of a legal bucket is legal
    (a part cannot depend on the other, which the whole could not).
    """
    members = bucket.members
    cut, running = 1, members[0].nbytes
    while cut < len(members) - 1 and running < bucket.nbytes / 2:
        running += members[cut].nbytes
        cut += 1
    return [bucket.part(members[:cut], why), bucket.part(members[cut:], why)]


def live_bytes(graph: fx.Graph) -> list[int]:
    """Live tensor bytes at each node position.

    A tensor is allocated by the node that makes it and lives until the last
    user of it or of any view of it (views, including a collective's wait, add
    no bytes). An op returning several tensors counts each at its `getitem`,
    so each is freed on its own. Graph inputs are not counted. A coarse estimate, the same for
    every variant, good enough to compare plans of one graph.
    """
    order: dict[fx.Node, int] = {}
    owner: dict[fx.Node, fx.Node] = {}
    last_use: dict[fx.Node, int] = {}
    for i, node in enumerate(graph.nodes):
        order[node] = i
        inputs = node.all_input_nodes
        owner[node] = owner[inputs[0]] if inputs and _is_alias(node) else node
        for inp in inputs:
            last_use[owner[inp]] = i
    frees: dict[int, int] = {}
    live = 0
    out = []
    for node in graph.nodes:
        val = node.meta.get("val")
        if owner[node] is node and node.op not in ("placeholder", "output", "get_attr") \
                and not isinstance(val, (list, tuple)):
            size = _nbytes(val)
            live += size
            end = last_use.get(node, order[node])
            frees[end] = frees.get(end, 0) + size
        out.append(live)
        live -= frees.pop(order[node], 0)
    return out


def _is_alias(node: fx.Node) -> bool:
    """Does the node return (a view of) its first input rather than new memory?"""
    if node.op != "call_function":
        return False
    if node.target is torch.ops._c10d_functional.wait_tensor.default:
        return True
    schema = getattr(node.target, "_schema", None)
    return bool(schema is not None and schema.returns and schema.returns[0].alias_info is not None)


def estimate_peak_bytes(graph: fx.Graph) -> int:
    return max(live_bytes(graph), default=0)


def _nbytes(val) -> int:
    if isinstance(val, torch.Tensor):
        try:
            return int(val.untyped_storage().nbytes())
        except Exception:
            n = 1
            for s in val.shape:
                n *= int(s) if isinstance(s, int) else 1
            return n * val.element_size()
    if isinstance(val, (list, tuple)):
        return sum(_nbytes(v) for v in val)
    return 0
