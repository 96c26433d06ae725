"""Forward + backward of an FSDP-style module compiled with autograd, on gloo ranks:
all-gathers in the forward graph, reduce-scatters of gradients in the backward."""

from __future__ import annotations

import pytest

from conformance.adapters import BUCKETING
from conformance.plugin import expect_result
from conformance.pool import raise_on_failure


@pytest.mark.inductor
@pytest.mark.parametrize("world_size", [2, 3])
def test_fsdp_forward_backward(world_size, bucketing_adapter, rank_pools, request):
    expect_result(bucketing_adapter, f"fsdp-autograd-w{world_size}", request, level="inductor")
    results = raise_on_failure(
        rank_pools.get(world_size).run("conformance.models.training:run_fsdp_autograd", timeout_s=600,
                                       adapter_spec=bucketing_adapter.spec),
        "fsdp autograd",
    )
    for rank, r in enumerate(results):
        # 2 ranks: sums of two values are exact in any order. 3 ranks: a merged
        # reduce-scatter may sum float gradients in another order.
        if world_size == 2:
            assert r["diff"] is None, f"rank {rank}: loss/gradient {r['diff']}"
    before, after = results[0]["before"], results[0]["after"]
    assert len(before) == len(after) == 2  # forward and backward graphs
    assert before[0]["all_gather"] == 6 and before[1]["reduce_scatter"] == 6
    if bucketing_adapter.expectations == BUCKETING:
        assert after[0]["all_gather"] == 1, after
        assert after[1]["reduce_scatter"] == 2, after  # one bf16 bucket, one f32 bucket


@pytest.mark.inductor
def test_fsdp_layered_buckets_prefetch_and_stay_bit_identical(bucketing_adapter, rank_pools, request):
    """Buckets that follow layers (no compute allowed inside one bucket), each
    issued one bucket ahead: the reordered forward and backward still match."""
    expect_result(bucketing_adapter, "fsdp-autograd-layered-w2", request, level="inductor")
    layers = 3
    results = raise_on_failure(
        rank_pools.get(2).run("conformance.models.training:run_fsdp_autograd", timeout_s=600,
                              adapter_spec=bucketing_adapter.spec,
                              layers=layers, options={"locality_flops": 0}),
        "fsdp autograd, layered",
    )
    for rank, r in enumerate(results):
        assert r["diff"] is None, f"rank {rank}: loss/gradient {r['diff']}"  # 2 ranks: sums exact
    before, after = results[0]["before"], results[0]["after"]
    assert before[0]["all_gather"] == 3 * layers and before[1]["reduce_scatter"] == 3 * layers
    if bucketing_adapter.expectations == BUCKETING:
        # Each layer's norm and weight are used before its matmul, its bias after:
        # {n0, w0}, {b0, n1, w1}, {b1, n2, w2}, {b2}.
        assert after[0]["all_gather"] == layers + 1, after
        assert layers <= after[1]["reduce_scatter"] < 3 * layers, after


if __name__ == "__main__":  # `python this_file.py [pytest args]`: these tests need pytest's fixtures
    import sys

    sys.exit(pytest.main([__file__, *sys.argv[1:]]))
