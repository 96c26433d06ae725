"""Inductor lowering of the copy-out: one foreach copy per bucket, fused with nothing.

Where it is not meant to apply (the CPU by default: `copy_out_mode`), the
rewrite emits the members as graph allocations filled by one op
(copy_out_into); where it cannot apply, the copy-out is an opaque op (ops.py)
that Inductor calls as a fallback. Lowered, each member becomes an Inductor
copy of its columns of the merged buffer into a dense buffer of its own, with
two guarantees:

- the copies of a bucket form one foreach group, which Triton emits as one
  kernel (split only where Inductor's limit on kernel arguments is reached);
  CPU code has no foreach kernels, one loop per member, which is why the CPU
  keeps the op unless `lower_copy_out="always"`;
- no copy fuses with anything (`no_fuse_buffer_names`, the mechanism Inductor
  uses for its own all-reduce input): a consumer reads a dense, contiguous
  buffer with the sizes and strides the unbucketed collective gave it, so it
  compiles to the kernel it had unbucketed and sums in the same order.

A copy-out this lowering cannot express (a symbolic size, an Inductor release
without a piece used here) stays the opaque op: the lowering never fails a
compile for a layout it did not expect.
"""

from __future__ import annotations

import logging

import torch

from . import ops

log = logging.getLogger("bucketing")

_installed = False

# One-byte dtypes a copy kernel moves as uint8, viewed back by aten in the
# wrapper (no kernel): bool, whose bitcast not every Inductor release lowers,
# and the fp8 formats, which Triton cannot name on every GPU (sm80 has none).
_COPIED_AS_BYTES = frozenset(
    d for d in (torch.bool, *(getattr(torch, n, None) for n in
                              ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")))
    if d is not None
)


def install() -> None:
    """Register the lowering with Inductor (once per process; idempotent)."""
    global _installed
    if _installed:
        return
    from torch._inductor import lowering as inductor_lowering

    op = torch.ops.bucketing_ops.copy_out.default
    inductor_lowering.register_lowering(op, type_promotion_kind=None)(_lower_copy_out)
    _installed = True


# The copy-out node's meta entry saying where it is lowered (options.lower_copy_out).
WHERE = "bucketing_lower_copy_out"


def mark(nodes, where: str) -> None:
    """Tag the copy-out nodes among `nodes` with where they are lowered."""
    for node in nodes:
        if node.target is torch.ops.bucketing_ops.copy_out.default:
            node.meta[WHERE] = where


def copy_out_mode(device: torch.device, copy_out: str, where: str) -> str:
    """The copy-out the rewrite emits for a graph on `device` (options.copy_out,
    `where`: options.lower_copy_out).

    "copy" is kept where the copy-out is meant to be lowered; elsewhere it
    becomes "into" (members the graph allocates, filled in place by one op).
    Decided once per graph, where only the device is known: "gpu" means any
    device but the CPU, whose Inductor code has no foreach kernels. A device
    whose backend lacks them keeps the op at lowering time (_lowered_here),
    which is correct, only slower.
    """
    lowered = device.type != "cpu" if where == "gpu" else where == "always"
    return "into" if copy_out == "copy" and not lowered else copy_out


def _lowered_here(device) -> bool:
    from torch._inductor.codegen.common import BackendFeature
    from torch._inductor.virtualized import V

    node = V.graph.current_node
    where = node.meta.get(WHERE, "gpu") if node is not None else "gpu"
    if where == "gpu":
        return V.graph.has_feature(device, BackendFeature.FOREACH)
    return where == "always"


def _lower_copy_out(buffer, rows, offsets, row_bytes, dtypes, shapes, ndims):
    from torch._inductor import lowering as inductor_lowering

    try:
        if _lowered_here(buffer.get_device()):
            return _copies(buffer, rows, offsets, row_bytes, dtypes.split(","), ops._member_shapes(shapes, ndims))
    except Exception as error:  # an Inductor release without a piece used here
        log.info("bucketing: copy-out kept as an op (lowering failed: %s)", error)
    fallback = inductor_lowering.fallback_handler(torch.ops.bucketing_ops.copy_out.default, add_to_fallback_set=False)
    return fallback(buffer, rows, offsets, row_bytes, dtypes, shapes, ndims)


def _copies(buffer, rows, offsets, row_bytes, names, shapes):
    from torch._inductor import lowering as inductor_lowering
    from torch._inductor.codegen.common import BackendFeature
    from torch._inductor.virtualized import V

    L = inductor_lowering
    buffer_dtype = buffer.get_dtype()
    total_bytes = _numel(buffer) * buffer_dtype.itemsize
    row_width_bytes = total_bytes // rows
    # One [rows, row_width / itemsize] view of the buffer per dtype; a member is
    # then a column slice of it in its own elements.
    grids: dict[torch.dtype, object] = {}
    copies = []
    for name, offset, nbytes, shape in zip(names, offsets, row_bytes, shapes):
        dtype = ops.dtype_from_name(name)
        as_bytes = dtype in _COPIED_AS_BYTES
        if as_bytes:
            dtype = torch.uint8
        grid = grids.get(dtype)
        if grid is None:
            typed = buffer if dtype == buffer_dtype else L.to_dtype_bitcast(buffer, dtype)
            grid = L.view(typed, [rows, row_width_bytes // dtype.itemsize])
            grids[dtype] = grid
        start = offset // dtype.itemsize
        column = L.slice_(grid, 1, start, start + nbytes // dtype.itemsize)
        dense = L.clone(column)
        dense.realize()
        copies.append((dense, shape, ops.dtype_from_name(name) if as_bytes else None))
    V.graph.no_fuse_buffer_names.update(dense.get_name() for dense, _, _ in copies)
    if V.graph.has_feature(buffer.get_device(), BackendFeature.FOREACH):
        V.graph.register_operation_list([dense.get_operation_name() for dense, _, _ in copies])
    aten_view = L.fallback_handler(torch.ops.aten.view.dtype, add_to_fallback_set=False)
    return [L.view(dense if dtype is None else aten_view(dense, dtype), shape) for dense, shape, dtype in copies]


def _numel(box) -> int:
    # Static sizes only (bucketed members have them); a symbolic size raises
    # here and the copy-out stays the op.
    return int(box.get_numel())
