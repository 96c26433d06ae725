"""Core smoke test on real gloo ranks: bucketed == unbucketed, bit for bit."""

import pytest

from conformance.pool import raise_on_failure


@pytest.mark.parametrize("world_size", [2, 3])
def test_mixed_dtype_gather_scatter_reduce(world_size, rank_pools):
    results = raise_on_failure(rank_pools.get(world_size).run("tests.smoke_ranks:run_smoke", timeout_s=120), "smoke")
    for rank, r in enumerate(results):
        assert r["diff"] is None, f"rank {rank}: {r['diff']}\n{r['plan']}"
        assert r["after"] == {"all_gather": 1, "reduce_scatter": 1, "all_reduce": 1}, r["plan"]
