"""The model family's SimpleFSDP-style sharding keeps tied parameters tied."""

from conformance.pool import raise_on_failure


def test_a_tied_parameter_stays_one_sharded_parameter(rank_pools):
    # Sharding each module's reference separately would give the output
    # projection a parameter of its own (29 parameters, untied).
    results = raise_on_failure(rank_pools.get(2).run("tests.smoke_ranks:tied_sharding", timeout_s=300), "tied")
    for r in results:
        assert r == {"tied": True, "parameters": (28, 28), "gradient": True}
