"""Members out of a merged result: one copy-out op per group of members, or slices.

Member i is bytes [offsets[i], offsets[i] + row_bytes[i]) of each of the
`rows` rows of the result. `copy_out` picks how: "copy" one op returning
every member, "into" one op filling tensors the graph allocates, "packed" one
op packing each run of same-dtype members, "views" slices of the result.
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx

from .. import ops
from .nodes import MetaEvaluator

aten = torch.ops.aten


def _copy_out_packed(graph, meta: MetaEvaluator, created, result: fx.Node, rows: int, members, used: list[int],
                     offsets: list[int], row_bytes: list[int], shapes: list[list[int]]):
    """Members with users as contiguous slices of dense runs, made by one `copy_out_packed` op."""
    args = ([offsets[i] for i in used], [row_bytes[i] for i in used], ops.dtype_names(members[i].dtype for i in used))
    node = meta.call(graph, torch.ops.bucketing_ops.copy_out_packed.default, (result, rows, *args), created)
    outputs: list[fx.Node | None] = [None] * len(members)
    for k, (_, _, _, pieces) in enumerate(ops.packed_stretches(tuple(args[0]), tuple(args[1]), args[2])):
        run = meta.call(graph, operator.getitem, (node, k), created)
        column = 0
        for j, width in pieces:
            if j >= 0:
                i = used[j]
                part = meta.call(graph, aten.slice.Tensor, (run, 0, rows * column, rows * (column + width)), created)
                outputs[i] = meta.call(graph, aten.view.default, (part, shapes[i]), created)
            column += width
    return outputs, [node]


def _copy_out_into(graph, meta: MetaEvaluator, created, result: fx.Node, rows: int, members, used: list[int],
                   offsets: list[int], row_bytes: list[int], shapes: list[list[int]]):
    """Members with users as fresh tensors the graph allocates, filled by one `copy_out_into` op.

    Each is a `new_empty` [rows, width] (in Inductor a buffer of its own, no
    kernel; on the result's device, which the graph so never names: one
    graph for every rank) viewed to the member's shape, so a consumer reads a
    dense tensor of the shape and strides the collective gave it, as with
    `copy_out`.
    """
    empties = [
        meta.call(graph, aten.new_empty.default, (result, [rows, row_bytes[i] // members[i].dtype.itemsize]),
                  created, dtype=members[i].dtype)
        for i in used
    ]
    fill = meta.call(
        graph,
        torch.ops.bucketing_ops.copy_out_into.default,
        (result, rows, [offsets[i] for i in used], [row_bytes[i] for i in used],
         ops.dtype_names(members[i].dtype for i in used), empties),
        created,
    )
    outputs: list[fx.Node | None] = [None] * len(members)
    for empty, i in zip(empties, used):
        outputs[i] = meta.call(graph, aten.view.default, (empty, shapes[i]), created)
    return outputs, [*empties, fill]


def copy_out(graph, meta: MetaEvaluator, created, result: fx.Node, rows: int, members, offsets: list[int],
              row_bytes: list[int], shapes: list[list[int]],
              mode: str = "copy") -> tuple[list[fx.Node | None], list[fx.Node]]:
    """Members with users as fresh dense tensors, made by one copy-out op
    (`copy_out`, or `copy_out_into`/`copy_out_packed` for those modes).

    Member i is bytes [offsets[i], offsets[i] + row_bytes[i]) of each of the
    `rows` rows of `result`.
    Returns the per-member outputs (None where unused) and the op node.
    """
    used = [i for i, m in enumerate(members) if m.readers()]
    if not used:
        return [None] * len(members), []
    if mode == "packed":
        return _copy_out_packed(graph, meta, created, result, rows, members, used, offsets, row_bytes, shapes)
    if mode == "into":
        return _copy_out_into(graph, meta, created, result, rows, members, used, offsets, row_bytes, shapes)
    flat_shapes = [s for i in used for s in shapes[i]]
    node = meta.call(
        graph,
        torch.ops.bucketing_ops.copy_out.default,
        (
            result,
            rows,
            [offsets[i] for i in used],
            [row_bytes[i] for i in used],
            ops.dtype_names(members[i].dtype for i in used),
            flat_shapes,
            [len(shapes[i]) for i in used],
        ),
        created,
    )
    outputs: list[fx.Node | None] = [None] * len(members)
    for j, i in enumerate(used):
        outputs[i] = meta.call(graph, operator.getitem, (node, j), created)
    return outputs, [node]


def flat_parts(graph, members, meta: MetaEvaluator, created, rows: int) -> list[fx.Node]:
    """Each member input as a [rows, numel / rows] tensor (a view when contiguous)."""
    parts = []
    for m in members:
        shape = [rows, m.numel // rows] if rows > 1 else [m.numel]
        parts.append(meta.call(graph, aten.reshape.default, (m.input, shape), created))
    return parts


def split_outputs(graph, meta, created, flat_result, members, numels, shapes,
                   mode: str) -> tuple[list[fx.Node | None], list[fx.Node]]:
    """Members of a flat single-dtype result, back to back: copies, or contiguous slices of it."""
    itemsize = members[0].dtype.itemsize
    offsets, offset = [], 0
    for numel in numels:
        offsets.append(offset)
        offset += numel
    if mode in ("copy", "into"):
        return copy_out(graph, meta, created, flat_result, 1, members, [o * itemsize for o in offsets],
                        [n * itemsize for n in numels], shapes, mode)
    # "packed" and "views": the result is already its members back to back,
    # each a contiguous slice of it, read like the collective's own result.
    outputs: list[fx.Node | None] = []
    for m, start, numel, shape in zip(members, offsets, numels, shapes):
        if m.readers():
            part = meta.call(graph, aten.slice.Tensor, (flat_result, 0, start, start + numel), created)
            outputs.append(meta.call(graph, aten.view.default, (part, shape), created))
        else:
            outputs.append(None)
    return outputs, []


