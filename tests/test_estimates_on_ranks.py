"""The policy's estimate-driven paths (bucketing/costs.py) on real process groups,
where the CPU has no estimates of its own (tests/estimates_adapter.py stands in).
Communication-bound: blocks grouped into one bucket, collectives outside the
blocks joining them (copied out ahead where needed before them), buckets and lone collectives issued far ahead with their
casts. Compute-bound: a bucket per block, members left alone for their copies.
Three training steps compiled bit-identically to the unbucketed compile on every rank."""

from __future__ import annotations

import pytest

from conformance.pool import raise_on_failure


@pytest.mark.inductor
@pytest.mark.parametrize("bound", ["communication", "compute"])
def test_estimate_driven_plans_train_bit_identically(rank_pools, bound):
    model_id = "transformer-bf16-f32"
    spec = f"tests.estimates_adapter:{bound.upper()}_BOUND"
    results = raise_on_failure(
        rank_pools.get(2).run("conformance.models.training:run_model_case", timeout_s=900, model_id=model_id,
                              adapter_spec=spec, variants={"default": {}}, steps=3),
        model_id,
    )
    for rank, per_variant in enumerate(results):
        r = per_variant["default"]
        assert r["diff"] is None, f"rank {rank}: {r['diff']}\n" + "\n".join(r["plans"])
    first = results[0]["default"]
    plans = "\n".join(first["plans"])
    # The paths under test acted (a pass that failed would leave the graph as it was, bit-identical).
    assert sum(sum(c.values()) for c in first["after"]) < sum(sum(c.values()) for c in first["before"]), plans
    reductions = [line for line in plans.splitlines() if line.strip().startswith("reduce_scatter[")]
    if bound == "communication":
        assert "module=layers.0+layers.1" in plans, plans  # both blocks in one forward bucket
        assert "copy-in and copy-out cost" not in plans, plans  # every copy costs less than merging saves
        # The token and position embeddings' gathers, needed before the first block, joined
        # the blocks' bucket and are copied out ahead of them (the bytes compared above
        # then check both copy-outs).
        assert any("module=layers.0+layers.1" in line and " apart=2 " in line for line in plans.splitlines()), plans
        # Every gradient joined the blocks' buckets: the output projection's (bf16,
        # ready before any block's) the blocks' 16 bf16 ones, and the embeddings' (ready
        # after every block's, with less compute in between than a latency) the f32 ones.
        assert any("module=layers.1+layers.0 members=17 dtypes=bfloat16" in line for line in reductions), plans
        assert len(reductions) == 2 and all("module=layers.1+layers.0" in line for line in reductions), plans
    else:
        assert "module=layers.0 " in plans and "module=layers.0+" not in plans, plans  # a bucket per block
        assert "copy-in and copy-out cost" in plans, plans  # the large weights left alone
        assert any("module=" not in line for line in reductions), plans  # the rest outside the blocks
