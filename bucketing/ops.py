"""Custom ops emitted by the rewrite, registered on `import bucketing`.

Namespace `bucketing_ops`: torch's own pass owns `bucketing::`, and both must
load into one process. Dtypes travel as their names (`"bfloat16"`), which do
not move between torch releases.

The copy-in and the copy-out are ops of ours (the copy-out lowered into
Inductor kernels by lowering.py); the collective stays a plain
`_c10d_functional` op, so Inductor's comm analysis sees it.
"""

from __future__ import annotations

import functools

import torch

NAMESPACE = "bucketing_ops"
# Layouts remembered per distinct bucket (dtypes, offsets, sizes): a program
# has a few hundred at most; the cap only bounds a pathological one.
LAYOUT_CACHE_SIZE = 4096


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.bfloat16` -> "bfloat16", as op arguments and plans write dtypes."""
    return str(dtype).removeprefix("torch.")


def dtype_names(dtypes) -> str:
    """The op's dtype argument: names joined by commas (schemas have no list[str])."""
    return ",".join(dtype_name(d) for d in dtypes)


@functools.lru_cache(maxsize=None)
def dtype_from_name(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype name {name!r}")
    return dtype


@functools.lru_cache(maxsize=LAYOUT_CACHE_SIZE)
def _copy_plan(dtypes: str, offsets: tuple, numels: tuple) -> tuple:
    """How to fill the chunk: per destination dtype, its span of the chunk (in
    that dtype's elements) and the pieces that fill it, in order: an input
    index, or a number of padding elements.

    Members of one dtype are laid out together (layout.plan_chunk), so each
    dtype's span is filled by one `torch.cat(..., out=span)`; a cast from the
    input's dtype happens inside it. Everything here comes from the graph, so
    a compiled step plans once.
    """
    groups: dict[torch.dtype, list] = {}
    for i, (name, offset, numel) in enumerate(zip(dtypes.split(","), offsets, numels)):
        if numel:
            dtype = dtype_from_name(name)
            groups.setdefault(dtype, []).append((offset // dtype.itemsize, numel, i))
    for members in groups.values():
        members.sort()
    spans = sorted((ms[0][0] * d.itemsize, (ms[-1][0] + ms[-1][1]) * d.itemsize) for d, ms in groups.items())
    if any(end > next_start for (_, end), (next_start, _) in zip(spans, spans[1:])):
        # Dtypes interleaved (a layout not grouped by dtype): one piece per member.
        return tuple((d, first, first + numel, (i,), 0) for d, ms in groups.items() for first, numel, i in ms)
    plan = []
    for dtype, members in groups.items():
        start = members[0][0]
        pieces, pos, widest_pad = [], start, 0
        for first, numel, i in members:
            if first > pos:
                pieces.append(-(first - pos))  # padding, as a negative count
                widest_pad = max(widest_pad, first - pos)
            pieces.append(i)
            pos = first + numel
        plan.append((dtype, start, pos, tuple(pieces), widest_pad))
    return tuple(plan)


# Padding pieces, per (plan, device): their contents never matter (padding is
# gathered, never read), so one small tensor per dtype serves every call.
_PADDING: dict[tuple, list] = {}


def _fill_templates(plan: tuple, device: torch.device) -> list:
    key = (plan, device)
    templates = _PADDING.get(key)
    if templates is None:
        templates = []
        for dtype, _, _, pieces, widest_pad in plan:
            pad = torch.empty(widest_pad, dtype=dtype, device=device)
            parts = [pad[:-k] if k < 0 else None for k in pieces]
            slots = [(j, k) for j, k in enumerate(pieces) if k >= 0]
            templates.append((parts, slots))
        if len(_PADDING) >= LAYOUT_CACHE_SIZE:
            _PADDING.clear()
        _PADDING[key] = templates
    return templates


def _fill_chunk(chunk, inputs, offsets, numels, dtypes) -> None:
    """Write the members into one rank's chunk of bytes at their offsets (padding is never read)."""
    device = inputs[0].device
    plan = _copy_plan(dtypes, tuple(offsets), tuple(numels))
    for (dtype, start, end, _, _), (template, slots) in zip(plan, _fill_templates(plan, device)):
        parts = template.copy()
        for j, k in slots:
            x = inputs[k]
            parts[j] = x if x.dim() == 1 else x.reshape(-1)
        span = chunk.view(dtype)[start:end]
        try:
            torch.cat(parts, out=span)
        except RuntimeError:
            # A backend without `cat` for this dtype pair: copy piece by piece.
            pos = 0
            for part in parts:
                span[pos:pos + part.numel()].copy_(part)
                pos += part.numel()


def _copy_in_impl(inputs, offsets, numels, dtypes, chunk_bytes):
    chunk = torch.empty(chunk_bytes, dtype=torch.uint8, device=inputs[0].device)
    _fill_chunk(chunk, inputs, offsets, numels, dtypes)
    return chunk


def _copy_in_slot_impl(inputs, offsets, numels, dtypes, chunk_bytes, world, rank):
    gathered = torch.empty(world * chunk_bytes, dtype=torch.uint8, device=inputs[0].device)
    _fill_chunk(gathered[rank * chunk_bytes:(rank + 1) * chunk_bytes], inputs, offsets, numels, dtypes)
    return gathered


# By default the copy-in fills a chunk-sized staging buffer that the all-gather
# then reads. Writing straight into this rank's slot of the gathered buffer
# (`all_gather_copy_in_slot`, option gather_in_place) needs the rank in the
# graph, one compiled artifact per rank: an op cannot return a view of its own
# output, and nothing in a graph yields the rank at run time. The staging buffer
# costs one bucket / world_size of memory and no extra copy (the collective
# reads it in place of the slot), and keeps the compiled code identical on
# every rank.
#
# Registered with torch.library.define/impl rather than custom_op: the op has
# no autograd, and skipping custom_op's Python wrapper layers cuts its call
# overhead, which a compiled step pays once per bucket.
_lib = torch.library.Library(NAMESPACE, "DEF")
_lib.define(
    "all_gather_copy_in(Tensor[] inputs, int[] offsets, int[] numels, str dtypes, int chunk_bytes) -> Tensor"
)
_lib.impl("all_gather_copy_in", _copy_in_impl, "CompositeExplicitAutograd")
_lib.define(
    "all_gather_copy_in_slot(Tensor[] inputs, int[] offsets, int[] numels, str dtypes, int chunk_bytes, "
    "int world, int rank) -> Tensor"
)
_lib.impl("all_gather_copy_in_slot", _copy_in_slot_impl, "CompositeExplicitAutograd")


@torch.library.register_fake(f"{NAMESPACE}::all_gather_copy_in")
def _(inputs, offsets, numels, dtypes, chunk_bytes):
    return inputs[0].new_empty(chunk_bytes, dtype=torch.uint8)


@torch.library.register_fake(f"{NAMESPACE}::all_gather_copy_in_slot")
def _(inputs, offsets, numels, dtypes, chunk_bytes, world, rank):
    return inputs[0].new_empty(world * chunk_bytes, dtype=torch.uint8)


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor's storage as a flat byte view (bool and 0-d included)."""
    return t.reshape(-1).view(torch.uint8)


def _member_shapes(shapes: list[int], ndims: list[int]) -> list[list[int]]:
    out, pos = [], 0
    for n in ndims:
        out.append(list(shapes[pos:pos + n]))
        pos += n
    return out


def _copy_out_impl(buffer, rows, offsets, row_bytes, dtypes, shapes, ndims):
    """Fresh contiguous members out of a merged collective's result.

    `buffer` holds `rows` equal rows of bytes (the ranks' chunks of a gathered
    buffer; one row for reductions); member i's bytes are columns
    [offsets[i], offsets[i] + row_bytes[i]) of every row, and its result has
    shape `shapes` (flattened, `ndims` dims each). Members of one dtype that sit
    next to each other are copied by one `split_with_sizes_copy` over that
    stretch of columns read in their dtype (one kernel on CUDA); gaps inside a
    stretch go to scratch. The CPU's compiled steps use copy_out_into instead.
    """
    src = _as_bytes(buffer).view(rows, -1)
    names = dtypes.split(",")
    outs = [
        torch.empty(shape, dtype=dtype_from_name(name), device=buffer.device)
        for name, shape in zip(names, _member_shapes(shapes, ndims))
    ]
    for name, start, end, pieces in _copy_out_stretches(tuple(offsets), tuple(row_bytes), dtypes):
        dtype = dtype_from_name(name)
        region = src[:, start:end].view(dtype)
        out = [(outs[i] if outs[i].dtype == dtype else outs[i].view(dtype)).view(rows, width) if i >= 0
               else region.new_empty(rows, width) for i, width in pieces]
        torch.split_with_sizes_copy(region, [width for _, width in pieces], dim=1, out=out)
    return outs


def _copy_out_into_impl(buffer, rows, offsets, row_bytes, dtypes, outs):
    """Member i's bytes, columns [offsets[i], offsets[i] + row_bytes[i]) of
    every one of the `rows` rows of `buffer`, into `outs[i]` ([rows, width]).

    Per run of same-dtype members: one call makes the strided source views,
    one foreach copy fills every member; no per-member Python but the bool
    members' byte views.
    """
    src = _as_bytes(buffer).view(rows, -1)
    for name, start, end, widths, pairs, as_bytes in _copy_into_plan(tuple(offsets), tuple(row_bytes), dtypes):
        parts = torch.split_with_sizes(src[:, start:end].view(dtype_from_name(name)), widths, dim=1)
        torch._foreach_copy_([outs[i].view(torch.uint8) if i in as_bytes else outs[i] for i, _ in pairs],
                             [parts[j] for _, j in pairs])


@functools.lru_cache(maxsize=LAYOUT_CACHE_SIZE)
def _copy_into_plan(offsets: tuple, row_bytes: tuple, dtypes: str) -> list:
    """Per stretch: (copy dtype name, first column, end column, piece widths,
    (member, piece) pairs of the non-empty members, members copied as bytes)."""
    names = dtypes.split(",")
    plan = []
    for name, start, end, pieces in _copy_out_stretches(offsets, row_bytes, dtypes):
        pairs = tuple((i, j) for j, (i, width) in enumerate(pieces) if i >= 0 and width)
        if not pairs:  # empty members only: nothing to copy
            continue
        as_bytes = frozenset(i for i, _ in pairs if names[i] != name)
        plan.append((name, start, end, [width for _, width in pieces], pairs, as_bytes))
    return plan


# The copy-out where it is not lowered into Inductor kernels (the CPU): the
# graph allocates each member ([rows, width], a plain Inductor buffer: no
# kernel, no per-output check in the generated code) and views it to the
# member's shape; this op fills them all in one call. It returns nothing, so
# the rewrite orders its readers after it (ordering.reorder).
_lib.define(
    "copy_out_into(Tensor buffer, int rows, int[] offsets, int[] row_bytes, str dtypes, Tensor(a!)[] outs) -> ()"
)
_lib.impl("copy_out_into", _copy_out_into_impl, "CompositeExplicitAutograd")


@torch.library.register_fake(f"{NAMESPACE}::copy_out_into")
def _(buffer, rows, offsets, row_bytes, dtypes, outs):
    return None


@functools.lru_cache(maxsize=LAYOUT_CACHE_SIZE)
def _copy_out_stretches(offsets: tuple, row_bytes: tuple, dtypes: str) -> list:
    """[(copy dtype name, first column, end column, [(member or -1 for a gap, width in elements)])].

    A stretch is a run of members of one dtype in column order; the layout
    aligns every member to its itemsize, so gaps inside a run are whole elements.
    """
    # bool is copied as bytes: a bool copy may turn any nonzero byte into 1.
    return _stretches(offsets, row_bytes, tuple("uint8" if name == "bool" else name for name in dtypes.split(",")))


def _stretches(offsets: tuple, row_bytes: tuple, names: tuple) -> list:
    stretches: list = []
    for i in sorted(range(len(offsets)), key=lambda i: offsets[i]):
        size = dtype_from_name(names[i]).itemsize
        if stretches and stretches[-1][0] == names[i]:
            name, start, end, pieces = stretches[-1]
            if offsets[i] > end:
                pieces.append((-1, (offsets[i] - end) // size))
            pieces.append((i, row_bytes[i] // size))
            stretches[-1] = (name, start, offsets[i] + row_bytes[i], pieces)
        else:
            stretches.append((names[i], offsets[i], offsets[i] + row_bytes[i], [(i, row_bytes[i] // size)]))
    return stretches


# The copy-out is an op of ours, not aten views: Inductor fuses views of the
# merged buffer into each consumer, which then reads a strided slice instead of
# the dense tensor the unbucketed collective gave it, may compile to another
# kernel (another summation order) and so change the last bits. In a compiled
# step the op is lowered (lowering.py) to copies Inductor fuses with nothing;
# this implementation runs eagerly and wherever the lowering does not apply.
_lib.define(
    "copy_out(Tensor buffer, int rows, int[] offsets, int[] row_bytes, str dtypes, int[] shapes, int[] ndims)"
    " -> Tensor[]"
)
_lib.impl("copy_out", _copy_out_impl, "CompositeExplicitAutograd")


@torch.library.register_fake(f"{NAMESPACE}::copy_out")
def _(buffer, rows, offsets, row_bytes, dtypes, shapes, ndims):
    return [
        buffer.new_empty(shape, dtype=dtype_from_name(name))
        for name, shape in zip(dtypes.split(","), _member_shapes(shapes, ndims))
    ]


@functools.lru_cache(maxsize=LAYOUT_CACHE_SIZE)
def packed_stretches(offsets: tuple, row_bytes: tuple, dtypes: str) -> list:
    """The outputs of copy_out_packed: [(dtype name, first column, end column, [(member or -1, width)])].

    One output per run of same-dtype members in column order (bool apart from
    uint8): `rows` x (end - start) bytes, read in that dtype, the run's
    columns row by row per member. A member at element column c of its run,
    w elements wide, is elements [rows * c, rows * (c + w)) of the output.
    """
    return _stretches(offsets, row_bytes, tuple(dtypes.split(",")))


@functools.lru_cache(maxsize=LAYOUT_CACHE_SIZE)
def _row_templates(rows: int, widths: tuple, name: str) -> list:
    """Shape holders [rows, width] for unflatten_dense_tensors (meta: no memory)."""
    dtype = dtype_from_name(name)
    return [torch.empty(rows, w, dtype=dtype, device="meta") for w in widths]


def _copy_out_packed_impl(buffer, rows, offsets, row_bytes, dtypes):
    """Members of a merged result packed densely, one flat tensor per run of same-dtype members.

    Member i is bytes [offsets[i], offsets[i] + row_bytes[i]) of each of the
    `rows` rows of `buffer`; in its run's output it is rows * width elements,
    row after row: exactly the tensor its own collective returned. A constant
    number of C++ calls per run, whatever its number of members (views into
    the output made in one call, then one split copy), so members reach
    consumers as contiguous slices at no per-member cost.
    """
    src = _as_bytes(buffer).view(rows, -1)
    outs = []
    for name, start, end, pieces in packed_stretches(tuple(offsets), tuple(row_bytes), dtypes):
        copy_name = "uint8" if name == "bool" else name
        dtype = dtype_from_name(copy_name)
        region = src[:, start:end].view(dtype)
        widths = tuple(width for _, width in pieces)
        out = torch.empty(region.numel(), dtype=dtype, device=buffer.device)
        if rows == 1:
            out.copy_(region.view(-1))
        else:
            if all(widths):
                targets = torch._C._nn.unflatten_dense_tensors(out, _row_templates(rows, widths, copy_name))
            else:  # unflatten makes an empty member 1-D
                targets = [part.view(rows, -1) for part in out.split([rows * w for w in widths])]
            torch.split_with_sizes_copy(region, list(widths), dim=1, out=targets)
        outs.append(out.view(torch.bool) if name == "bool" else out)
    return outs


_lib.define("copy_out_packed(Tensor buffer, int rows, int[] offsets, int[] row_bytes, str dtypes) -> Tensor[]")
_lib.impl("copy_out_packed", _copy_out_packed_impl, "CompositeExplicitAutograd")


@torch.library.register_fake(f"{NAMESPACE}::copy_out_packed")
def _(buffer, rows, offsets, row_bytes, dtypes):
    return [
        buffer.new_empty(rows * (end - start) // dtype_from_name(name).itemsize, dtype=dtype_from_name(name))
        for name, start, end, _ in packed_stretches(tuple(offsets), tuple(row_bytes), dtypes)
    ]


# Checks already passed, by (check id, plan): each graph's check runs once. The
# id numbers the checks a process inserted, so every rank that compiled the
# same graphs in the same order checks (or skips) the same ones together.
_VERIFIED: set[tuple[int, str]] = set()


@torch.library.custom_op(f"{NAMESPACE}::verify_plan", mutates_args=())
def verify_plan(check_id: int, plan_lines: str) -> None:
    """Raise on every rank, naming the first differing bucket, when ranks built different plans.

    Runs before the graph's first collective, so a divergence is an error
    instead of a deadlock. Uses the default process group.
    """
    if (check_id, plan_lines) in _VERIFIED:
        return
    import torch.distributed as dist

    lines = plan_lines.split("\n") if plan_lines else []
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, lines)
    mine = dist.get_rank()
    for other, theirs in enumerate(gathered):
        if theirs == lines:
            continue
        for i in range(max(len(lines), len(theirs))):
            a = lines[i] if i < len(lines) else "<no bucket>"
            b = theirs[i] if i < len(theirs) else "<no bucket>"
            if a != b:
                raise RuntimeError(
                    f"bucketing: ranks built different collective plans; first difference at bucket {i}: "
                    f"rank {mine} has {a!r}, rank {other} has {b!r}. Every rank must compile the same graph."
                )
    _VERIFIED.add((check_id, plan_lines))


@verify_plan.register_fake
def _(check_id, plan_lines):
    return None


# Keeps dead-code elimination (FX and Inductor) from dropping the check.
torch.fx.node.has_side_effect(torch.ops.bucketing_ops.verify_plan.default)
