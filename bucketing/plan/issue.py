"""When each bucket is issued, and in what order each process group issues.

Two decisions, made once per graph on the timeline taken before the rewrite:

- **Issue positions** (`issue_positions`): a merged bucket is issued as early
  as its inputs allow, but not before the bucket `Prefetch.depth` before it of
  its kind and group is first used: each bucket is prefetched while the one
  before it is used (FSDP's forward prefetch). A policy may prefetch deeper,
  eagerly, and ask for an earlier position (its `lead`).
- **One issue order per process group that every rank agrees on**
  (`units_in_order`). Ranks may compile graphs that differ between
  their collectives: a rank whose shard of an unevenly sharded parameter is
  empty pads it, so node positions differ from rank to rank. A schedule by
  position could then issue two buckets of one process group in one order on
  one rank and in the other order on another, and the collectives would
  mismatch (gloo aborts: "Received data size doesn't match expected size").
  The order here is a topological order of the issue units (merged buckets
  and every other collective) by which collectives read which results; among
  units free to go, the one planned to issue after the least compute first
  (the FLOPs before its issue position: padding nodes add none, so every rank
  counts the same), then the collectives the graph waits on the result of
  (prefetches), then by the unit's first collective in graph order.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import defaultdict
from collections.abc import Callable

import torch.fx as fx

from ..collectives import BY_TARGET, group_of
from .records import Alone, Bucket, Span, When
from .timeline import Timeline


@dataclasses.dataclass(frozen=True)
class Prefetch:
    """How early buckets are issued.

    `depth`: a bucket is issued once the bucket `depth` before it in its kind
    and group is first used (1: prefetched while the previous one is used, at
    most two in flight, FSDP's forward prefetch); members copied out apart
    count as a bucket of their own, used where they are. `eager`: the first bucket of
    each kind and group goes as soon as its inputs exist, and a collective left
    alone is prefetched like a bucket; otherwise they issue where they are."""

    depth: int = 1
    eager: bool = False


def issue_positions(buckets: list[Bucket], whens: dict, prefetch: Prefetch = Prefetch(),
                    lead: Callable[[Bucket], int | None] | None = None) -> dict[int, int]:
    """Per bucket (by id) that `prefetch` moves: the position, before the rewrite, it is issued before.

    As early as its inputs allow, but not before the bucket `prefetch.depth`
    before it of its kind and group is first used, unless `lead` (the
    policy's) asks for an earlier position; and an all-gather not before one
    of its group needed sooner (`_in_the_order_needed`).
    """
    out: dict[int, int] = {}
    uses: dict[tuple, list[int]] = defaultdict(list)
    moved = sorted((b for b in buckets if len(b.members) > 1 or prefetch.eager and not b.held_back),
                   key=lambda b: whens[b.members[0].node].position)
    for b in moved:
        ws: list[When] = [whens[m.node] for m in b.members]
        first = min(w.position for w in ws)
        ready = max(w.ready for w in ws) + 1
        previous = uses[(b.kind, b.group_name)]
        eager = prefetch.eager and not b.held_back
        if len(previous) >= prefetch.depth:
            gate = previous[-prefetch.depth]
        else:
            gate = ready if eager else first
        at = lead(b) if lead is not None and not b.held_back else None
        if at is not None:
            gate = min(gate, at)
        out[id(b)] = max(ready, min(first, gate))
        # Where its result is used and freed. Members copied out apart keep the
        # place in the prefetch depth they would have alone, so joining a bucket
        # does not bring a later bucket's issue forward.
        apart = [w.first_use for m, w in zip(b.members, ws) if m.node in b.apart]
        if apart:
            previous.append(min(apart))
        previous.append(b.copied_out_at(whens))
    _after_next_feeder(buckets, moved, whens, out)
    _in_the_order_needed(moved, whens, out)
    return out


def _in_the_order_needed(moved: list[Bucket], whens: dict, out: dict[int, int]) -> None:
    """Each group's moved all-gathers issue in the order the graph needs them: one
    held back by the memory budget (neither led nor eager) would otherwise be
    overtaken by a later one led early, and its compute, sooner, wait behind it on the
    group's stream."""
    latest: dict[str, int] = {}
    for b in sorted((b for b in moved if b.kind.needed_at_first_use),
                    key=lambda b: min(whens[m.node].first_use for m in b.members)):
        out[id(b)] = max(out[id(b)], latest.get(b.group_name, 0))
        latest[b.group_name] = out[id(b)]


def _after_next_feeder(buckets: list[Bucket], moved: list[Bucket], whens: dict, out: dict[int, int]) -> None:
    """A collective or bucket that reduces a bucket's results (HSDP: each gradient
    all-reduced over the replicas, then reduce-scattered over the shards) is issued where
    the next bucket of its feeder's kind and group is: the feeder's wait then falls a
    bucket's compute later, and the feeder runs behind that compute instead of holding it."""
    feeder_of = {w: b for b in moved for m in b.members for w in m.waits}  # a member's waits -> its bucket
    queue: dict[tuple, list[Bucket]] = defaultdict(list)
    for b in moved:
        queue[(b.kind, b.group_name)].append(b)
    for b in buckets:
        feeders = [f for m in b.members if (f := feeder_of.get(m.input)) is not None and f is not b]
        if not feeders:
            continue
        last = max(feeders, key=lambda f: out[id(f)])
        later = [out[id(f)] for f in queue[(last.kind, last.group_name)] if out[id(f)] > out[id(last)]]
        if later:
            own = out.get(id(b), min(whens[m.node].position for m in b.members))
            out[id(b)] = max(own, min(later))


def with_feeders_buckets(alone: list[Alone], buckets: list[Bucket], whens: dict) -> list[Alone]:
    """`alone`, each collective left out of planning that reduces a merged bucket's result
    given a bucket of its own, so that `issue_positions` can issue it after its feeder's next bucket."""
    merged_waits = {w for b in buckets if len(b.members) > 1 for m in b.members for w in m.waits}
    return [dataclasses.replace(a, bucket=Bucket(0, a.collective.kind, (), 0.0, [a.collective], a.collective.nbytes,
                                                 Span.of(whens[a.collective.node])))
            if a.bucket is None and a.collective.input in merged_waits else a for a in alone]


def units_in_order(timeline: Timeline, buckets: list[Bucket], issue_at: dict[int, int]) -> list[list[fx.Node]]:
    """Every collective of `graph` in issue units (a bucket's members together,
    in graph order; any other collective alone), in the order above.
    `issue_at`: issue_positions' answer; a unit without one issues where its first collective is."""
    positions = timeline.position
    units: list[list[fx.Node]] = []
    unit_of: dict[fx.Node, int] = {}
    for b in buckets:
        for m in b.members:
            unit_of[m.node] = len(units)
        units.append([m.node for m in b.members])
    issued_at = [issue_at.get(id(b)) for b in buckets]
    for node in timeline.nodes:
        if node not in unit_of and group_of(node) is not None:
            unit_of[node] = len(units)
            units.append([node])
            issued_at.append(None)
    for members in units:
        members.sort(key=positions.__getitem__)
    # The compute planned before each unit's issue.
    flops = [timeline.flops_before[positions[members[0]] if at is None else at]
             for members, at in zip(units, issued_at)]

    # Among units free to go, the one planned after the least compute: a
    # group's queue runs in the order the timeline needs its collectives (a
    # backward all-gather free from the start must not hold every gradient's
    # reduction back to the end). At equal compute, prefetches first: one
    # must not queue behind a reduction whose first member came earlier in
    # the graph but which is issued once its last gradient exists.
    def key(u: int) -> tuple[float, int, int]:
        first = units[u][0]
        kind = BY_TARGET.get(first.target)
        return (flops[u], 0 if kind is not None and kind.needed_at_first_use else 1, positions[first])

    order = _topological(_reads(timeline, unit_of, len(units)), key)
    return [units[u] for u in order]


def _reads(timeline: Timeline, unit_of: dict[fx.Node, int], count: int) -> list[int]:
    """Per unit, the units its members' inputs read (a bitmask), through any node."""
    reads = [0] * count
    masks: dict[fx.Node, int] = {}
    for node in timeline.nodes:
        mask = 0
        for inp in node.all_input_nodes:
            mask |= masks.get(inp, 0)
        u = unit_of.get(node)
        if u is not None:
            reads[u] |= mask & ~(1 << u)
            mask |= 1 << u
        if mask:
            masks[node] = mask
    return reads


def _topological(reads: list[int], key: Callable[[int], tuple]) -> list[int]:
    """The units in a topological order of `reads`, the least `key` first among those free to go."""
    readers: list[list[int]] = [[] for _ in reads]
    waiting = [0] * len(reads)
    for u, mask in enumerate(reads):
        while mask:
            low = mask & -mask
            readers[low.bit_length() - 1].append(u)
            waiting[u] += 1
            mask ^= low
    ready = [(key(u), u) for u in range(len(reads)) if not waiting[u]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, u = heapq.heappop(ready)
        order.append(u)
        for r in readers[u]:
            waiting[r] -= 1
            if not waiting[r]:
                heapq.heappush(ready, (key(r), r))
    if len(order) != len(reads):
        raise RuntimeError("bucketing: the planned buckets depend on each other in a cycle (planning bug)")
    return order
