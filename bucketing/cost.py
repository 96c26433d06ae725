"""The cost model: compute as FLOPs along the graph, and each collective's place and bytes.

FLOPs of matmuls, convolutions and attention come from
`torch.utils.flop_counter`'s formulas on the nodes' shapes; anything without
a formula counts as free. A collective's latency is priced in the same unit,
so planning can ask whether enough compute lies between two places to hide one.
"""

from __future__ import annotations

import torch.fx as fx
from torch.utils.flop_counter import flop_registry

from . import kinds
from .records import When

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

    def __init__(self, graph: fx.Graph, skip: set = frozenset()):
        self.position: dict[fx.Node, int] = {}
        self.flops_before: list[float] = []
        total = 0.0
        for i, node in enumerate(n for n in graph.nodes if n not in skip):
            self.position[node] = i
            self.flops_before.append(total)
            total += node_flops(node)
        self.flops_before.append(total)

    def flops_between(self, start: int, end: int) -> float:
        return max(0.0, self.flops_before[end] - self.flops_before[start]) if end > start else 0.0


def when(c, timeline: Timeline) -> When:
    """Where collective `c` sits, what it reads and returns, and its anchor:
    the first use of an all-gather's result, or where a reduction's input is
    produced (gradients become ready layer by layer)."""
    pos = timeline.position
    source = c.cast_source if c.cast_source is not None else c.input
    users = [pos[u] for u in c.wait.users]
    first_use = min(users, default=pos[c.wait])
    in_bytes = c.numel * c.dtype.itemsize
    kind = kinds.BY_NAME[c.kind]
    anchor = first_use if kind is kinds.ALL_GATHER else pos[source]
    return When(pos[c.node], pos[source], first_use, max(users, default=pos[c.wait]),
                in_bytes, kind.output_bytes(in_bytes, c.group_size), timeline.flops_before[anchor])
