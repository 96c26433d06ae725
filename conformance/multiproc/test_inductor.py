"""A representative subset compiled through Inductor on real gloo ranks.

Bucketed compiled results must equal both the eager program and the
unbucketed compiled program, byte for byte, and the generated code must hold
the expected number of collectives.
"""

from __future__ import annotations

import re

import pytest

from conformance import catalog
from conformance.adapters import BUCKETING
from conformance.pool import raise_on_failure

INDUCTOR_CASES = [
    "ag-pair-bf16-f32-w2",
    "ag-bf16-f32-odd-w3",
    "ag-cast-fused-w2",
    "ag-users-between-w2",
    "ag-dependent-partial-w2",
    "rs-sum-f32-w3",
    "ar-max-bf16-w2",
    "mixed-kinds-w2",
    "fsdp-like-step-w2",
]

CALLS = {
    "all_gather": r"_c10d_functional\.all_gather_into_tensor(_out)?\.default\(",
    "reduce_scatter": r"_c10d_functional\.reduce_scatter_tensor\.default\(",
    "all_reduce": r"_c10d_functional\.all_reduce_?\.default\(",
}


@pytest.mark.inductor
@pytest.mark.parametrize("case_id", INDUCTOR_CASES)
def test_inductor_case(case_id, bucketing_adapter, rank_pools, request):
    if bucketing_adapter.inductor_pass is None:
        pytest.skip(f"adapter {bucketing_adapter.name} has no Inductor form")
    reason = bucketing_adapter.xfail_reason(case_id)
    if reason:
        request.applymarker(pytest.mark.xfail(reason=reason, strict=False))
    case, world = catalog.get(case_id)
    results = raise_on_failure(
        rank_pools.get(world).run(
            "conformance.harness:run_inductor_case", timeout_s=600, case_id=case_id,
            adapter_spec=request.config.getoption("--bucketing-pass"),
        ),
        case_id,
    )
    for rank, r in enumerate(results):
        for what in ("vs_eager", "vs_compiled"):
            if r[what] is not None:
                index, offset, detail = r[what]
                pytest.fail(f"{case_id}: rank {rank}: {what}: output {index} differs at byte {offset} ({detail})\n{r['plan']}")
    if bucketing_adapter.expectations == BUCKETING and case.expect is not None:
        code = results[0]["code"]
        for kind, expected in case.expect.items():
            found = len(re.findall(CALLS[kind], code))
            assert found == expected, f"{case_id}: {found} {kind} calls in the generated code, expected {expected}"
