"""Dynamic shapes: symbolic-sized collectives stay as they were (with a reason),
static ones in the same graph are still bucketed, results stay bit-identical."""

import pytest

from conformance.pool import raise_on_failure


@pytest.mark.inductor
def test_mark_dynamic_program_two_sizes(rank_pools):
    results = raise_on_failure(rank_pools.get(2).run("tests.smoke_ranks:dynamic_sizes", timeout_s=300), "dynamic")
    for r in results:
        assert r["identical"] == {5: True, 9: True}
        assert r["buckets"] == [2]  # the two static all-gathers
        assert any("dynamic" in reason for reason in r["skipped"])
