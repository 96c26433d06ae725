"""The verdict on one case from every rank's result: None when it holds, else why not.

The pytest tests and the torchrun runner both judge with these, so a case
means the same thing whichever front end ran it.
"""

from __future__ import annotations

import re

from . import catalog
from .adapters import BUCKETING

# A collective's call in Inductor's generated code, per kind.
CALLS = {
    "all_gather": r"_c10d_functional\.all_gather_into_tensor(_out)?\.default\(",
    "reduce_scatter": r"_c10d_functional\.reduce_scatter_tensor\.default\(",
    "all_reduce": r"_c10d_functional\.all_reduce_?\.default\(",
}


def fx(case_id: str, results: list[dict], adapter) -> str | None:
    """FX level (harness.run_fx_case on every rank): bytes (a sum a merge may reorder:
    within the reordering bound), same graph, counts."""
    case, world = catalog.get(case_id)
    first = results[0]
    for rank, r in enumerate(results):
        if r["diff"] is not None:
            index, offset, what = r["diff"]
            return (f"{case_id}: rank {rank}: output {index} differs at byte offset {offset} ({what})\n"
                    f"plan:\n{r['plan']}")
        if r.get("beyond_bound") is not None:
            index, _, what = r["beyond_bound"]
            return (f"{case_id}: rank {rank}: output {index} is beyond the reordering bound "
                    f"2 (n - 1) u sum |x_i| ({what})\nplan:\n{r['plan']}")
    if not all(r["same_graph_on_all_ranks"] for r in results):
        return f"{case_id}: ranks built different graphs\n{first['plan']}"
    if not all(r["after"] == first["after"] for r in results):
        return f"{case_id}: ranks disagree on collective counts"
    if adapter.expectations != BUCKETING:
        return None
    expect = case.expect_for(world)
    expected = dict(first["before"]) if expect is None else {**first["before"], **expect}
    if first["after"] != expected:
        return (f"{case_id}: collectives after bucketing {first['after']}, expected {expected} "
                f"(before: {first['before']})\nplan:\n{first['plan']}")
    return None


def inductor(case_id: str, results: list[dict], adapter) -> str | None:
    """Compiled level (harness.run_inductor_case on every rank): bytes vs eager and
    vs the unbucketed compile, collective calls in the generated code."""
    case, world = catalog.get(case_id)
    for rank, r in enumerate(results):
        checks = ("vs_eager", "vs_compiled")
        if r["compiled_vs_eager"] is not None:
            # torch's own unbucketed compile is wrong here: Inductor returns a
            # gathered bool as int64 (torch 2.11 and 2.13). Eager is the oracle.
            detail = r["compiled_vs_eager"][2]
            if not ("torch.bool" in detail and "torch.int64" in detail):
                return f"{case_id}: rank {rank}: unbucketed compile differs from eager: {r['compiled_vs_eager']}"
            checks = ("vs_eager",)
        for what in checks:
            if r[what] is not None:
                index, offset, detail = r[what]
                return f"{case_id}: rank {rank}: {what}: output {index} differs at byte {offset} ({detail})\n{r['plan']}"
    if adapter.expectations == BUCKETING and case.expect_for(world) is not None:
        code = results[0]["code"]
        for kind, expected in case.expect_for(world).items():
            found = len(re.findall(CALLS[kind], code))
            if found != expected:
                return f"{case_id}: {found} {kind} calls in the generated code, expected {expected}"
    return None
