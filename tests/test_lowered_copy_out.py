"""The copy-out lowered into Inductor kernels, run on gloo ranks (the CPU keeps the op by default)."""

from __future__ import annotations

import pytest

from conformance import adapters, catalog, verdict
from conformance.codegen import case_code, copy_out_kernels
from conformance.pool import raise_on_failure

ADAPTER_SPEC = "tests.lowered_adapter:ADAPTER"

# Multi-dtype, bytes-copied bool, consumers between collectives, reductions.
CASES = ["ag-pair-bf16-f32-w2", "ag-pair-bf16-bool-w2", "ag-users-between-w2", "mixed-kinds-w2"]


@pytest.mark.inductor
@pytest.mark.parametrize("case_id", CASES)
def test_lowered_copy_out_matches_eager_and_unbucketed_bytes(case_id, rank_pools):
    _, world = catalog.get(case_id)
    results = raise_on_failure(
        rank_pools.get(world).run("conformance.harness:run_inductor_case", timeout_s=600, case_id=case_id,
                                  adapter_spec=ADAPTER_SPEC),
        case_id,
    )
    failure = verdict.inductor(case_id, results, adapters.load(ADAPTER_SPEC))
    assert not failure, failure


@pytest.mark.inductor
def test_the_cpu_keeps_the_op_unless_asked():
    default = case_code("ag-members-2-w4", "project", "cpu")
    lowered = case_code("ag-members-2-w4", ADAPTER_SPEC, "cpu")
    assert "torch.ops.bucketing_ops.copy_out_into.default(" in default and not copy_out_kernels(default)
    assert "torch.ops.bucketing_ops.copy_out.default(" not in lowered and len(copy_out_kernels(lowered)) == 2
