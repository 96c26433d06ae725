"""The model family's SimpleFSDP-style sharding: tied parameters stay tied; parametrize shards as properties do."""

from conformance.pool import raise_on_failure


def test_a_tied_parameter_stays_one_sharded_parameter(rank_pools):
    # Sharding each module's reference separately would give the output
    # projection a parameter of its own (29 parameters, untied).
    results = raise_on_failure(rank_pools.get(2).run("tests.smoke_ranks:tied_sharding", timeout_s=300), "tied")
    for r in results:
        assert r == {"tied": True, "parameters": (28, 28), "gradient": True}


def test_sharding_through_parametrize_trains_as_through_properties(rank_pools):
    # Each parameter the `original` of a parametrization that gathers it: the
    # same parameters in the same order, the same loss and gradient shards.
    results = raise_on_failure(rank_pools.get(2).run("tests.smoke_ranks:parametrize_sharding", timeout_s=300),
                               "parametrize")
    for r in results:
        assert r == {"parameters": (29, 29), "diff": None, "grad_type": "Tensor"}
