"""Every catalog case on every world size it lists, at FX level, bit for bit."""

from __future__ import annotations

import pytest

from conformance import catalog
from conformance.adapters import BUCKETING
from conformance.pool import raise_on_failure

CASE_TIMEOUT_S = 120


def _check(case_id, results, adapter):
    case, _ = catalog.get(case_id)
    first = results[0]
    for rank, r in enumerate(results):
        if r["diff"] is not None:
            index, offset, what = r["diff"]
            pytest.fail(
                f"{case_id}: rank {rank}: output {index} differs at byte offset {offset} ({what})\n"
                f"plan:\n{r['plan']}"
            )
    assert all(r["same_graph_on_all_ranks"] for r in results), f"{case_id}: ranks built different graphs\n{first['plan']}"
    assert all(r["after"] == first["after"] for r in results), f"{case_id}: ranks disagree on collective counts"
    if adapter.expectations != BUCKETING:
        return
    expected = dict(first["before"]) if case.expect is None else {**first["before"], **case.expect}
    assert first["after"] == expected, (
        f"{case_id}: collectives after bucketing {first['after']}, expected {expected} "
        f"(before: {first['before']})\nplan:\n{first['plan']}"
    )


@pytest.mark.parametrize("case_id", catalog.all_case_ids())
def test_fx_case(case_id, bucketing_adapter, rank_pools, request):
    reason = bucketing_adapter.xfail_reason(case_id)
    if reason:
        request.applymarker(pytest.mark.xfail(reason=reason, strict=False))
    _, world = catalog.get(case_id)
    pool = rank_pools.get(world)
    results = raise_on_failure(
        pool.run("conformance.harness:run_fx_case", timeout_s=CASE_TIMEOUT_S, case_id=case_id,
                 adapter_spec=bucketing_adapter.name if bucketing_adapter.name in ("project", "torch", "identity")
                 else request.config.getoption("--bucketing-pass")),
        case_id,
    )
    _check(case_id, results, bucketing_adapter)
