"""Every catalog case on every world size it lists, at FX level, bit for bit."""

from __future__ import annotations

import pytest

from conformance import catalog, verdict
from conformance.pool import raise_on_failure

CASE_TIMEOUT_S = 120


@pytest.mark.parametrize("case_id", catalog.all_case_ids())
def test_fx_case(case_id, bucketing_adapter, rank_pools, request):
    reason = bucketing_adapter.xfail_reason(case_id)
    if reason:
        request.applymarker(pytest.mark.xfail(reason=reason, strict=False))
    _, world = catalog.get(case_id)
    pool = rank_pools.get(world)
    results = raise_on_failure(
        pool.run("conformance.harness:run_fx_case", timeout_s=CASE_TIMEOUT_S, case_id=case_id,
                 adapter_spec=bucketing_adapter.spec),
        case_id,
    )
    failure = verdict.fx(case_id, results, bucketing_adapter)
    if failure:
        pytest.fail(failure)
