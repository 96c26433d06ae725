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
from conformance.plugin import inductor_case
from conformance.pool import raise_on_failure

# Every dtype gloo can move, in a bucket beside bf16, compiled and run: the
# copy-in and copy-out must lower on every supported release (torch 2.11's
# Inductor cannot lower a view to bool, for one). fp8 and int16 are covered at
# FX level and in codegen checks (gloo has no collective to compare with).
DTYPE_CASES = [f"ag-pair-bf16-{d}-w2" for d in ("f16", "f32", "f64", "i8", "i32", "i64", "u8", "bool")]
DTYPE_CASES += ["ag-views-bool-w2"]  # the same for the fused-view copy-out

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

CALLS = {
    "all_gather": r"_c10d_functional\.all_gather_into_tensor(_out)?\.default\(",
    "reduce_scatter": r"_c10d_functional\.reduce_scatter_tensor\.default\(",
    "all_reduce": r"_c10d_functional\.all_reduce_?\.default\(",
}


@pytest.mark.inductor
@pytest.mark.parametrize("case_id", INDUCTOR_CASES)
def test_inductor_case(case_id, bucketing_adapter, rank_pools, request):
    inductor_case(bucketing_adapter, case_id, request)
    case, world = catalog.get(case_id)
    results = raise_on_failure(
        rank_pools.get(world).run(
            "conformance.harness:run_inductor_case", timeout_s=600, case_id=case_id,
            adapter_spec=request.config.getoption("--bucketing-pass"),
        ),
        case_id,
    )
    for rank, r in enumerate(results):
        checks = ("vs_eager", "vs_compiled")
        if r["compiled_vs_eager"] is not None:
            # torch's own unbucketed compile is wrong here: Inductor returns a
            # gathered bool as int64 (torch 2.11 and 2.13). Eager is the oracle.
            assert "torch.bool" in r["compiled_vs_eager"][2] and "torch.int64" in r["compiled_vs_eager"][2], (
                f"{case_id}: rank {rank}: unbucketed compile differs from eager: {r['compiled_vs_eager']}")
            checks = ("vs_eager",)
        for what in checks:
            if r[what] is not None:
                index, offset, detail = r[what]
                pytest.fail(f"{case_id}: rank {rank}: {what}: output {index} differs at byte {offset} ({detail})\n{r['plan']}")
    if bucketing_adapter.expectations == BUCKETING and case.expect is not None:
        code = results[0]["code"]
        for kind, expected in case.expect.items():
            found = len(re.findall(CALLS[kind], code))
            assert found == expected, f"{case_id}: {found} {kind} calls in the generated code, expected {expected}"
