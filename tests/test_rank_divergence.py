"""Opt-in cross-rank plan check: a clear error instead of a deadlock."""

import pytest

from conformance.pool import raise_on_failure


def test_same_plans_run(rank_pools):
    values = raise_on_failure(
        rank_pools.get(2).run("tests.smoke_ranks:diverging_plans", timeout_s=60, diverge=False), "same plans"
    )
    assert values == [3, 3]


def test_different_plans_raise_naming_the_bucket(rank_pools):
    results = rank_pools.get(2).run("tests.smoke_ranks:diverging_plans", timeout_s=60, diverge=True)
    for r in results:
        assert not r.ok
        assert "ranks built different collective plans" in r.error and "bucket 0" in r.error, r.error[-2000:]


@pytest.mark.parametrize("value", ["yes", 1])
def test_option_type_is_checked(value):
    import bucketing.core as bc

    with pytest.raises(ValueError, match="verify_plan_across_ranks"):
        bc.BucketingPass(verify_plan_across_ranks=value)
