"""All-gather buckets: one multi-dtype chunk per rank, gathered once, members copied out.

Each member takes an aligned slot of the chunk (layout.py); the copy-in packs
the members (converting a fused cast on the way), the collective gathers
every rank's chunk into a [world, chunk] buffer, and each member is columns
of every row. In place, the copy-in writes this rank's slot of the gathered
buffer, and the collective fills the rest.
"""

from __future__ import annotations

import logging

import torch
import torch.fx as fx

from .. import ops
from ..collectives import resolved_rank
from ..plan.records import Bucket
from .copy_out import copy_out
from .layout import plan_chunk
from .nodes import EmitSettings, EmittedBucket, MetaEvaluator

c10d = torch.ops._c10d_functional
aten = torch.ops.aten
log = logging.getLogger("bucketing")


def emit(graph: fx.Graph, bucket: Bucket, meta: MetaEvaluator, settings: EmitSettings,
         created: list[fx.Node]) -> EmittedBucket:
    members = bucket.members
    world = members[0].group_size
    layout = plan_chunk([(m.numel * m.dtype.itemsize, m.dtype.itemsize) for m in members], settings.alignment,
                        groups=[m.dtype for m in members])
    rank = _gather_rank(bucket) if settings.gather_in_place else None
    sources = [m.cast_source if m.cast_source is not None else m.input for m in members]
    copy_in_args = (
        sources,
        [s.offset for s in layout.slots],
        [m.numel for m in members],
        ops.dtype_names(m.dtype for m in members),
        layout.chunk_bytes,
    )
    if rank is None:
        copy_in = meta.call(graph, torch.ops.bucketing_ops.all_gather_copy_in.default, copy_in_args, created)
        gathered = meta.call(graph, c10d.all_gather_into_tensor.default, (copy_in, world, bucket.group_name),
                             created)
    else:
        # In place: the copy-in writes this rank's slot of the gathered buffer,
        # and the collective reads the slot and fills the rest (as NCCL's
        # in-place all-gather does); no staging chunk is live beside the bucket.
        buffer = meta.call(graph, torch.ops.bucketing_ops.all_gather_copy_in_slot.default,
                           (*copy_in_args, world, rank), created)
        chunk = layout.chunk_bytes
        slot = meta.call(graph, aten.slice.Tensor, (buffer, 0, rank * chunk, (rank + 1) * chunk), created)
        gathered = meta.call(graph, c10d.all_gather_into_tensor_out.default, (slot, world, bucket.group_name),
                             created, out=buffer)
    issue = list(created)
    wait = meta.call(graph, c10d.wait_tensor.default, (gathered,), created)
    shapes = [[world * m.shape[0], *m.shape[1:]] for m in members]
    if settings.copy_out != "views":
        return _copied_out(graph, bucket, meta, settings.copy_out, created, layout, issue, wait, gathered, shapes)
    return _viewed_out(graph, bucket, meta, created, layout, issue, wait, gathered, shapes)


def _copied_out(graph, bucket: Bucket, meta: MetaEvaluator, mode: str, created, layout, issue, wait, gathered,
                shapes) -> EmittedBucket:
    """The gathered buffer is [world, chunk_bytes]: member i's bytes are
    columns [offset, offset + nbytes) of every rank's row. One copy-out per
    group (Bucket.copy_out_groups): a policy's members set apart first, each
    where the graph needs it; the second is placed where the rest are needed."""
    members, world = bucket.members, bucket.members[0].group_size
    outputs: list[fx.Node | None] = [None] * len(members)
    placed: list[list[fx.Node]] = []
    for group in bucket.copy_out_groups():
        outs, copies = copy_out(graph, meta, created, wait, world, [members[i] for i in group],
                                [layout.slots[i].offset for i in group], [layout.slots[i].nbytes for i in group],
                                [shapes[i] for i in group], mode)
        for i, out in zip(group, outs):
            outputs[i] = out
        placed.append(copies if not placed else copies + [out for out in outs if out is not None])
    return EmittedBucket(bucket, issue, [wait, *placed[0]], outputs, layout.padding_bytes * world, gathered,
                         [n for nodes in placed[1:] for n in nodes])


def _viewed_out(graph, bucket: Bucket, meta: MetaEvaluator, created, layout, issue, wait, gathered,
                shapes) -> EmittedBucket:
    """Members as views of the gathered buffer, cloned dense at their first use."""
    members, world = bucket.members, bucket.members[0].group_size
    waits = [wait]
    # One dtype view of the whole gathered buffer per distinct dtype, shaped
    # [world, chunk / itemsize]; members are then plain slices in their own
    # element units, which Inductor folds into the consumers' indexing. A bool
    # member is read as bytes and compared with 0 (exact: bools gather as 0/1),
    # since not every supported Inductor lowers a view to bool.
    grids: dict[torch.dtype, fx.Node] = {}
    outputs: list[fx.Node | None] = []
    for m, slot, shape in zip(members, layout.slots, shapes):
        if not m.readers():
            outputs.append(None)
            continue
        view_dtype = torch.uint8 if m.dtype == torch.bool else m.dtype
        itemsize = view_dtype.itemsize
        grid = grids.get(view_dtype)
        if grid is None:
            typed = wait
            if view_dtype != torch.uint8:
                typed = meta.call(graph, aten.view.dtype, (wait, view_dtype), created)
            grid = meta.call(graph, aten.view.default, (typed, [world, layout.chunk_bytes // itemsize]), created)
            grids[view_dtype] = grid
            waits.append(grid)
            if typed is not wait:
                waits.insert(-1, typed)
        start = slot.offset // itemsize
        part = meta.call(graph, aten.slice.Tensor, (grid, 1, start, start + slot.nbytes // itemsize), created)
        if m.dtype == torch.bool:
            dense = meta.call(graph, aten.ne.Scalar, (part, 0), created)
        else:
            # Contiguous like the collective's own result: users traced against
            # a contiguous tensor may `view` it. Inductor folds the clone into them.
            dense = meta.call(graph, aten.clone.default, (part,), created, memory_format=torch.contiguous_format)
        outputs.append(meta.call(graph, aten.view.default, (dense, shape), created))
    return EmittedBucket(bucket, issue, waits, outputs, layout.padding_bytes * world, gathered)


def _gather_rank(bucket: Bucket) -> int | None:
    """This rank in the bucket's group, for an in-place gather; None (a staging chunk) where
    the group does not resolve here."""
    rank = resolved_rank(bucket.group_name)
    if rank is None:
        log.info("bucketing: gather_in_place: group %s does not resolve here; bucket %s gathers through "
                 "a staging chunk", bucket.group_name, bucket.index)
    return rank
