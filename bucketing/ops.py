"""Custom ops emitted by the rewrite, registered on `import bucketing`.

Namespace `bucketing_ops`: torch's own pass owns `bucketing::`, and both must
load into one process. Dtypes travel as their names (`"bfloat16"`), which do
not move between torch releases.

Only the copy-in is an op of ours. The collective stays a plain
`_c10d_functional` op and the copy-out stays aten views, so Inductor's comm
analysis sees the collective and can fuse the copy-out into its consumers.
"""

from __future__ import annotations

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


# The copy-in fills a chunk-sized staging buffer that the all-gather then reads.
# Writing straight into this rank's slot of the gathered buffer would need the
# rank in the graph (one compiled artifact per rank) or an op returning a view
# of its own output, which torch.library forbids. The staging buffer costs one
# bucket / world_size of memory and no extra copy (the collective reads it in
# place of the slot), and keeps the compiled code identical on every rank.
@torch.library.custom_op(f"{NAMESPACE}::all_gather_copy_in", mutates_args=())
def all_gather_copy_in(
    inputs: list[torch.Tensor], offsets: list[int], dtypes: str, chunk_bytes: int
) -> torch.Tensor:
    """Pack `inputs` (cast to the comma-separated `dtypes`) at byte `offsets` of a uint8 chunk."""
    chunk = torch.empty(chunk_bytes, dtype=torch.uint8, device=inputs[0].device)
    dsts, srcs = [], []
    for src, offset, name in zip(inputs, offsets, dtypes.split(",")):
        numel = src.numel()
        if numel == 0:
            continue
        dtype = dtype_from_name(name)
        dsts.append(chunk[offset : offset + numel * dtype.itemsize].view(dtype))
        srcs.append(src.reshape(-1))
    if dsts:
        torch._foreach_copy_(dsts, srcs)
    return chunk


@all_gather_copy_in.register_fake
def _(inputs, offsets, dtypes, chunk_bytes):
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
