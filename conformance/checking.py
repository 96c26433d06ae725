"""The checking core: one case on this rank, results exchanged, one verdict on every rank.

The torchrun runner and the unittest classes call `check_on_rank` on every
rank in lockstep; the pytest tests run the same rank tasks through the rank
pool and judge with the same `verdict` functions.
"""

from __future__ import annotations

import traceback

from . import catalog, harness, verdict
from .programs import GLOO_UNSUPPORTED

LEVELS = {
    "fx": (harness.run_fx_case, verdict.fx),
    "inductor": (harness.run_inductor_case, verdict.inductor),
}


def skip_reason(case_id: str, adapter, level: str = "fx", backend: str = "gloo") -> str | None:
    """Why `case_id` is not run for `adapter`, the same answer on every rank and in every front
    end (pytest, unittest, torchrun), or None."""
    case, world = catalog.get(case_id)
    if level == "inductor" and backend == "gloo" and any((s.cast_from or s.dtype) in GLOO_UNSUPPORTED
                                                         for s in case.steps):
        # The compiled check runs the program eagerly too; gloo cannot move these dtypes.
        return "gloo cannot run fp8/int16 collectives eagerly (checked at FX level, as bytes)"
    return adapter.unhonoured(case.options_for(world))


def check_on_rank(ctx, case_id: str, adapter, level: str = "fx", group=None) -> tuple[str, str]:
    """("passed" | "failed" | "error" | "broken", message), the same on every rank.

    A case that raises is an error naming the rank (the pass under test
    crashing is a finding, not a crash of the suite); "broken" when only some
    ranks raised, so the others may have left collectives unmatched and the
    process group cannot be trusted for another case. Raises only when the
    exchange itself fails: a rank died or the group timed out.
    """
    import torch.distributed as dist

    task, judge = LEVELS[level]
    try:
        value, error = task(ctx, case_id, adapter), None
    except Exception:
        value, error = None, traceback.format_exc()
    gathered = [None] * ctx.world_size
    dist.all_gather_object(gathered, (value, error), group=group)
    errors = [(rank, e) for rank, (_, e) in enumerate(gathered) if e is not None]
    if errors:
        rank, e = errors[0]
        status = "error" if len(errors) == ctx.world_size else "broken"
        return status, f"{case_id}: rank {rank} raised (ranks raising: {[r for r, _ in errors]}):\n{e}"
    failure = judge(case_id, [v for v, _ in gathered], adapter)
    return ("failed", failure) if failure else ("passed", "")
