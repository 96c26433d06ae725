"""Random programs on real gloo ranks (see conformance/fuzz.py).

The default run checks a small seeded sample; `nox -s fuzz` runs many more
(FUZZ_EXAMPLES, default 1000) with fresh randomness.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from conformance.fuzz import options_strategy, steps_strategy
from conformance.plugin import expect_result
from conformance.pool import raise_on_failure

FUZZ = os.environ.get("FUZZ_EXAMPLES")
EXAMPLES = int(FUZZ) if FUZZ else 20
WORLD = int(os.environ.get("FUZZ_WORLD", "3"))


def _check_example(pool, steps, options, adapter_spec):
    results = raise_on_failure(
        pool.run("conformance.harness:check_steps", timeout_s=120, steps=steps, options=options,
                 seed_text=repr(steps)[:200], adapter_spec=adapter_spec),
        f"random program {steps!r} with {options}",
    )
    for rank, r in enumerate(results):
        assert r["diff"] is None, f"rank {rank}: {r['diff']}\nsteps={steps!r}\noptions={options}\n{r['plan']}"
    assert all(r["same_graph_on_all_ranks"] for r in results), f"ranks built different graphs\n{results[0]['plan']}"
    for kind, n in results[0]["after"].items():
        assert n <= results[0]["before"][kind], "bucketing added collectives"


@pytest.mark.parametrize("world_size", [WORLD])
def test_random_programs(world_size, rank_pools, bucketing_adapter, request):
    expect_result(bucketing_adapter, "fuzz", request)
    pool = rank_pools.get(world_size)
    adapter_spec = bucketing_adapter.spec

    # Shrinking restarts the rank pool per attempt; FUZZ_SHRINK=1 turns it on.
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if os.environ.get("FUZZ_SHRINK") == "1" else [])

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=FUZZ is None, database=None,
              suppress_health_check=list(HealthCheck), phases=phases)
    @given(steps=steps_strategy(max_steps=64 if FUZZ else 24), options=options_strategy())
    def run(steps, options):
        _check_example(pool, steps, options, adapter_spec)

    run()


if __name__ == "__main__":  # `python this_file.py [pytest args]`: these tests need pytest's fixtures
    import sys

    sys.exit(pytest.main([__file__, *sys.argv[1:]]))
