"""Decide which collectives share a bucket. Reads the graph, never changes it.

One walk over the nodes in graph order. Every node carries a bitmask of the
buckets whose collectives it (transitively) depends on; a collective joins the
open bucket of its key only if its own mask does not hold that bucket's bit.

Merging turns a bucket into one issue node (after all member inputs) and one
wait node (before every member's first user), so buckets can depend on each
other through members added later: a bucket depends on every bucket any of
its members' inputs depends on. Each open bucket keeps the set of buckets
that depend on it, directly or through other buckets, and takes no member
whose inputs depend on it or on any of them: the merged graph stays acyclic,
and a bucket stays open when another comes to depend on it. HSDP needs
that: each gradient's all-reduce over replicas feeds its reduce-scatter over
shards, and the all-reduces still merge into one bucket that the
reduce-scatters' bucket reads.

Nodes with side effects (mutations, effect tokens) are barriers: everything
before one stays before it, and a bucket never spans one. Seeded random ops
(attention carries the tag even without dropout) are no barrier: issuing or
waiting a collective never touches the random state. They only keep their
order among themselves, so each one counts as depending on everything the
previous one depends on.

Each collective may belong to a module unit (modules.py): an entry of the
user's `module_buckets`, or under the module policy a block (a repeated
module such as a transformer layer): the unit sharded training gathers and
frees. A bucket holds one unit, whatever compute lies inside it; collectives
outside any unit follow the locality rules below, or under merge_all the
caps alone.

The locality rules. A byte cap alone can gather every layer's parameters at
the start of a forward pass: peak memory jumps to the unsharded model and the
prefetch of layer i+1 no longer overlaps layer i's compute. So a member joins
a bucket only while the bucket spans at most a window of compute
(`locality_flops`; by default what one collective's latency is worth on the
graph's device): splitting a bucket where less compute separates its members
cannot hide the extra collective, so merging gives nothing up there. A member
is also refused if it would shrink the bucket's overlap window (compute
between its inputs being ready and its first use) below that same amount.
The memory budget is enforced after planning (memory.py), and then each
bucket's issue position is decided (ordering.issue_positions).

With torch's estimates of the graph's device (costs.py; CUDA only), the
rules plan with time instead of counts: consecutive blocks share a bucket
until their collectives fit within their compute, the first and the last
unit one block (`group_blocks`, `BlockEstimate`); collectives outside the
blocks join a neighbouring unit where that saves more than it costs, an
all-gather that moves the unit copied out ahead of it (`_join_nearest_blocks`,
`Bucket.ahead`); a collective whose copies cost more than merging
it saves stays as it was, unless the group is communication-bound
(`copy_refusal`); the memory budget is two blocks' gathered parameters; and
each bucket is issued early enough for its estimated time (`lead_position`,
with ordering.WITH_ESTIMATES).

Every collective that ends alone in its bucket gets the reason, so the plan
can list it.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections import defaultdict

import torch.fx as fx

from . import memory, modules, ordering
from .collectives import ALL_GATHER, BY_NAME, Collective, Skipped
from .costs import DeviceCosts, device_costs
from .options import MB, BucketingOptions
from .records import Bucket, Span, When
from .timeline import Timeline

# How many buckets of one key the locality policy keeps open at once.
MAX_OPEN_PER_KEY = 4


@dataclasses.dataclass
class PlannedBuckets:
    """What planning decided, and what it knows of the graph for the report."""

    buckets: list[Bucket]  # in order of their first member, singletons included
    kept_out: list[Skipped]  # collectives kept out of every bucket: over the cap, copies, exact_reductions
    whens: dict[fx.Node, When]  # per collective node
    timeline: Timeline  # of the graph as planned, before any rewrite
    issue_at: dict[int, int]  # per bucket moved (by id): the position it is issued before
    # Each collective kept out of every bucket (over the cap, or its copies
    # outweigh merging), as a bucket of its own: issued like one left alone.
    kept_alone: list[Bucket] = dataclasses.field(default_factory=list)

    @property
    def issued(self) -> list[Bucket]:
        """Every bucket the issue order places, those kept out included."""
        return self.buckets + self.kept_alone

    def alone(self) -> list[Skipped]:
        """The collectives that stayed alone in their bucket, with why."""
        out = []
        for b in self.buckets:
            if len(b.members) == 1:
                c = b.members[0]
                block = f" in module {b.module}" if b.module else ""
                why = b.alone_reason or f"no other collective of its key ({c.kind}, group, op, dtype){block} came to join it"
                out.append(Skipped(c.node.name, why))
        return out

    @property
    def merged(self) -> list[Bucket]:
        return [b for b in self.buckets if len(b.members) > 1]


# Rough device figures: a small collective's fixed latency and sustained matmul
# throughput. Their product is the compute one collective's latency is worth.
_LATENCY_S = {"cpu": 500e-6, "cuda": 30e-6}
_FLOPS_PER_S = {"cpu": 3e10, "cuda": 2e14}


def default_locality_flops(device_type: str) -> float:
    kind = "cpu" if device_type == "cpu" else "cuda"
    return _LATENCY_S[kind] * _FLOPS_PER_S[kind]


def when(c: Collective, timeline: Timeline) -> When:
    """Where collective `c` sits, what it reads and returns, and its anchor:
    the first use of an all-gather's result, or where a reduction's input is
    produced (gradients become ready layer by layer)."""
    pos = timeline.position
    source = c.cast_source if c.cast_source is not None else c.input
    users = [pos[u] for u in c.readers()]
    first_use = min(users, default=pos[c.wait])
    in_bytes = c.numel * c.dtype.itemsize
    kind = BY_NAME[c.kind]
    anchor = first_use if kind is ALL_GATHER else pos[source]
    return When(pos[c.node], pos[source], first_use, max(users, default=pos[c.wait]),
                in_bytes, kind.output_bytes(in_bytes, c.group_size), timeline.flops_before[anchor])


def locality_refusal(span: Span, w: When, timeline: Timeline, window_flops: float) -> str | None:
    """Why a collective with `w` may not join a bucket covering `span`, or None if it may."""
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


def copy_refusal(c: Collective, w: When, costs: DeviceCosts) -> str | None:
    """Why `c` stays as it was by the device's estimates, or None if it may merge:
    the collective time merging it with another of its size saves (a latency,
    more across nodes) must exceed its copy-in and copy-out. On 8 GPUs of a
    node a large weight's gather saves less than its copy-out costs; across
    nodes it saves more."""
    copies = costs.copy_ms(w.moved_bytes)
    saves = costs.merge_saves_ms(c.kind, w.moved_bytes, w.moved_bytes, c.group_size)
    if saves < copies:
        return (f"merging saves an estimated {saves * 1e3:.3g} us of {c.kind}, "
                f"less than its copy-in and copy-out cost ({copies * 1e3:.3g} us)")
    return None


def bucket_key(c: Collective, multidtype: bool) -> tuple:
    """(kind, group name, reduce op, dtype); dtype is None where the kind may mix dtypes."""
    dtype = None if (BY_NAME[c.kind].mixes_dtypes and multidtype) else c.dtype
    return (c.kind, c.group_name, c.reduce_op, dtype)


def module_unit(c: Collective, options: BucketingOptions) -> tuple[str | None, bool]:
    """(the module unit `c` belongs to or None, whether the user's module_buckets named it)."""
    plan = options.module_buckets
    if plan:
        entry = modules.plan_entry(c.module_stack, plan)
        if entry is not None:
            return modules.entry_label(plan[entry]), True
    if options.policy != "module":
        return None, False
    if options.block_classes:
        return modules.class_block(c.module_stack, options.block_classes), False
    return modules.auto_block(c.module_stack), False


def anchor(c: Collective, whens: dict[fx.Node, When]) -> int:
    """Where the graph needs a block's collective: an all-gather's first use, a reduction's ready input."""
    w = whens[c.node]
    return w.first_use if c.kind == ALL_GATHER.name else w.ready


def group_blocks(collectives: list[Collective], units: dict, whens: dict[fx.Node, When],
                 options: BucketingOptions, costs: DeviceCosts | None,
                 compute_ms_before: list[float] | None) -> BlockGrouping:
    """Units again, with every run of `k` consecutive blocks of one process
    group (in the order the graph first needs them) made one unit.

    `k` is the option `blocks_per_bucket`, or else estimated per group
    (`BlockEstimate.blocks_per_bucket`); 1 without estimates."""
    blocks_of: dict[str, dict[str, list[Collective]]] = defaultdict(dict)
    for c in collectives:
        unit, explicit = units[c.node]
        if unit is not None and not explicit:
            blocks_of[c.group_name].setdefault(unit, []).append(c)
    out = dict(units)
    communication_bound = set()
    ahead: set[fx.Node] = set()
    largest = max((sum(c.nbytes for c in members if c.kind == ALL_GATHER.name)
                   for blocks in blocks_of.values() for members in blocks.values()), default=0)
    for group_name, blocks in blocks_of.items():
        k = options.blocks_per_bucket
        if costs is not None:
            estimate = BlockEstimate.of(list(blocks.values()), whens, compute_ms_before, costs, options.multidtype,
                                        options.cap_bytes(0))
            if estimate.communication_bound():
                communication_bound.add(group_name)
            if k is None:
                k = estimate.blocks_per_bucket()
        if k is not None and k > 1:
            names = list(blocks)
            ends = options.blocks_per_bucket is None and group_name not in communication_bound and len(names) > 2
            # Estimated: the graph's first bucket waits with nothing to hide it, and so
            # does its last (a backward's last gradients): one block each, the rest k.
            middle = names[1:-1] if ends else names
            runs = [middle[start:start + k] for start in range(0, len(middle), k)]
            if ends:
                runs = [names[:1], *runs, names[-1:]]
            for run in runs:
                label = "+".join(run)
                for name in run:
                    for c in blocks[name]:
                        out[c.node] = (label, False)
        if costs is not None:
            ahead |= _join_nearest_blocks(collectives, group_name, out, whens, costs, compute_ms_before,
                                          group_name in communication_bound)
    return BlockGrouping(out, communication_bound, largest, frozenset(ahead))


def _join_nearest_blocks(collectives: list[Collective], group_name: str, units: dict, whens: dict[fx.Node, When],
                         costs: DeviceCosts, compute_ms_before: list[float],
                         communication_bound: bool) -> set[fx.Node]:
    """A collective outside the blocks (embeddings, a final norm, an output
    projection) whose merging saves more than its copies cost joins a block
    unit of its kind next to it, where that costs no more than it saves:

    - a unit it leaves in place: an all-gather joins the unit the graph needs
      last before it (the unit's first use stays), a reduction the unit whose
      inputs are last ready soonest after its own (the unit's issue stays). Its
      own result or input is then held over the compute in between, which
      only a communication-bound group has time for (every collective saved
      shortens its step), or where that compute is shorter than the saving;
    - else a unit it moves by less compute than merging saves: the embeddings'
      all-gather joins the first block's unit, their reduce-scatter the last;
      an all-gather also where the group is communication-bound (a final
      norm's, needed before the last block's, joins it in the backward).

    Returns the all-gathers that joined a unit they move: the bucket copies
    them out ahead of the rest (Bucket.ahead), so the unit's own parameters
    are not gathered out earlier than before."""
    def compute_between(a: int, b: int) -> float:
        return abs(compute_ms_before[b] - compute_ms_before[a])

    mine = [c for c in collectives if c.group_name == group_name]
    ahead = set()
    spans: dict[tuple[str, str], tuple[int, int]] = {}
    for c in mine:
        unit = units[c.node][0]
        if unit is not None:
            a = anchor(c, whens)
            first, last = spans.get((c.kind, unit), (a, a))
            spans[(c.kind, unit)] = (min(first, a), max(last, a))
    for c in mine:
        w = whens[c.node]
        if units[c.node][0] is not None or c.group_size < 2 or copy_refusal(c, w, costs):
            continue
        a = anchor(c, whens)
        saves = costs.merge_saves_ms(c.kind, w.moved_bytes, w.moved_bytes, c.group_size)
        ours = [(unit, first, last) for (kind, unit), (first, last) in spans.items() if kind == c.kind]
        gathers = c.kind == ALL_GATHER.name
        # (the unit's edge it keeps, unit) and (the unit's edge it moves, unit)
        keeps = [(first, unit) for unit, first, _ in ours if first <= a] if gathers else \
            [(last, unit) for unit, _, last in ours if last >= a]
        moves = [(first, unit) for unit, first, _ in ours if first > a] if gathers else \
            [(last, unit) for unit, _, last in ours if last < a]
        kept = (max if gathers else min)(keeps, default=None)
        moved = (min if gathers else max)(moves, default=None)
        if kept is not None and (communication_bound or compute_between(kept[0], a) < saves):
            units[c.node] = (kept[1], False)
        elif moved is not None and (compute_between(moved[0], a) < saves or gathers and communication_bound):
            units[c.node] = (moved[1], False)
            if gathers:
                ahead.add(c.node)
    return ahead


@dataclasses.dataclass(frozen=True)
class BlockGrouping:
    units: dict  # collective node -> (unit, explicit), blocks grouped
    # Process groups whose blocks' collectives outlast their compute (by the
    # estimates; none without): BlockEstimate.communication_bound.
    communication_bound: set[str]
    largest_block_gather_bytes: int  # one block's gathered parameters, the largest
    ahead: frozenset = frozenset()  # all-gathers that joined a unit they move (_join_nearest_blocks)


@dataclasses.dataclass(frozen=True)
class BlockEstimate:
    """A typical block of one process group by the device's estimates: the median
    compute between consecutive blocks' anchors, and each key's mean bytes
    (moved: input and output, as torch's model counts them; and the bytes the
    bucket cap counts)."""

    blocks: int
    block_ms: float
    key_bytes: dict  # key -> (moved bytes, capped bytes) per block
    group_size: int
    costs: DeviceCosts
    cap_bytes: float = float("inf")

    @classmethod
    def of(cls, blocks: list[list[Collective]], whens: dict[fx.Node, When], compute_ms_before: list[float],
           costs: DeviceCosts, multidtype: bool = True, cap_bytes: float = float("inf")) -> BlockEstimate:
        anchors = [min(anchor(c, whens) for c in members) for members in blocks]
        gaps = sorted(abs(compute_ms_before[b] - compute_ms_before[a]) for a, b in zip(anchors, anchors[1:]))
        block_ms = gaps[len(gaps) // 2] if gaps else 0.0
        key_bytes: dict[tuple, tuple[float, float]] = defaultdict(lambda: (0.0, 0.0))
        for members in blocks:
            for c in members:
                moved, capped = key_bytes[bucket_key(c, multidtype)]
                key_bytes[bucket_key(c, multidtype)] = (moved + whens[c.node].moved_bytes / len(blocks),
                                                        capped + c.nbytes / len(blocks))
        return cls(len(blocks), block_ms, dict(key_bytes), blocks[0][0].group_size, costs, cap_bytes)

    def comm_ms(self, k: int) -> float:
        """k blocks' collectives, merged per key into as many buckets as the cap needs."""
        total = 0.0
        for key, (moved, capped) in self.key_bytes.items():
            pieces = max(1, math.ceil(k * capped / self.cap_bytes))
            total += pieces * self.costs.collective_ms(key[0], k * moved / pieces, self.group_size)
        return total

    def blocks_per_bucket(self) -> int:
        """The fewest consecutive blocks whose collectives, merged per key, take no
        longer than the blocks' compute: the next bucket's prefetch then hides
        behind this one's compute. Every block where none do (the collectives
        outweigh the compute at any size): the caps and the memory budget split them."""
        for k in range(1, self.blocks):
            if self.comm_ms(k) <= k * self.block_ms:
                return k
        return self.blocks

    def communication_bound(self) -> bool:
        """Whether all blocks' collectives, merged, outlast their compute: then the
        compute stream waits anyway, and a copy-in or copy-out costs nothing the
        step would see, while every collective saved shortens it."""
        return self.blocks >= 2 and self.comm_ms(self.blocks) > self.blocks * self.block_ms


def plan_buckets(
    graph: fx.Graph, collectives: list[Collective], options: BucketingOptions
) -> PlannedBuckets:
    """All buckets in order of their first member, singletons included."""
    by_node = {c.node: c for c in collectives}
    timeline = Timeline(graph)
    whens = {c.node: when(c, timeline) for c in collectives}
    windowed = options.policy != "merge_all"  # the compute window applies outside module units
    device = collectives[0].node.meta["val"].device if collectives else None
    units = {c.node: module_unit(c, options) for c in collectives}
    costs = device_costs(device) if device is not None else None
    compute_ms_before = costs.compute_ms_before(timeline) if costs is not None else None
    prefetch = ordering.WITH_ESTIMATES if costs is not None else ordering.Prefetch()
    lead = None
    if costs is not None:
        def lead(b: Bucket) -> int:
            return lead_position(b, whens, compute_ms_before, costs)
    grouping = BlockGrouping(units, set(), 0)
    if options.policy == "module":
        grouping = group_blocks(collectives, units, whens, options, costs, compute_ms_before)
        units = grouping.units
    window = options.locality_flops
    if window is None:
        window = default_locality_flops(device.type if device is not None else "cpu")

    buckets: list[Bucket] = []
    skipped: list[Skipped] = []
    kept_alone: list[Bucket] = []
    # Open buckets per key, newest last. merge_all keeps one; locality keeps a
    # few, so interleaved stretches (a layer's bias used after its matmul,
    # beside the next layer's weights) each find their own bucket.
    open_by_key: dict[tuple, list[int]] = defaultdict(list)
    max_open = MAX_OPEN_PER_KEY if windowed else 1
    next_index: dict[str, int] = defaultdict(int)
    masks: dict[fx.Node, int] = {}
    barrier_mask = 0  # what every node after the last barrier depends on
    last_barrier = ""
    rng_mask = 0  # what the next seeded node depends on through the random state
    everything = 0  # union of all masks so far: what a barrier depends on

    # Per bucket: the buckets that depend on it (a bitmask), directly or
    # through others; kept up to date while it is open (a closed bucket never
    # takes a member, so no cycle can pass through its growth).
    dependents: list[int] = []

    def record_dependencies(mask: int, bid: int) -> None:
        """Bucket `bid` took a member whose inputs depend on the buckets in `mask`."""
        for bids in open_by_key.values():
            for x in bids:
                if x != bid and mask & ((1 << x) | dependents[x]):
                    dependents[x] |= (1 << bid) | dependents[bid]

    def refusal(bid: int, c: Collective, w: When, mask: int) -> str | None:
        """Why `c` may not join bucket `bid`, or None if it may."""
        bucket = buckets[bid]
        if (mask >> bid) & 1:
            if (barrier_mask >> bid) & 1:
                return f"a side-effecting node ({last_barrier}) lies between it and the open bucket"
            return "its input depends on the open bucket's result"
        through = mask & dependents[bid]
        if through:
            other = buckets[(through & -through).bit_length() - 1].members[0].node.name
            return f"its input depends on {other}'s bucket, which depends on the open bucket's result"
        if bucket.nbytes + c.nbytes > bucket.cap_bytes:
            return f"the open bucket is full ({bucket.nbytes} + {c.nbytes} bytes > cap {bucket.cap_bytes:.0f})"
        if options.max_bucket_count is not None and len(bucket.members) >= options.max_bucket_count:
            return f"the open bucket already holds max_bucket_count={options.max_bucket_count} members"
        if windowed and bucket.module is None:
            return locality_refusal(bucket.span, w, timeline, window)
        return None

    def assign(c: Collective, mask: int) -> int | None:
        unit, explicit = units[c.node]
        key = (*bucket_key(c, options.multidtype), unit, explicit)
        w = whens[c.node]
        # Copies against latency (with estimates; not asked inside the user's own
        # entries, under merge_all, where the group's size is unknown, or where its
        # collectives outlast the compute, which then has time for copies): a
        # member refused stays as it was, like one over the cap, and open buckets stay open.
        why = copy_refusal(c, w, costs) if windowed and costs is not None and not explicit \
            and c.group_size >= 2 and c.group_name not in grouping.communication_bound else None
        if why:
            skipped.append(Skipped(c.node.name, why))
            kept_alone.append(Bucket(next_index[c.kind], c.kind, key, 0.0, [c], c.nbytes, Span.of(w), module=unit))
            return None
        bids = open_by_key[key]
        for bid in reversed(bids):
            why = refusal(bid, c, w, mask)
            if why is None:
                bucket = buckets[bid]
                bucket.members.append(c)
                bucket.nbytes += c.nbytes
                bucket.span = bucket.span.add(w)
                record_dependencies(mask, bid)
                return bid
            if not buckets[bid].alone_reason:
                buckets[bid].alone_reason = f"{c.node.name} could not join: {why}"
        index = next_index[c.kind]
        cap = options.cap_bytes(index)
        if c.nbytes > cap:
            # Too big for any new bucket: it stays as it was, and open buckets stay open.
            skipped.append(Skipped(c.node.name, f"{c.nbytes} bytes alone exceed the cap of bucket {index}"))
            kept_alone.append(Bucket(index, c.kind, key, cap, [c], c.nbytes, Span.of(w), module=unit))
            return None
        next_index[c.kind] += 1
        bid = len(buckets)
        buckets.append(Bucket(index, c.kind, key, cap, [c], c.nbytes, Span.of(w), why or "",
                              unit, explicit))
        dependents.append(0)
        bids.append(bid)
        del bids[:-max_open]
        record_dependencies(mask, bid)
        return bid

    barriers, seeded = set(timeline.barriers), set(timeline.seeded)  # found once, by the timeline
    for node in timeline.nodes:
        mask = barrier_mask
        for inp in node.all_input_nodes:
            mask |= masks[inp]
        if node in seeded:
            mask |= rng_mask
            rng_mask = mask
        c = by_node.get(node)
        if c is not None and options.exact_reductions and c.kind != ALL_GATHER.name and not 0 < c.group_size <= 2:
            skipped.append(Skipped(c.node.name, _inexact_reason(c)))
            c = None
        if c is not None:
            bid = assign(c, mask)
            if bid is not None:
                mask |= 1 << bid
        if node in barriers:
            mask |= everything
            barrier_mask = mask
            last_barrier = node.name
        everything |= mask
        masks[node] = mask

    for b in buckets:
        b.mark_ahead(grouping.ahead)
    if windowed and any(len(b.members) > 1 and not b.explicit for b in buckets):
        budget = options.memory_budget_mb
        budget_bytes = max(b.cap_bytes for b in buckets) if budget is None else budget * MB
        if budget is None and costs is not None:
            # With estimates: what FSDP2's prefetch holds, two blocks' gathered parameters.
            budget_bytes = max(budget_bytes, 2 * grouping.largest_block_gather_bytes)
        split = memory.split_to_budget(list(buckets), whens, timeline, budget_bytes, options.copy_out, prefetch,
                                       lead)
        if len(split) != len(buckets):
            buckets = _renumber_within_caps(split, whens, options)
    issue_at = ordering.issue_positions(buckets + kept_alone, whens, prefetch, lead)
    return PlannedBuckets(buckets, skipped, whens, timeline, issue_at, kept_alone)


# How many times its estimated duration of compute a collective is issued
# ahead of its first use, at least: room for the collectives queued before it.
LEAD_FACTOR = 2.0


def lead_position(b: Bucket, whens: dict[fx.Node, When], compute_ms_before: list[float],
                  costs: DeviceCosts) -> int:
    """The latest position from which `LEAD_FACTOR` times the bucket's estimated
    collective time of compute lies before its first use."""
    ws = [whens[m.node] for m in b.members]
    first_use = min(w.first_use for w in ws)
    duration = costs.collective_ms(b.kind, sum(w.moved_bytes for w in ws), b.members[0].group_size)
    target = compute_ms_before[first_use] - LEAD_FACTOR * duration
    return max(0, bisect.bisect_right(compute_ms_before, target) - 1)


def _inexact_reason(c: Collective) -> str:
    group = f"group of {c.group_size}" if c.group_size else "group size unknown"
    return (f"exact_reductions, {group}: a merged sum over more than 2 ranks may add in another order "
            f"(docs/design.md, What stays the same)")


def _renumber_within_caps(buckets: list[Bucket], whens: dict, options: BucketingOptions) -> list[Bucket]:
    """Per-kind indices in graph order again after splits.

    A callable cap is asked again for each new index; a bucket over the cap of
    its new index is halved, until every bucket fits its own cap.
    """
    while True:
        buckets.sort(key=lambda b: whens[b.members[0].node].position)
        counts: dict[str, int] = defaultdict(int)
        over = None
        for b in buckets:
            b.index = counts[b.kind]
            counts[b.kind] += 1
            b.cap_bytes = options.cap_bytes(b.index)
            if over is None and len(b.members) > 1 and b.nbytes > b.cap_bytes:
                over = b
        if over is None:
            return buckets
        i = next(k for k, b in enumerate(buckets) if b is over)
        buckets[i:i + 1] = memory.halve(over, f"split: over the cap of bucket index {over.index}")
