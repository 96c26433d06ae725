"""Synthetic post-grad graphs of N collectives, built node by node (no tracing)."""

from __future__ import annotations

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode

c10d = torch.ops._c10d_functional
aten = torch.ops.aten


def collective_graph(kind: str, n: int, group_name: str, world: int, even_sizes: bool = False) -> fx.GraphModule:
    """N collectives, 64-70 elements, each result used by one mul.

    All-gathers alternate bf16/f32. Reductions are all f32, so that torch's pass,
    which merges only adjacent collectives of one dtype, has the same work to do.
    """
    mode = FakeTensorMode()
    graph = fx.Graph()
    outputs = []

    def node(target, args):
        nd = graph.call_function(target, args)
        with mode:
            nd.meta["val"] = target(*fx.node.map_arg(args, lambda n: n.meta["val"]))
        return nd

    for i in range(n):
        dtype = torch.bfloat16 if i % 2 == 0 and kind == "all_gather" else torch.float32
        size = 64 + (2 * (i % 4) if even_sizes else i % 7)
        rows = size * (world if kind == "reduce_scatter" else 1)
        ph = graph.placeholder(f"x{i}")
        with mode:
            ph.meta["val"] = torch.empty(rows, dtype=dtype)
        if kind == "all_gather":
            coll = node(c10d.all_gather_into_tensor.default, (ph, world, group_name))
        elif kind == "reduce_scatter":
            coll = node(c10d.reduce_scatter_tensor.default, (ph, "sum", world, group_name))
        else:
            coll = node(c10d.all_reduce.default, (ph, "sum", group_name))
        wait = node(c10d.wait_tensor.default, (coll,))
        outputs.append(node(aten.mul.Tensor, (wait, 2)))
    graph.output(tuple(outputs))
    return fx.GraphModule(torch.nn.Module(), graph)
