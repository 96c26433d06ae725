"""The graph's numbering, taken once per graph: positions and the compute along it.

Every phase reads one `Timeline` of the graph as it was before the rewrite:
planning (where each collective sits, the FLOPs between two places),
memory (live bytes at each position, memory.live_bytes), the issue order
(positions, the barrier segments and seeded nodes nothing may reorder). The
report takes a second one of the bucketed graph.

FLOPs of matmuls, convolutions and attention come from
`torch.utils.flop_counter`'s formulas on the nodes' shapes; anything without
a formula counts as free.
"""

from __future__ import annotations

import torch.fx as fx
from torch.utils.flop_counter import flop_registry

from ..collectives import is_barrier, is_seeded


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
    """Node positions, the estimated FLOPs before each, barrier segments and seeded nodes.

    `skip`: nodes left out of the numbering (replaced members about to be erased).
    """

    def __init__(self, graph: fx.Graph, skip: set = frozenset()):
        self.nodes: list[fx.Node] = [n for n in graph.nodes if n not in skip]
        self.position: dict[fx.Node, int] = {}
        self.flops_before: list[float] = []
        self.segment: dict[fx.Node, int] = {}  # how many barriers come before the node
        self.barriers: list[fx.Node] = []
        self.seeded: list[fx.Node] = []
        total = 0.0
        for i, node in enumerate(self.nodes):
            self.position[node] = i
            self.flops_before.append(total)
            total += node_flops(node)
            self.segment[node] = len(self.barriers)
            if is_barrier(node):
                self.barriers.append(node)
            if is_seeded(node):
                self.seeded.append(node)
        self.flops_before.append(total)

    def flops_between(self, start: int, end: int) -> float:
        return max(0.0, self.flops_before[end] - self.flops_before[start]) if end > start else 0.0
