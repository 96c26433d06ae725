"""Memory: live bytes along the graph, what each bucket adds, and splits to a budget.

Merging holds bytes longer than the unbucketed program does: a bucket's
inputs wait for its issue, its result waits for its first use. Once
assigned, buckets that raise the estimated peak beyond the memory budget are
halved where the peak is, until the estimate fits.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

import torch
import torch.fx as fx

from ..collectives import WAIT
from .records import Bucket
from .timeline import Timeline

# Per bucket (by id) the position it is issued before, for a list of buckets.
IssuePositions = Callable[[list[Bucket]], dict[int, int]]

# Merging adds at most this many times the merged bytes at any point (inputs
# and results held longer, one packed copy); the sweep is skipped when even that fits.
MAX_GROWTH_PER_MERGED_BYTE = 4


def bucket_extra_intervals(bucket, whens: dict, issue: int, copy_out: str = "copy") -> list[tuple[int, int, int]]:
    """(start, end inclusive, bytes): how merging changes live bytes (negative: frees).

    With the default copy-out, the merged result lives from the bucket's issue
    to its first use, where every member is copied out of it; each member
    then lives to its own last use, in place of its own collective's result.
    Members copied out apart (Bucket.apart) count as they would alone, and the
    rest from their own first use.
    With `views` (copy_out="views") members share the merged buffer, which
    exists from the issue and is held until every member is read (an
    all-gather member's clone is made at its first use; reduce-scatter and
    all-reduce members are slices, held to the bucket's last use). With
    "packed", members are slices of the packed runs, which live to the
    bucket's last use. Either way an input read after its own collective's
    place is held until the issue. The
    packed input, and the copy-out's moment when the merged result and its
    members coexist, are bounded by the cap and not counted here.
    """
    ws = [whens[m.node] for m in bucket.members]
    out = []
    if len(ws) == 1:  # a collective left alone, moved: its result lives from its issue
        if issue < ws[0].position:
            out.append((issue, ws[0].position - 1, ws[0].out_bytes))
    elif copy_out != "copy":
        clone_at_first_use = copy_out == "views" and bucket.kind.views_clone_members
        held_until = max(w.first_use if clone_at_first_use else w.last_use for w in ws)
        for w in ws:
            if issue < w.position:
                out.append((issue, w.position - 1, w.out_bytes))
            if w.last_use < held_until:
                out.append((w.last_use + 1, held_until, w.out_bytes))
    else:
        # The merged result is held until the copy-out of the members not set
        # apart. Those apart count as they would alone: not at all, like any
        # collective left as it was (only merging is charged here).
        held_until = bucket.copied_out_at(whens)
        rest = [w for m, w in zip(bucket.members, ws) if m.node not in bucket.apart]
        out.append((issue, held_until - 1, sum(w.out_bytes for w in rest)))
        for w in rest:
            out.append((held_until, w.last_use, w.out_bytes))
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


def extra_peak_bytes(bucket: Bucket, whens: dict, issue: int, copy_out: str = "copy") -> int:
    """The most this bucket alone adds to live bytes at any point."""
    return peak_of(bucket_extra_intervals(bucket, whens, issue, copy_out))


def split_to_budget(buckets: list[Bucket], whens: dict, timeline: Timeline, budget: float,
                    copy_out: str, issue_positions: IssuePositions) -> list[Bucket]:
    """The buckets, halved where needed so the estimated peak stays within `budget`
    bytes of the unbucketed one (each bucket issued where `issue_positions` puts it)."""
    merged_bytes = sum(b.nbytes for b in buckets if len(b.members) > 1 and not b.explicit)
    moved = issue_positions(buckets)
    moved_bytes = sum(b.nbytes for b in buckets if len(b.members) == 1 and id(b) in moved)
    if MAX_GROWTH_PER_MERGED_BYTE * merged_bytes + moved_bytes <= budget:
        return buckets
    base_live = live_bytes(timeline)
    limit = max(base_live, default=0) + budget
    while True:
        at, adds = _peak(buckets, whens, base_live, limit, copy_out, issue_positions(buckets))
        if at is None:
            return buckets
        # A collective alone and already held back cannot give more: the next one that can.
        can_give = [b for b in buckets if adds.get(id(b), 0) > 0 and (len(b.members) > 1 or not b.held_back)]
        if not can_give:
            return buckets
        culprit = to_give_back(can_give, adds, whens)
        if not culprit.held_back:  # issued later first; halved once that is not enough
            culprit.held_back = True
            continue
        i = next(k for k, b in enumerate(buckets) if b is culprit)
        buckets[i:i + 1] = halve(culprit, f"split to keep the estimated peak within the memory budget "
                                          f"({budget:.0f} bytes over the unbucketed peak)")


def to_give_back(can_give: list[Bucket], adds: dict[int, int], whens: dict) -> Bucket:
    """The bucket held back (or, held back already, halved) to lower the peak: of those
    that give back at least half what the largest would, one not yet held back first,
    then the one used last. Holding back the nearer of two prefetches would issue the
    farther one first (a group issues in one order) and leave the nearer one's compute
    waiting on it."""
    most = max(adds[id(b)] for b in can_give)
    return max((b for b in can_give if 2 * adds[id(b)] >= most),
               key=lambda b: (not b.held_back, min(whens[m.node].first_use for m in b.members), adds[id(b)]))


# The reduction depths tried, deepest first; None: each waited for at its result's
# first use (often the graph's output).
REDUCTION_DEPTHS = (None, 4, 2, 1)


def reduction_waits(buckets: list[Bucket], whens: dict, issue: dict[int, int],
                    depth: int | None | Callable[[Bucket], int | None]) -> dict[int, int]:
    """Per reduction bucket (by id), where it is waited for: at its result's first
    use, or before the issue of its group's bucket of its kind `depth` later if sooner
    (placement.waited_before). `depth` may be one for all or a function of the bucket."""
    out = {}
    for queue in _reduction_queues(buckets, whens, issue):
        for k, b in enumerate(queue):
            out[id(b)] = _waited_at(queue, k, depth(b) if callable(depth) else depth, whens, issue)
    return out


def _reduction_queues(buckets: list[Bucket], whens: dict, issue: dict[int, int]) -> list[list[Bucket]]:
    """Per kind and group, its reduction buckets in issue order."""
    order: dict[tuple, list[Bucket]] = {}
    for b in buckets:
        if b.kind.reduces:
            order.setdefault((b.kind.name, b.group_name), []).append(b)
    for queue in order.values():
        queue.sort(key=lambda b: _issued_at(b, whens, issue))
    return list(order.values())


def _waited_at(queue: list[Bucket], k: int, depth: int | None, whens: dict, issue: dict[int, int]) -> int:
    at = min(whens[m.node].first_use for m in queue[k].members)
    if depth is not None and k + depth < len(queue):
        at = min(at, _issued_at(queue[k + depth], whens, issue))
    return at


def _issued_at(b: Bucket, whens: dict, issue: dict[int, int]) -> int:
    return issue.get(id(b), min(whens[m.node].position for m in b.members))


def reductions_in_flight(buckets: list[Bucket], whens: dict, timeline: Timeline, budget: float, copy_out: str,
                         issue: dict[int, int]) -> dict[int, int | None]:
    """Per reduction bucket (by id), how many of its kind and group may be issued
    before it is waited for: the deepest of REDUCTION_DEPTHS at which its input,
    held from its issue to its wait (a collective holds its input until then),
    keeps the estimated peak within `budget` bytes of the unbucketed one, or
    within what the buckets already reach without them; the shallowest where
    none does. Decided bucket by bucket, each on the bytes the others hold: where
    the graph's live bytes fall (a backward frees its activations as it goes)
    reductions wait later than where they peak."""
    base_live = live_bytes(timeline)
    merged = [interval for b in buckets if not b.explicit and id(b) in issue
              for interval in bucket_extra_intervals(b, whens, issue[id(b)], copy_out)]
    limit = max(max(base_live, default=0) + budget, _worst(base_live, merged))
    queues = _reduction_queues(buckets, whens, issue)
    shallowest = REDUCTION_DEPTHS[-1]
    spans = {id(b): (_issued_at(b, whens, issue), _waited_at(queue, k, shallowest, whens, issue),
                     sum(whens[m.node].in_bytes for m in b.members))
             for queue in queues for k, b in enumerate(queue)}
    live = _profile(base_live, merged + list(spans.values()))
    out: dict[int, int | None] = {}
    # From the last issued back, each as deep as fits beside the others (the ones not
    # yet decided at the shallowest): a late reduction holds its input over less of
    # the graph, where a backward's live bytes have fallen.
    for queue, k, b in sorted(((q, k, b) for q in queues for k, b in enumerate(q)),
                              key=lambda e: -spans[id(e[2])][0]):
        start, end, held = spans[id(b)]
        _add(live, start, end, -held)
        for depth in REDUCTION_DEPTHS:
            end = _waited_at(queue, k, depth, whens, issue)
            if depth == shallowest or max(live[start:end + 1], default=0) + held <= limit:
                break
        out[id(b)] = depth
        _add(live, start, end, held)
    return out


def _add(live: list[int], start: int, end: int, nbytes: int) -> None:
    for t in range(start, min(end, len(live) - 1) + 1):
        live[t] += nbytes


def _profile(base_live: list[int], intervals: list[tuple[int, int, int]]) -> list[int]:
    """`base_live` with `intervals` added, per position."""
    extra = [0] * (len(base_live) + 2)
    for start, end, nbytes in intervals:
        extra[start] += nbytes
        extra[end + 1] -= nbytes
    out, live = [], 0
    for t, base in enumerate(base_live):
        live += extra[t]
        out.append(base + live)
    return out


def _worst(base_live: list[int], intervals: list[tuple[int, int, int]]) -> int:
    """The most live bytes at any position: `base_live` with `intervals` added."""
    return max(_profile(base_live, intervals), default=0)


def _peak(buckets: list[Bucket], whens: dict, base_live: list[int], limit: float, copy_out: str,
          issue: dict[int, int]) -> tuple[int | None, dict[int, int]]:
    """(the position of the estimated peak, or None if it is within `limit`;
    per bucket by id, the bytes it adds there)."""
    per_bucket = {}
    for b in buckets:
        if b.explicit or id(b) not in issue:  # the user's module_buckets entries stay whole
            continue
        per_bucket[id(b)] = bucket_extra_intervals(b, whens, issue[id(b)], copy_out)
    profile = _profile(base_live, [span for spans in per_bucket.values() for span in spans])
    at = max(range(len(profile)), key=profile.__getitem__, default=0)  # the first of the highest
    worst = profile[at] if profile else -1
    if worst <= limit:
        return None, {}
    return at, {bid: sum(n for s, e, n in spans if s <= at <= e) for bid, spans in per_bucket.items()}


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


def live_bytes(timeline: Timeline) -> list[int]:
    """Live tensor bytes at each position of `timeline`.

    A tensor is allocated by the node that makes it and lives until the last
    user of it or of any view of it (views, including a collective's wait and
    the items of a `split`, add no bytes). An op returning several tensors counts each at its `getitem`,
    so each is freed on its own. Graph inputs the caller holds are not
    counted; a compiled backward's own inputs (`freed_inputs`) are, from the
    start to their last use. A coarse estimate, the same for every variant,
    good enough to compare plans of one graph.
    """
    nodes, order = timeline.nodes, timeline.position
    owner: dict[fx.Node, fx.Node] = {}
    last_use: dict[fx.Node, int] = {}
    for i, node in enumerate(nodes):
        inputs = node.all_input_nodes
        owner[node] = owner.get(inputs[0], inputs[0]) if inputs and _is_alias(node) else node
        for inp in inputs:
            last_use[owner.get(inp, inp)] = i
    counted_inputs = freed_inputs(nodes)
    frees: dict[int, int] = {}
    live = 0
    out = []
    for node in nodes:
        val = node.meta.get("val")
        counted = node in counted_inputs or node.op not in ("placeholder", "output", "get_attr")
        if owner[node] is node and counted and not isinstance(val, (list, tuple)):
            size = _nbytes(val)
            live += size
            end = last_use.get(node, order[node])
            frees[end] = frees.get(end, 0) + size
        out.append(live)
        live -= frees.pop(order[node], 0)
    return out


# AOTAutograd's names: the caller's inputs (parameters, batch) and a
# backward's incoming gradients.
CALLER_INPUT_PREFIX = "primals_"
TANGENT_PREFIX = "tangents_"


def freed_inputs(nodes: list[fx.Node]) -> set[fx.Node]:
    """The inputs of a compiled backward (one that takes tangents) other than the
    caller's: the activations saved for it and the tangents, which it frees
    after their last use, as they are its own. Any other graph's inputs are the caller's."""
    inputs = [n for n in nodes if n.op == "placeholder"]
    if not any(n.name.startswith(TANGENT_PREFIX) for n in inputs):
        return set()
    return {n for n in inputs if not n.name.startswith(CALLER_INPUT_PREFIX)}


def _is_alias(node: fx.Node) -> bool:
    """Does the node return (a view of) its first input rather than new memory? An item
    of a list of views (`split`, `unbind`) is one."""
    if node.op != "call_function":
        return False
    if node.target is WAIT:
        return True
    if node.target is operator.getitem:
        return isinstance(node.args[0], fx.Node) and _is_alias(node.args[0])
    schema = getattr(node.target, "_schema", None)
    return bool(schema is not None and schema.returns and schema.returns[0].alias_info is not None)


def _nbytes(val) -> int:
    if isinstance(val, torch.Tensor):
        try:
            return int(val.untyped_storage().nbytes())
        except Exception:
            return math.prod(int(s) if isinstance(s, int) else 1 for s in val.shape) * val.element_size()
    if isinstance(val, (list, tuple)):
        return sum(_nbytes(v) for v in val)
    return 0


def estimate_peak_bytes(graph: fx.Graph) -> int:
    """The most live tensor bytes at any point of `graph` (live_bytes)."""
    return max(live_bytes(Timeline(graph)), default=0)
