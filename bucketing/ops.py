"""Custom ops emitted by the rewrite, registered on `import bucketing`.

Namespace `bucketing_ops`: torch's own pass owns `bucketing::`, and both must
load into one process. Dtypes travel as their names (`"bfloat16"`), which do
not move between torch releases.

Only the copy-in is an op of ours. The collective stays a plain
`_c10d_functional` op and the copy-out stays aten views, so Inductor's comm
analysis sees the collective and can fuse the copy-out into its consumers.
"""

from __future__ import annotations

import functools

import torch

NAMESPACE = "bucketing_ops"


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_names(dtypes) -> str:
    """The op's dtype argument: names joined by commas (schemas have no list[str])."""
    return ",".join(dtype_name(d) for d in dtypes)


def dtype_from_name(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype name {name!r}")
    return dtype


@functools.lru_cache(maxsize=4096)
def _copy_plan(dtypes: str, src_dtypes: str, offsets: tuple, numels: tuple, chunk_bytes: int) -> tuple:
    """How to cut the chunk: per (dst dtype, src dtype) group, split sizes over the
    chunk viewed in the dst dtype and which pieces receive which inputs.

    Everything here comes from the graph, so a compiled step plans once; each
    call then makes one `split_with_sizes` and one `_foreach_copy_` per group
    instead of slicing and viewing per member in Python.
    """
    groups: dict[tuple, list] = {}
    members = zip(dtypes.split(","), src_dtypes.split(","), offsets, numels)
    for i, (name, src, offset, numel) in enumerate(members):
        if numel:
            dtype = dtype_from_name(name)
            groups.setdefault((dtype, src), []).append((i, offset // dtype.itemsize, numel))
    plan = []
    for (dtype, _), group in groups.items():
        sizes, take, pos = [], [], 0
        for i, start, numel in group:
            if start > pos:
                sizes.append(start - pos)
            take.append((i, len(sizes)))
            sizes.append(numel)
            pos = start + numel
        total = chunk_bytes // dtype.itemsize
        if total > pos:
            sizes.append(total - pos)
        plan.append((dtype, sizes, [k for _, k in take], [i for i, _ in take]))
    return tuple(plan)


def _copy_in_impl(inputs, offsets, numels, dtypes, src_dtypes, chunk_bytes):
    chunk = torch.empty(chunk_bytes, dtype=torch.uint8, device=inputs[0].device)
    for dtype, sizes, pieces_taken, inputs_taken in _copy_plan(
        dtypes, src_dtypes, tuple(offsets), tuple(numels), chunk_bytes
    ):
        pieces = chunk.view(dtype).split_with_sizes(sizes)
        srcs = [inputs[i] for i in inputs_taken]
        torch._foreach_copy_([pieces[k] for k in pieces_taken], [x if x.dim() == 1 else x.reshape(-1) for x in srcs])
    return chunk


# The copy-in fills a chunk-sized staging buffer that the all-gather then reads.
# Writing straight into this rank's slot of the gathered buffer would need the
# rank in the graph (one compiled artifact per rank) or an op returning a view
# of its own output, which torch.library forbids. The staging buffer costs one
# bucket / world_size of memory and no extra copy (the collective reads it in
# place of the slot), and keeps the compiled code identical on every rank.
#
# Registered with torch.library.define/impl rather than custom_op: the op has
# no autograd, and skipping custom_op's Python wrapper layers cuts its call
# overhead, which a compiled step pays once per bucket.
_lib = torch.library.Library(NAMESPACE, "DEF")
_lib.define(
    "all_gather_copy_in(Tensor[] inputs, int[] offsets, int[] numels, str dtypes, str src_dtypes, "
    "int chunk_bytes) -> Tensor"
)
_lib.impl("all_gather_copy_in", _copy_in_impl, "CompositeExplicitAutograd")


@torch.library.register_fake(f"{NAMESPACE}::all_gather_copy_in")
def _(inputs, offsets, numels, dtypes, src_dtypes, chunk_bytes):
    return inputs[0].new_empty(chunk_bytes, dtype=torch.uint8)


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
