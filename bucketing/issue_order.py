"""One order of collective issues per process group that every rank agrees on.

Ranks may compile graphs that differ between their collectives: a rank whose
shard of an unevenly sharded parameter is empty pads it, so node positions
differ from rank to rank. A schedule by position could then issue two
buckets of one process group in one order on one rank and in the other order
on another, and the collectives would mismatch (gloo aborts: "Received data
size doesn't match expected size"). The order here depends only on which
collectives read which results: a topological order of the issue units
(merged buckets and every other collective), ties broken by the unit's first
collective in graph order, the same on every rank. `ordering.reorder` chains
each group's issues in it.
"""

from __future__ import annotations

import heapq
from collections import defaultdict

import torch
import torch.fx as fx

from .records import Bucket

WAIT = torch.ops._c10d_functional.wait_tensor.default


def group_of(node: fx.Node) -> str | None:
    """The process group a functional collective is issued on; None for any other node."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or target.namespace != "_c10d_functional" or target is WAIT:
        return None
    for i, arg in enumerate(target._schema.arguments):
        if arg.name == "group_name":
            value = node.kwargs.get("group_name", node.args[i] if i < len(node.args) else None)
            return value if isinstance(value, str) else None
    return None


def units_in_order(graph: fx.Graph, buckets: list[Bucket]) -> list[list[fx.Node]]:
    """Every collective of `graph` in issue units (a bucket's members together,
    in graph order; any other collective alone), in the order above."""
    positions = {}
    units: list[list[fx.Node]] = []
    unit_of: dict[fx.Node, int] = {}
    for b in buckets:
        for m in b.members:
            unit_of[m.node] = len(units)
        units.append([m.node for m in b.members])
    for i, node in enumerate(graph.nodes):
        positions[node] = i
        if node not in unit_of and group_of(node) is not None:
            unit_of[node] = len(units)
            units.append([node])
    for members in units:
        members.sort(key=positions.__getitem__)

    # Per node, the units whose results it reads (a bitmask); per unit, those
    # its members' inputs read.
    reads = [0] * len(units)
    masks: dict[fx.Node, int] = {}
    for node in graph.nodes:
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
    ready = [(positions[units[u][0]], u) for u in range(len(units)) if not waiting[u]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, u = heapq.heappop(ready)
        order.append(units[u])
        for r in readers[u]:
            waiting[r] -= 1
            if not waiting[r]:
                heapq.heappush(ready, (positions[units[r][0]], r))
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
