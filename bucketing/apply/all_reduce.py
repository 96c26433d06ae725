"""All-reduce buckets: one dtype, members flattened back to back, reduced once."""

from __future__ import annotations

import torch
import torch.fx as fx

from ..plan.records import Bucket
from .copy_out import flat_parts, split_outputs
from .nodes import EmitSettings, EmittedBucket, MetaEvaluator

c10d = torch.ops._c10d_functional
aten = torch.ops.aten


def emit(graph: fx.Graph, bucket: Bucket, meta: MetaEvaluator, settings: EmitSettings,
         created: list[fx.Node]) -> EmittedBucket:
    members = bucket.members
    parts = flat_parts(graph, members, meta, created, 1)
    flat = meta.call(graph, aten.cat.default, (parts,), created)
    reduced = meta.call(graph, c10d.all_reduce.default, (flat, bucket.reduce_op, bucket.group_name), created)
    issue = list(created)
    wait = meta.call(graph, c10d.wait_tensor.default, (reduced,), created)
    outputs, copies = split_outputs(
        graph, meta, created, wait, members, [m.numel for m in members], [list(m.shape) for m in members],
        settings.copy_out,
    )
    return EmittedBucket(bucket, issue, [wait, *copies], outputs, 0, reduced)
