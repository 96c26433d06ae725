"""When each bucket is issued, in what order each process group issues, and the rewritten graph's order.

Three decisions, made once per graph on the timeline taken before the rewrite:

- **Issue positions** (`issue_positions`): a merged bucket is issued as early
  as its inputs allow, but not before the previous bucket of its kind and
  group is waited on: each bucket is prefetched while the one before it is
  used (FSDP's forward prefetch), and at most two are in flight. With torch's
  estimates (`WITH_ESTIMATES`) three buckets ahead, the first at once,
  collectives left alone prefetched too, and each early enough for its
  estimated time (planning's `lead`).
- **One issue order per process group that every rank agrees on**
  (`units_in_order`, `chains`). Ranks may compile graphs that differ between
  their collectives: a rank whose shard of an unevenly sharded parameter is
  empty pads it, so node positions differ from rank to rank. A schedule by
  position could then issue two buckets of one process group in one order on
  one rank and in the other order on another, and the collectives would
  mismatch (gloo aborts: "Received data size doesn't match expected size").
  The order here is a topological order of the issue units (merged buckets
  and every other collective) by which collectives read which results; among
  units free to go, the one planned to issue after the least compute first
  (the FLOPs before its issue position: padding nodes add none, so every rank
  counts the same), then all-gathers first, then by the unit's first
  collective in graph order.
- **Placement** (`place`, `reorder`): a stable topological sort (Kahn's
  algorithm, ready nodes taken by priority). Original nodes keep their old
  position as priority; a bucket's issue nodes take its issue position and go
  after the previous bucket's wait and copy-out placed there, before the
  original node at that position; wait and copy-out nodes take their first
  user's position, so they run just before it; so does the wait of a
  collective left as it was. Nodes with side effects stay
  in their segment: everything before a barrier stays before it and
  everything after stays after it. Seeded random nodes keep their order among
  themselves (planning made sure it can). Each group's collectives are chained
  in the order above.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import defaultdict
from collections.abc import Callable

import torch
import torch.fx as fx

from .collectives import ALL_GATHER, WAIT, group_of
from .records import Bucket, When
from .timeline import Timeline

Priority = tuple
# The middle field of a priority orders new nodes at one original position:
# issue nodes go after the previous bucket's wait and copy-out placed there
# (its buffer is freed first) and before the original node.
ISSUE_BEFORE_ORIGINAL = -1
ORIGINAL = 0


@dataclasses.dataclass(frozen=True)
class Prefetch:
    """How far ahead buckets are issued.

    `depth`: a bucket is issued once the bucket `depth` before it in its kind
    and group is first used (1: prefetched while the previous one is used, at
    most two in flight, FSDP's forward prefetch); members copied out ahead
    count as a bucket of their own, used where they are. `eager`: the first bucket of
    each kind and group goes as soon as its inputs exist, and a collective left
    alone is prefetched like a bucket; otherwise they issue where they are."""

    depth: int = 1
    eager: bool = False


# With torch's estimates (CUDA), the policy plans for a network that is the
# bottleneck: three buckets in flight and nothing issued later than it could
# be, under the memory budget (memory.py counts every bucket in flight).
WITH_ESTIMATES = Prefetch(depth=3, eager=True)


def issue_positions(buckets: list[Bucket], whens: dict, prefetch: Prefetch = Prefetch(),
                    lead: Callable[[Bucket], int] | None = None) -> dict[int, int]:
    """Per bucket (by id) that `prefetch` moves: the position, before the rewrite, it is issued before.

    As early as its inputs allow, but not before the bucket `prefetch.depth`
    before it of its kind and group is first used, unless `lead` (planning's
    estimates) asks for an earlier position: enough compute before its first
    use to hide it.
    """
    out: dict[int, int] = {}
    uses: dict[tuple, list[int]] = defaultdict(list)
    moved = sorted((b for b in buckets if prefetch.eager or len(b.members) > 1),
                   key=lambda b: whens[b.members[0].node].position)
    for b in moved:
        ws: list[When] = [whens[m.node] for m in b.members]
        first = min(w.position for w in ws)
        ready = max(w.ready for w in ws) + 1
        previous = uses[(b.kind, b.group_name)]
        if len(previous) >= prefetch.depth:
            gate = previous[-prefetch.depth]
        else:
            gate = ready if prefetch.eager else first
        if lead is not None:
            gate = min(gate, lead(b))
        out[id(b)] = max(ready, min(first, gate))
        # Where its result is used and freed. Members copied out ahead keep the
        # place in the prefetch depth they would have alone, so joining a bucket
        # does not bring a later bucket's issue forward.
        ahead = [w.first_use for m, w in zip(b.members, ws) if m.node in b.ahead]
        if ahead:
            previous.append(min(ahead))
        previous.append(b.copied_out_at(whens))
    return out


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

    # Per node, the units whose results it reads (a bitmask); per unit, those
    # its members' inputs read.
    reads = [0] * len(units)
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

    readers: list[list[int]] = [[] for _ in units]
    waiting = [0] * len(units)
    for u, mask in enumerate(reads):
        while mask:
            low = mask & -mask
            readers[low.bit_length() - 1].append(u)
            waiting[u] += 1
            mask ^= low
    # Among units free to go, the one planned after the least compute: a
    # group's queue runs in the order the timeline needs its collectives (a
    # backward all-gather free from the start must not hold every gradient's
    # reduction back to the end). At equal compute, all-gathers first: a
    # prefetch must not queue behind a reduction whose first member came
    # earlier in the graph but which is issued once its last gradient exists.
    def key(u: int) -> tuple[float, int, int]:
        first = units[u][0]
        return (flops[u], 0 if first.target is ALL_GATHER.target else 1, positions[first])

    ready = [(key(u), u) for u in range(len(units)) if not waiting[u]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, u = heapq.heappop(ready)
        order.append(units[u])
        for r in readers[u]:
            waiting[r] -= 1
            if not waiting[r]:
                heapq.heappush(ready, (key(r), r))
    if len(order) != len(units):
        raise RuntimeError("bucketing: the planned buckets depend on each other in a cycle (planning bug)")
    return order


def chains(units: list[list[fx.Node]], merged: dict[fx.Node, fx.Node]) -> list[list[fx.Node]]:
    """Per process group, its issue nodes in unit order. `merged` maps each
    member of a merged bucket to the bucket's collective; other collectives
    issue as they are."""
    by_group: dict[str, list[fx.Node]] = defaultdict(list)
    for members in units:
        issued = []
        for node in members:
            issue = merged.get(node, node)
            if issue not in issued:
                issued.append(issue)
        for issue in issued:
            group = group_of(issue)
            if group is not None:
                by_group[group].append(issue)
    return [nodes for nodes in by_group.values() if len(nodes) > 1]


def place(graph: fx.Graph, timeline: Timeline, emitted: list, issue_at: dict[int, int],
          issue_chains: list[list[fx.Node]] = (), buckets: list[Bucket] = ()) -> None:
    """Put every emitted bucket's nodes where they belong, and the graph in a legal order.

    `issue_at` is issue_positions' answer, by bucket id, in `timeline`'s positions;
    `buckets` all planned buckets, whose collectives left alone go there too.
    Each of `issue_chains` (`chains`) is one process group's
    collectives, issued in that order whatever the positions say.
    """
    issue_priority, issue_segment, fallback = {}, {}, {}
    for b in buckets:
        at = issue_at.get(id(b))
        node = b.members[0].node
        if len(b.members) == 1 and at is not None and at < timeline.position.get(node, at):
            # A collective left as it was, prefetched (Prefetch.eager), with the
            # single-use cast that feeds it, if any (planning counted it ready
            # once the cast's source is).
            moved = [node] if b.members[0].cast_source is None else [b.members[0].input, node]
            for k, n in enumerate(moved):
                issue_priority[n] = (at, ISSUE_BEFORE_ORIGINAL, k)
                issue_segment[n] = timeline.segment[n]
    for e in emitted:
        members = e.bucket.members
        first = issue_at[id(e.bucket)]
        segment = timeline.segment[members[0].node]
        for k, node in enumerate(e.issue_nodes):
            issue_priority[node] = (first, ISSUE_BEFORE_ORIGINAL, k)
            issue_segment[node] = segment
        first_wait = min(timeline.position[w] for m in members for w in m.waits)
        for node in e.wait_nodes + [o for o in e.outputs if o is not None]:
            fallback[node] = (first_wait, ORIGINAL, 0)
        if e.later_nodes:  # the members not needed ahead: copied out where the first of them is waited for
            later_wait = min(timeline.position[w] for m in members if m.node not in e.bucket.ahead for w in m.waits)
            for node in e.later_nodes:
                fallback[node] = (later_wait, ORIGINAL, 0)
    for node in graph.nodes:
        if node not in timeline.position and node not in issue_priority and node not in fallback:
            fallback[node] = (len(timeline.position), ORIGINAL, 0)
    reorder(graph, timeline, issue_priority, issue_segment, fallback, issue_chains)


def _readers_after_mutation(nodes: list[fx.Node]) -> dict[fx.Node, list[fx.Node]]:
    """For each copy-out that fills the members the graph allocated, the other
    readers of those members: they read what it wrote, an order no data edge
    records."""
    fill = torch.ops.bucketing_ops.copy_out_into.default
    return {
        node: [u for out in node.args[5] for u in out.users if u is not node]
        for node in nodes if node.target is fill
    }


def reorder(
    graph: fx.Graph,
    timeline: Timeline,
    issue_priority: dict[fx.Node, Priority],
    issue_segment: dict[fx.Node, int],
    fallback_priority: dict[fx.Node, Priority],
    issue_chains: list[list[fx.Node]] = (),
) -> None:
    """Move nodes into the stable topological order described above."""
    nodes = list(graph.nodes)
    priority: dict[fx.Node, Priority] = {}
    new_nodes = []
    for node in nodes:
        pos = timeline.position.get(node)
        if node in issue_priority:  # emitted issue nodes, and collectives left alone but prefetched
            priority[node] = issue_priority[node]
        elif pos is not None:
            priority[node] = (pos, ORIGINAL, 0)
        else:
            new_nodes.append(node)
    # Wait and copy-out nodes: just before their earliest user. Users come later
    # in creation order, so walking backwards sees every user first.
    for node in reversed(new_nodes):
        users = [priority[u] for u in node.users if u in priority]
        if users:
            first = min(users)
            priority[node] = (first[0], first[1] - 1, first[2])
        else:
            priority[node] = fallback_priority[node]
    # The wait of a collective left as it was goes just before its first user,
    # as a bucket's does: a reduction issued late in the chains is not waited
    # on at once.
    for node in reversed(nodes):
        if node.target is WAIT and node in timeline.position and node.users:
            first = min(priority[u] for u in node.users)
            if first > priority[node]:
                priority[node] = (first[0], first[1] - 1, first[2])

    successors: dict[fx.Node, list[fx.Node]] = defaultdict(list)
    indegree = dict.fromkeys(nodes, 0)

    def edge(a: fx.Node, b: fx.Node) -> None:
        successors[a].append(b)
        indegree[b] += 1

    for node in nodes:
        for inp in node.all_input_nodes:
            edge(inp, node)
    for node, readers in _readers_after_mutation(nodes).items():
        for reader in readers:
            edge(node, reader)
    for chain in issue_chains:
        for a, b in zip(chain, chain[1:]):
            edge(a, b)
    seeded = [n for n in timeline.seeded if n in indegree]
    for a, b in zip(seeded, seeded[1:]):
        edge(a, b)
    barriers = [b for b in timeline.barriers if b in indegree]
    if barriers:
        barrier_index = {b: i for i, b in enumerate(barriers)}
        for node in nodes:
            seg = issue_segment.get(node, timeline.segment.get(node))
            if seg is None:
                continue
            if node in barrier_index:
                if seg > 0:
                    edge(barriers[seg - 1], node)
                continue
            if seg > 0:
                edge(barriers[seg - 1], node)
            if seg < len(barriers):
                edge(node, barriers[seg])

    tiebreak = {node: i for i, node in enumerate(nodes)}
    ready = [(priority[n], tiebreak[n], n) for n in nodes if indegree[n] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, _, node = heapq.heappop(ready)
        order.append(node)
        for succ in successors[node]:
            indegree[succ] -= 1
            if indegree[succ] == 0:
                heapq.heappush(ready, (priority[succ], tiebreak[succ], succ))
    if len(order) != len(nodes):
        raise RuntimeError("bucketing: rewritten graph has a cycle (planning bug)")
    move_into(graph, order)


def move_into(graph: fx.Graph, order: list[fx.Node]) -> None:
    """Move the nodes of `graph` (all of them, each once in `order`) into `order`."""
    if not order:
        return
    first = next(iter(graph.nodes))
    if order[0] is not first:
        first.prepend(order[0])
    prev = order[0]
    for node in order[1:]:
        if prev.next is not node:
            prev.append(node)
        prev = node
