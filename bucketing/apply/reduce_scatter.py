"""Reduce-scatter buckets: one dtype, each rank's slice of every member back to back, scattered once."""

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
    world = members[0].group_size
    # Row r of the packed [world, total] tensor is what rank r receives: its
    # slice of every member, back to back.
    parts = flat_parts(graph, members, meta, created, world)
    packed = meta.call(graph, aten.cat.default, (parts, 1 if world > 1 else 0), created)
    total = sum(m.numel // world for m in members)
    flat = meta.call(graph, aten.view.default, (packed, [world * total]), created)
    scattered = meta.call(
        graph,
        c10d.reduce_scatter_tensor.default,
        (flat, bucket.reduce_op, world, bucket.group_name),
        created,
    )
    issue = list(created)
    wait = meta.call(graph, c10d.wait_tensor.default, (scattered,), created)
    outputs, copies = split_outputs(
        graph, meta, created, wait, members, [m.numel // world for m in members],
        [[m.shape[0] // world, *m.shape[1:]] for m in members], settings.copy_out,
    )
    return EmittedBucket(bucket, issue, [wait, *copies], outputs, 0, scattered)
