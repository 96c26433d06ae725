"""What a bucket costs in launches, and that the program's own kernels stay as they were.

Counted in the code Inductor generates for `cpu` and the GPU presets (codegen.TARGETS,
as in test_codegen.py): per bucket one collective and one wait, the copy-in and the
copy-out, no host-to-device copy, and a count that does not grow with the
bucket's member count. The program's own kernels (what consumes the gathered
members) must be the unbucketed compile's kernels, operation for operation:
the copy-out's loops (those reading the collective's result) are set aside,
and on the CPU each loop nest is compared, since the CPU backend may put the
copy-out's loops and a consumer's in one function.
"""

from __future__ import annotations

import pytest

from conformance import adapters
from conformance.adapters import BUCKETING
from conformance.codegen import TARGETS, census, compute_calls, copy_out_kernels, kernels, target_code, target_param
from conformance.plugin import expect_result

MEMBER_COUNTS = (2, 8, 64)  # ag-members-N: N all-gathers alternating f32 and bf16, odd sizes


def _checked(adapter, check_id: str, request):
    if adapter.inductor_pass is None or adapter.expectations != BUCKETING:
        pytest.skip(f"{adapter.name} is not checked for code structure")
    expect_result(adapter, f"codegen:{check_id}", request)


@pytest.mark.inductor
@pytest.mark.parametrize("target", [target_param(t, target=t, id=t) for t in TARGETS])
def test_launches_per_bucket_do_not_grow_with_members(target, bucketing_adapter, request):
    _checked(bucketing_adapter, "launches-per-bucket", request)
    codes = {n: target_code(f"ag-members-{n}", bucketing_adapter, target) for n in MEMBER_COUNTS}
    per_n = {n: census(code) for n, code in codes.items()}
    if target == "cpu":
        for c in per_n.values():
            del c["host_to_device"]  # every CPU buffer is made on the host
    table = "\n".join(f"  N={n}: {c}" for n, c in per_n.items())
    for n, c in per_n.items():
        assert (c["collective"], c["wait"]) == (1, 1), f"N={n}: one bucket, one collective, one wait\n{table}"
        if target != "cpu":
            assert c["host_to_device"] == 0, f"N={n}: a host allocation inside the step\n{table}"
    assert all(c == per_n[MEMBER_COUNTS[0]] for c in per_n.values()), f"launches grow with members\n{table}"
    if bucketing_adapter.name == "project":
        # One copy-in op (one batched copy per dtype run on the device); the
        # copy-out: on a GPU one Triton kernel for the whole bucket (a foreach
        # group), on the CPU our op (lower_copy_out="gpu"); no other kernel.
        for n, code in codes.items():
            copies, c = copy_out_kernels(code), per_n[n]
            if target == "cpu":
                assert (c["extern_copy"], c["cpp"], len(copies)) == (2, 0, 0), f"N={n}: two ops, no kernel\n{table}"
            else:
                assert (c["extern_copy"], c["triton"], len(copies)) == (1, 1, 1), f"N={n}: one op, one kernel\n{table}"


# Cases whose consumers are the program's own compute: pointwise users of each
# member, and matmuls between pointwise ops (six FSDP-style layers).
COMPUTE_CASES = {
    "policy-layers-merge-all": TARGETS,
    "policy-layers-one-per-layer": TARGETS,
    "ag-users-between": TARGETS,
}


@pytest.mark.inductor
@pytest.mark.parametrize("case,target", [target_param(c, t, target=t, id=f"{c}-{t}")
                                         for c, targets in sorted(COMPUTE_CASES.items()) for t in targets])
def test_program_compute_is_the_unbucketed_compute(case, target, bucketing_adapter, request):
    _checked(bucketing_adapter, f"compute:{case}", request)
    bucketed = target_code(case, bucketing_adapter, target)
    unbucketed = target_code(case, adapters.load("identity"), target)
    assert compute_calls(bucketed) == compute_calls(unbucketed)
    # The bucket's copy-out kernels are the bucket's; everything else is the program's.
    ours, theirs = kernels(bucketed, leaving_out_copies=True), kernels(unbucketed)
    assert ours == theirs, (
        f"{case} on {target}: the program's kernels changed ({len(ours)} bucketed, {len(theirs)} unbucketed)\n"
        + "\n\n".join(k for k in ours if k not in theirs)[:3000]
    )
