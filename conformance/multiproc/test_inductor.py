"""A representative subset compiled through Inductor on real gloo ranks.

Bucketed compiled results must equal both the eager program and the
unbucketed compiled program, byte for byte, and the generated code must hold
the expected number of collectives.
"""

from __future__ import annotations

import pytest

from conformance import catalog, verdict
from conformance.plugin import expect_result
from conformance.pool import raise_on_failure

# Every dtype gloo can move, in a bucket beside bf16, compiled and run: the
# copy-in and copy-out must lower on every supported release (torch 2.11's
# Inductor cannot lower a view to bool, for one). fp8 and int16 are covered at
# FX level and in codegen checks (gloo has no collective to compare with).
DTYPE_CASES = [f"ag-pair-bf16-{d}-w2" for d in ("f16", "f32", "f64", "i8", "i32", "i64", "u8", "bool")]
DTYPE_CASES += ["ag-views-bool-w2", "ag-packed-bool-w2"]  # the same for the other copy-outs

INDUCTOR_CASES = DTYPE_CASES + [
    "ag-bf16-f32-odd-w3",
    "ag-cast-fused-w2",
    "ag-users-between-w2",
    "ag-dependent-partial-w2",
    "rs-sum-f32-w3",
    "ar-max-bf16-w2",
    "mixed-kinds-w2",
    "fsdp-like-step-w2",
]


@pytest.mark.inductor
@pytest.mark.parametrize("case_id", INDUCTOR_CASES)
def test_inductor_case(case_id, bucketing_adapter, rank_pools, request):
    expect_result(bucketing_adapter, case_id, request, level="inductor")
    case, world = catalog.get(case_id)
    results = raise_on_failure(
        rank_pools.get(world).run(
            "conformance.harness:run_inductor_case", timeout_s=600, case_id=case_id,
            adapter_spec=bucketing_adapter.spec,
        ),
        case_id,
    )
    failure = verdict.inductor(case_id, results, bucketing_adapter)
    if failure:
        pytest.fail(failure)


# `python conformance/multiproc/test_inductor.py [-k NAME]`: the subset above as
# unittest classes (see test_fx_catalog.py for how; BUCKETING_PASS picks the pass).
if __name__ in ("__main__", "__mp_main__"):
    import os

    from torch.testing._internal.common_distributed import MultiProcContinuousTest
    from torch.testing._internal.common_utils import instantiate_parametrized_tests, run_tests

    from conformance import InductorConformance

    for _world in sorted({catalog.get(c)[1] for c in INDUCTOR_CASES}):
        _name = f"TestInductorW{_world}"
        globals()[_name] = instantiate_parametrized_tests(type(_name, (InductorConformance, MultiProcContinuousTest), {
            "adapter": os.environ.get("BUCKETING_PASS", "project"), "world_size": _world, "__module__": __name__,
            "cases": tuple(c for c in INDUCTOR_CASES if c.endswith(f"-w{_world}")),
        }))
    if __name__ == "__main__":
        run_tests()
