"""Turn each planned bucket into one copy-in, one collective, one wait and copy-outs.

Nodes are emitted with `graph.call_function`; no tracing per bucket. Each new
node gets `meta["val"]`: the collective and copy-in by running under the
graph's fake mode, the many per-member views and copies from plain meta tensors. Placement is left to
`ordering.place`, which issues each bucket once its inputs exist and waits
right before the first user of any member.
"""

from __future__ import annotations

import dataclasses
import operator

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode, maybe_get_fake_mode

from . import ops
from .layout import plan_chunk
from .records import Bucket

c10d = torch.ops._c10d_functional
aten = torch.ops.aten


# Ops whose output metadata follows from the input's alone (views and reshapes).
VIEW_OPS = frozenset({aten.view.default, aten.view.dtype, aten.slice.Tensor, aten.reshape.default})


@dataclasses.dataclass
class EmittedBucket:
    """The nodes that replace one bucket, with what `ordering` needs to place them."""

    bucket: Bucket
    issue_nodes: list[fx.Node]  # copy-in .. collective: placed once inputs exist
    wait_nodes: list[fx.Node]  # wait (+ shared views): placed before the first user
    outputs: list[fx.Node | None]  # per member: the node replacing its wait
    padding_bytes: int = 0  # over the whole gathered buffer
    collective: fx.Node | None = None
    # The copy-out of the members not needed ahead (Bucket.ahead), and their
    # outputs: placed before the first of those members' users.
    later_nodes: list[fx.Node] = dataclasses.field(default_factory=list)


class MetaEvaluator:
    """Computes `meta["val"]` of new nodes under the graph's fake mode."""

    def __init__(self, graph: fx.Graph):
        self.mode = None
        for node in graph.nodes:
            mode = maybe_get_fake_mode(node.meta.get("val"))
            if mode is not None:
                self.mode = mode
                break
        if self.mode is None:
            self.mode = FakeTensorMode()
        self._converted: dict[fx.Node, torch.Tensor] = {}
        self._meta_of: dict[fx.Node, torch.Tensor] = {}

    def val(self, node: fx.Node) -> torch.Tensor:
        v = node.meta["val"]
        if maybe_get_fake_mode(v) is self.mode:
            return v
        # Real values, or fakes of another mode: a fresh fake with the same metadata.
        cached = self._converted.get(node)
        if cached is None:
            with self.mode:
                cached = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=v.device)
            self._converted[node] = cached
        return cached

    def call(self, graph: fx.Graph, target, args: tuple, created: list[fx.Node], **kwargs) -> fx.Node:
        node = graph.call_function(target, args, kwargs)
        created.append(node)
        if target is operator.getitem:
            node.meta["val"] = args[0].meta["val"][args[1]]
        elif target is aten.clone.default:
            # A dense copy: only shape and dtype matter (same shortcut as views).
            src = self._meta(args[0])
            self._set_meta(node, torch.empty(src.shape, dtype=src.dtype, device="meta"), args[0])
        elif target in VIEW_OPS:
            # Shape-only ops run on plain meta tensors, skipping fake dispatch and
            # its cache (about 20x cheaper; the per-member copy-out is most of
            # the nodes the pass creates). A chain of views shares one meta storage.
            meta_args = fx.node.map_arg(args, self._meta)
            if target is aten.reshape.default and not meta_args[0].is_contiguous():
                # What reshape returns when it must copy; skips its slow view attempt.
                meta_out = torch.empty(meta_args[1], dtype=meta_args[0].dtype, device="meta")
            else:
                meta_out = target(*meta_args)
            self._set_meta(node, meta_out, args[0])
        else:
            with self.mode:
                node.meta["val"] = target(*fx.node.map_arg(args, self.val), **fx.node.map_arg(kwargs, self.val))
        return node

    def _set_meta(self, node: fx.Node, meta_out: torch.Tensor, source: fx.Node) -> None:
        self._meta_of[node] = meta_out
        device = self.val(source).device
        node.meta["val"] = self.mode.fake_tensor_converter.from_meta_and_device(self.mode, meta_out, device)

    def _meta(self, node: fx.Node) -> torch.Tensor:
        meta = self._meta_of.get(node)
        if meta is None:
            v = self.val(node)
            meta = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
            self._meta_of[node] = meta
        return meta


# Where a node came from: what tlparse, profiler traces and error messages read.
# Not "original_aten": a new node is not the op its member was.
PROVENANCE_KEYS = ("stack_trace", "nn_module_stack", "fwd_nn_module_stack", "source_fn_stack", "seq_nr",
                   "from_node")


def emit_bucket(graph: fx.Graph, bucket: Bucket, meta: MetaEvaluator, alignment: int,
                copy_out: str = "copy", gather_rank: int | None = None) -> EmittedBucket:
    """`copy_out`: lowering.copy_out_mode's answer for the graph. `gather_rank`: this
    rank in an all-gather's group, to gather in place (None: through a staging chunk)."""
    created: list[fx.Node] = []
    try:
        emit = {
            "all_gather": _emit_all_gather,
            "reduce_scatter": _emit_reduce_scatter,
            "all_reduce": _emit_all_reduce,
        }[bucket.kind]
        if bucket.kind == "all_gather":
            emitted = emit(graph, bucket, meta, alignment, copy_out, created, gather_rank)
        else:
            emitted = emit(graph, bucket, meta, alignment, copy_out, created)
        # The bucket's nodes point at its first member's code; each member's own
        # output at that member's wait.
        copy_provenance(bucket.members[0].node, created)
        for m, out in zip(bucket.members, emitted.outputs):
            if out is not None:
                copy_provenance(m.wait, [out])
    except Exception:
        # A bucket left unmerged leaves no node behind (a dangling wait would
        # still run its collective).
        for node in reversed(created):
            graph.erase_node(node)
        raise
    return emitted


def copy_provenance(source: fx.Node, nodes: list[fx.Node]) -> None:
    carried = {k: source.meta[k] for k in PROVENANCE_KEYS if k in source.meta}
    for node in nodes:
        node.meta.update(carried)


def _users_count(c) -> int:
    return len(c.readers())


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


def _copy_out(graph, meta: MetaEvaluator, created, result: fx.Node, rows: int, members, offsets: list[int],
              row_bytes: list[int], shapes: list[list[int]],
              copy_out: str = "copy") -> tuple[list[fx.Node | None], list[fx.Node]]:
    """Members with users as fresh dense tensors, made by one copy-out op
    (`copy_out`, or `copy_out_into`/`copy_out_packed` for those modes).

    Member i is bytes [offsets[i], offsets[i] + row_bytes[i]) of each of the
    `rows` rows of `result`.
    Returns the per-member outputs (None where unused) and the op node.
    """
    used = [i for i, m in enumerate(members) if _users_count(m)]
    if not used:
        return [None] * len(members), []
    if copy_out == "packed":
        return _copy_out_packed(graph, meta, created, result, rows, members, used, offsets, row_bytes, shapes)
    if copy_out == "into":
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


def _emit_all_gather(graph, bucket: Bucket, meta: MetaEvaluator, alignment: int, copy_out: str,
                     created, rank: int | None = None) -> EmittedBucket:
    members = bucket.members
    world = members[0].group_size
    layout = plan_chunk([(m.numel * m.dtype.itemsize, m.dtype.itemsize) for m in members], alignment,
                        groups=[m.dtype for m in members])
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
    if copy_out in ("copy", "into", "packed"):
        # The gathered buffer is [world, chunk_bytes]: member i's bytes are
        # columns [offset, offset + nbytes) of every rank's row. One copy-out
        # per group (Bucket.copy_out_groups): the members needed ahead first.
        outputs: list[fx.Node | None] = [None] * len(members)
        placed: list[list[fx.Node]] = []
        for group in bucket.copy_out_groups():
            outs, copies = _copy_out(graph, meta, created, wait, world, [members[i] for i in group],
                                     [layout.slots[i].offset for i in group], [layout.slots[i].nbytes for i in group],
                                     [shapes[i] for i in group], copy_out)
            for i, out in zip(group, outs):
                outputs[i] = out
            placed.append(copies if not placed else copies + [out for out in outs if out is not None])
        return EmittedBucket(bucket, issue, [wait, *placed[0]], outputs, layout.padding_bytes * world, gathered,
                             [n for nodes in placed[1:] for n in nodes])
    waits = [wait]
    # One dtype view of the whole gathered buffer per distinct dtype, shaped
    # [world, chunk / itemsize]; members are then plain slices in their own
    # element units, which Inductor folds into the consumers' indexing. A bool
    # member is read as bytes and compared with 0 (exact: bools gather as 0/1),
    # since not every supported Inductor lowers a view to bool.
    grids: dict[torch.dtype, fx.Node] = {}
    outputs: list[fx.Node | None] = []
    for m, slot, shape in zip(members, layout.slots, shapes):
        if not _users_count(m):
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


def _flat_parts(graph, bucket: Bucket, meta: MetaEvaluator, created, rows: int) -> list[fx.Node]:
    """Each member input as a [rows, numel / rows] tensor (a view when contiguous)."""
    parts = []
    for m in bucket.members:
        shape = [rows, m.numel // rows] if rows > 1 else [m.numel]
        parts.append(meta.call(graph, aten.reshape.default, (m.input, shape), created))
    return parts


def _emit_reduce_scatter(graph, bucket: Bucket, meta: MetaEvaluator, alignment: int, copy_out: str,
                         created) -> EmittedBucket:
    members = bucket.members
    world = members[0].group_size
    # Row r of the packed [world, total] tensor is what rank r receives: its
    # slice of every member, back to back.
    parts = _flat_parts(graph, bucket, meta, created, world)
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
    outputs, copies = _split_outputs(
        graph, meta, created, wait, members, [m.numel // world for m in members],
        [[m.shape[0] // world, *m.shape[1:]] for m in members], copy_out,
    )
    return EmittedBucket(bucket, issue, [wait, *copies], outputs, 0, scattered)


def _emit_all_reduce(graph, bucket: Bucket, meta: MetaEvaluator, alignment: int, copy_out: str,
                     created) -> EmittedBucket:
    members = bucket.members
    parts = _flat_parts(graph, bucket, meta, created, 1)
    flat = meta.call(graph, aten.cat.default, (parts,), created)
    reduced = meta.call(graph, c10d.all_reduce.default, (flat, bucket.reduce_op, bucket.group_name), created)
    issue = list(created)
    wait = meta.call(graph, c10d.wait_tensor.default, (reduced,), created)
    outputs, copies = _split_outputs(
        graph, meta, created, wait, members, [m.numel for m in members], [list(m.shape) for m in members],
        copy_out,
    )
    return EmittedBucket(bucket, issue, [wait, *copies], outputs, 0, reduced)


def _split_outputs(graph, meta, created, flat_result, members, numels, shapes,
                   copy_out: str) -> tuple[list[fx.Node | None], list[fx.Node]]:
    """Members of a flat single-dtype result, back to back: copies, or contiguous slices of it."""
    itemsize = members[0].dtype.itemsize
    offsets, offset = [], 0
    for numel in numels:
        offsets.append(offset)
        offset += numel
    if copy_out in ("copy", "into"):
        return _copy_out(graph, meta, created, flat_result, 1, members, [o * itemsize for o in offsets],
                         [n * itemsize for n in numels], shapes, copy_out)
    # "packed" and "views": the result is already its members back to back,
    # each a contiguous slice of it, read like the collective's own result.
    outputs: list[fx.Node | None] = []
    for m, start, numel, shape in zip(members, offsets, numels, shapes):
        if _users_count(m):
            part = meta.call(graph, aten.slice.Tensor, (flat_result, 0, start, start + numel), created)
            outputs.append(meta.call(graph, aten.view.default, (part, shape), created))
        else:
            outputs.append(None)
    return outputs, []


def replace_members(emitted: list[EmittedBucket]) -> list[fx.Node]:
    """Point every user of a member's wait at its copy-out; return the nodes
    that are then dead, in an order to erase them (erase_replaced). They stay
    in the graph until then, so a failure up to that point can still put the
    graph back as it was (checkpoint)."""
    replaced = []
    for e in emitted:
        for m, out in zip(e.bucket.members, e.outputs):
            if out is not None:
                for wait in m.waits:
                    wait.replace_all_uses_with(out)
                for reader in m.direct_readers:
                    reader.replace_input_with(m.node, out)
            replaced += [*m.waits, m.node]
            if m.cast_source is not None and set(m.input.users) <= {m.node}:
                replaced.append(m.input)  # a fused cast nothing else reads
    return replaced


def erase_replaced(graph: fx.Graph, replaced: list[fx.Node]) -> None:
    for node in replaced:
        graph.erase_node(node)
