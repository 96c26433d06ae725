"""The policy's estimate-driven paths (bucketing/costs.py) on real process groups,
where the CPU has no estimates of its own (tests/estimates_adapter.py stands in):
blocks grouped into one bucket, members left alone for their copies, buckets and
lone collectives issued far ahead with their casts. Three training steps
compiled bit-identically to the unbucketed compile on every rank."""

from __future__ import annotations

import pytest

from conformance.pool import raise_on_failure

ADAPTER_SPEC = "tests.estimates_adapter:ADAPTER"


@pytest.mark.inductor
def test_estimate_driven_plans_train_bit_identically(rank_pools):
    model_id = "transformer-bf16-f32"
    results = raise_on_failure(
        rank_pools.get(2).run("conformance.models.training:run_model_case", timeout_s=900, model_id=model_id,
                              adapter_spec=ADAPTER_SPEC, variants={"default": {}}, steps=3),
        model_id,
    )
    for rank, per_variant in enumerate(results):
        r = per_variant["default"]
        assert r["diff"] is None, f"rank {rank}: {r['diff']}\n" + "\n".join(r["plans"])
    first = results[0]["default"]
    plans = "\n".join(first["plans"])
    # The paths under test acted (a pass that failed would leave the graph as it was, bit-identical).
    assert sum(sum(c.values()) for c in first["after"]) < sum(sum(c.values()) for c in first["before"]), plans
    assert "module=layers.0+layers.1" in plans, plans  # both blocks in one forward bucket
    assert "copy-in and copy-out cost" in plans, plans  # the large weights left alone
