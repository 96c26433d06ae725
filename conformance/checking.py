"""The checking core: what a check is expected to do, and one case on this rank with
results exchanged and one verdict on every rank.

Every front end (the pytest plugin, the unittest classes, the torchrun runner)
asks `expected_outcome` whether a check runs and whether it is expected to
fail. The torchrun runner and the unittest classes call `check_on_rank` on
every rank in lockstep; the pytest tests run the same rank tasks through the
rank pool and judge with the same `verdict` functions.
"""

from __future__ import annotations

import dataclasses
import traceback

from . import catalog, harness, verdict
from .programs import GLOO_UNSUPPORTED

LEVELS = {
    "fx": (harness.run_fx_case, verdict.fx),
    "inductor": (harness.run_inductor_case, verdict.inductor),
}


@dataclasses.dataclass(frozen=True)
class Expected:
    """What a check should do under an adapter: run and pass, not run (`skip`), or fail (`xfail`)."""

    check_id: str  # the id expected failures are keyed by
    skip: str | None = None  # why it does not run
    xfail: str | None = None  # why it is expected to fail; passing then fails: the entry is stale


def check_id(case_id: str, level: str = "fx") -> str:
    """The id a catalog case's expected failures are keyed by: the case id at FX level,
    `LEVEL:case id` at another (a pass may fail a case at FX level and compile it right)."""
    return case_id if level == "fx" else f"{level}:{case_id}"


def expected_outcome(adapter, check: str, level: str = "fx", backend: str = "gloo") -> Expected:
    """What `check` should do under `adapter`, the same answer on every rank and in every front end.

    `check` is a catalog case id (`NAME-wN`) checked at `level`, or the id of a check of
    its own (`model:ID-wN`, `fsdp-autograd-w2`, `codegen:NAME`, `fuzz`)."""
    if level != "fx" and adapter.inductor_pass is None:
        return Expected(check, skip=f"adapter {adapter.name} has no Inductor form")
    if check.rpartition("-w")[0] not in catalog.BY_NAME:
        return Expected(check, xfail=adapter.xfail_reason(check))
    key = check_id(check, level)
    skip = _skip_reason(check, adapter, level, backend)
    return Expected(key, skip, None if skip else adapter.xfail_reason(key))


def _skip_reason(case_id: str, adapter, level: str, backend: str) -> str | None:
    """Why catalog case `case_id` does not run for `adapter`, or None."""
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
