"""Every catalog case on every world size it lists, at FX level, bit for bit."""

from __future__ import annotations

import pytest

from conformance import catalog, verdict
from conformance.plugin import expect_result
from conformance.pool import raise_on_failure

CASE_TIMEOUT_S = 120


def _param(case_id: str):
    # Later releases run worlds 2 and 4 (`nox -s tests`); 3 ranks (odd padding and
    # offsets) exercise the pass's own arithmetic, the same on every release.
    return pytest.param(case_id, marks=pytest.mark.first_release) if case_id.endswith("-w3") else case_id


@pytest.mark.parametrize("case_id", [_param(c) for c in catalog.all_case_ids()])
def test_fx_case(case_id, bucketing_adapter, rank_pools, request):
    expect_result(bucketing_adapter, case_id, request)
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


# `python conformance/multiproc/test_fx_catalog.py [-k NAME]`: the same cases as
# unittest classes, one per world size (BUCKETING_PASS picks the pass, default
# this project's). Spawned ranks import this file as __mp_main__, so the
# classes exist there too; pytest imports it under its own name and skips them.
if __name__ in ("__main__", "__mp_main__"):
    import os

    from torch.testing._internal.common_distributed import MultiProcContinuousTest
    from torch.testing._internal.common_utils import instantiate_parametrized_tests, run_tests

    from conformance import FxConformance

    for _world in (2, 3, 4):
        _name = f"TestFxCatalogW{_world}"
        globals()[_name] = instantiate_parametrized_tests(type(_name, (FxConformance, MultiProcContinuousTest), {
            "adapter": os.environ.get("BUCKETING_PASS", "project"), "world_size": _world, "__module__": __name__,
        }))
    if __name__ == "__main__":
        run_tests()
