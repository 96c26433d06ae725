"""When results are needed: compute stages, the locality rule, and a memory estimate.

Merging by byte cap alone can gather every layer's parameters at the start of
a forward pass. The locality rule keeps a bucket inside one "stage" of the
program: a stage ends at each heavy compute op (matmul, convolution,
attention), so in an FSDP-style graph a bucket holds one layer's parameters,
issued while the previous layer computes. All-gathers are grouped by where
their results are first used, reductions by where their inputs become ready.
"""

from __future__ import annotations

import torch
import torch.fx as fx

aten = torch.ops.aten

HEAVY_OPS = frozenset(
    op
    for name in (
        "mm", "addmm", "bmm", "baddbmm", "convolution", "convolution_backward", "_scaled_mm",
        "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention", "_flash_attention_forward", "_efficient_attention_forward",
    )
    if hasattr(aten, name)
    for op in [getattr(aten, name).default]
)


def compute_stages(graph: fx.Graph) -> dict[fx.Node, int]:
    """Per node: how many heavy compute ops come before it in graph order."""
    stages = {}
    count = 0
    for node in graph.nodes:
        stages[node] = count
        if node.op == "call_function" and node.target in HEAVY_OPS:
            count += 1
    return stages


def first_use_stage(wait: fx.Node, stages: dict[fx.Node, int], position: dict[fx.Node, int]) -> int:
    users = list(wait.users)
    if not users:
        return stages[wait]
    return stages[min(users, key=position.__getitem__)]


def _nbytes(val) -> int:
    if isinstance(val, torch.Tensor):
        try:
            return int(val.untyped_storage().nbytes()) if val._base is None else 0
        except Exception:
            n = 1
            for s in val.shape:
                n *= int(s) if isinstance(s, int) else 1
            return n * val.element_size()
    if isinstance(val, (list, tuple)):
        return sum(_nbytes(v) for v in val)
    return 0


def estimate_peak_bytes(graph: fx.Graph) -> int:
    """Peak of live tensor bytes in node order: each output lives until its last user.

    Views (tensors with a base) add nothing. A coarse estimate, the same for
    every variant, good enough to compare plans of one graph.
    """
    order = {n: i for i, n in enumerate(graph.nodes)}
    last_use: dict[fx.Node, int] = {}
    for node in graph.nodes:
        for inp in node.all_input_nodes:
            last_use[inp] = order[node]
    frees: dict[int, int] = {}
    live = peak = 0
    for node in graph.nodes:
        if node.op in ("placeholder", "output", "get_attr"):
            continue
        size = _nbytes(node.meta.get("val"))
        live += size
        peak = max(peak, live)
        end = last_use.get(node, order[node])
        frees[end] = frees.get(end, 0) + size
        live -= frees.pop(order[node], 0)
    return peak
