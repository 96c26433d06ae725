"""The rewritten graph's order: each bucket's nodes where the plan puts them.

A stable topological sort (Kahn's algorithm, ready nodes taken by priority).
Original nodes keep their old position as priority; a bucket's issue nodes
take its issue position and go after the previous bucket's wait and copy-out
placed there, before the original node at that position; wait and copy-out
nodes take their first user's position, so they run just before it; so does
the wait of a collective left as it was. Nodes with side effects stay in their
segment: everything before a barrier stays before it and everything after
stays after it. Seeded random nodes keep their order among themselves
(planning made sure it can). Each group's collectives are chained in the
plan's issue order, and a reduction is waited for before its group issues
the reduction of its kind as many places later as the plan's
`reductions_in_flight` says for it.
"""

from __future__ import annotations

import heapq
from collections import defaultdict

import torch
import torch.fx as fx

from ..collectives import KINDS, WAIT, group_of
from ..plan.records import Bucket
from ..plan.timeline import Timeline

Priority = tuple
# The middle field of a priority orders new nodes at one original position:
# issue nodes go after the previous bucket's wait and copy-out placed there
# (its buffer is freed first) and before the original node.
ISSUE_BEFORE_ORIGINAL = -1
ORIGINAL = 0


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
          issue_chains: list[list[fx.Node]] = (), buckets: list[Bucket] = (), replaced: list[fx.Node] = (),
          reductions_in_flight: dict[fx.Node, int | None] | None = None) -> None:
    """Put every emitted bucket's nodes where they belong, and the graph in a legal order.

    `issue_at` is issue_positions' answer, by bucket id, in `timeline`'s positions;
    `buckets` all planned buckets, whose collectives left alone go there too.
    Each of `issue_chains` (`chains`) is one process group's
    collectives, issued in that order whatever the positions say.
    """
    issue_priority, issue_segment, fallback = {}, {}, {}
    first_issue: dict[fx.Node, fx.Node] = {}  # per collective, the first node that issues it
    for b in buckets:
        at = issue_at.get(id(b))
        node = b.members[0].node
        if len(b.members) == 1 and at is not None and at != timeline.position.get(node, at):
            # A collective left as it was, prefetched (Prefetch.eager) or issued after
            # the bucket feeding it, with the single-use cast that feeds it, if any
            # (planning counted it ready once the cast's source is).
            moved = [node] if b.members[0].cast_source is None else [b.members[0].input, node]
            first_issue[node] = moved[0]
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
        first_issue[e.collective] = e.issue_nodes[0]
        first_wait = min(timeline.position[w] for m in members for w in m.waits)
        for node in e.wait_nodes + [o for o in e.outputs if o is not None]:
            fallback[node] = (first_wait, ORIGINAL, 0)
        if e.later_nodes:  # the members not set apart: copied out where the first of them is waited for
            later_wait = min(timeline.position[w] for m in members if m.node not in e.bucket.apart for w in m.waits)
            for node in e.later_nodes:
                fallback[node] = (later_wait, ORIGINAL, 0)
    for node in graph.nodes:
        if node not in timeline.position and node not in issue_priority and node not in fallback:
            fallback[node] = (len(timeline.position), ORIGINAL, 0)
    # The members replaced (dead, erased next) go last: where they were must not pull
    # what they read, now their bucket's, early.
    for node in replaced:
        issue_priority[node] = (len(timeline.position), ORIGINAL, 0)
    reorder(graph, timeline, issue_priority, issue_segment, fallback, issue_chains,
            waited_before(issue_chains, first_issue, reductions_in_flight))


def waited_before(issue_chains: list[list[fx.Node]], first_issue: dict[fx.Node, fx.Node],
                  depths: dict[fx.Node, int | None] | None) -> list[tuple]:
    """(wait, node) pairs: each chained reduction's waits go before the first issue
    node of its group's reduction of its kind `depths[reduction]` places later (a
    reduction the plan did not see, of a bucket that could not be built, as the
    shallowest). A collective holds its input until it is waited for, and a
    reduction's first user is often the graph's output: left there, every bucket's
    gradients would stay alive to the end of the backward."""
    pairs = []
    known = [d for d in (depths or {}).values() if d is not None]
    unseen = min(known, default=None)
    for chain in issue_chains if depths is not None else ():
        for kind in KINDS:
            if not kind.reduces:
                continue
            mine = [n for n in chain if n.target is kind.target]
            for k, earlier in enumerate(mine):
                depth = depths.get(earlier, unseen)
                if depth is None or k + depth >= len(mine):
                    continue
                later = mine[k + depth]
                for wait in earlier.users:
                    if wait.target is WAIT:
                        pairs.append((wait, first_issue.get(later, later)))
    return pairs


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
    waits_before: list[tuple[fx.Node, fx.Node]] = (),
) -> None:
    """Move nodes into the stable topological order described above."""
    nodes = list(graph.nodes)
    priority = _priorities(nodes, timeline, issue_priority, fallback_priority, _readers_after_mutation(nodes))
    for wait, node in waits_before:
        pos, middle, k = priority[node]
        priority[wait] = min(priority[wait], (pos, middle, k - 1))
    successors, indegree = _edges(nodes, timeline, issue_segment, issue_chains, waits_before)
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


def _priorities(nodes: list[fx.Node], timeline: Timeline, issue_priority: dict[fx.Node, Priority],
                fallback_priority: dict[fx.Node, Priority],
                fill_readers: dict[fx.Node, list[fx.Node]]) -> dict[fx.Node, Priority]:
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
    # Wait and copy-out nodes: just before their earliest user (of a copy-out that
    # fills the members the graph allocated, the members' readers). Users come later
    # in creation order, so walking backwards sees every user first.
    for node in reversed(new_nodes):
        users = [priority[u] for u in [*node.users, *fill_readers.get(node, ())] if u in priority]
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
    return priority


def _edges(nodes: list[fx.Node], timeline: Timeline, issue_segment: dict[fx.Node, int],
           issue_chains: list[list[fx.Node]], waits_before: list[tuple[fx.Node, fx.Node]] = ()
           ) -> tuple[dict[fx.Node, list[fx.Node]], dict[fx.Node, int]]:
    """(successors, indegree): data edges, the order a copy-out's in-place fill
    implies, each group's issue chain and in-flight bound, the seeded nodes'
    order, and barrier segments."""
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
    for wait, node in waits_before:
        edge(wait, node)
    seeded = [n for n in timeline.seeded if n in indegree]
    for a, b in zip(seeded, seeded[1:]):
        edge(a, b)
    barriers = [b for b in timeline.barriers if b in indegree]
    barrier_index = {b: i for i, b in enumerate(barriers)}
    for node in nodes if barriers else ():
        seg = issue_segment.get(node, timeline.segment.get(node))
        if seg is None:
            continue
        if seg > 0:
            edge(barriers[seg - 1], node)
        if node not in barrier_index and seg < len(barriers):
            edge(node, barriers[seg])
    return successors, indegree


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
