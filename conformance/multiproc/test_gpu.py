"""The catalog on CUDA tensors (NCCL where each rank owns a GPU, else world size 1
on NCCL and gloo-with-CUDA), and Triton codegen checks in one process.

Run with `--conformance-device cuda` (see `nox -s gpu_tests`); on a machine
without an SM80+ GPU every test here skips, naming why.
"""

from __future__ import annotations

import pytest
import torch

from conformance import catalog, verdict
from conformance.gpu import backend_for, suitable_gpu
from conformance.plugin import expect_result
from conformance.pool import raise_on_failure

GPU_CASES = [
    "ag-pair-bf16-f32", "ag-3way", "ag-8way", "ag-12way", "ag-bf16-f32-odd", "ag-bf16-f32-large",
    "ag-cast-fused", "ag-users-between", "rs-sum-bf16", "rs-sum-f32", "ar-sum-bf16", "ar-max-f32",
    "mixed-kinds", "fsdp-like-step", "ag-members-64",
]


@pytest.fixture
def cuda_ready(conformance_device):
    ok, why = suitable_gpu()
    if conformance_device != "cuda":
        pytest.skip("run with --conformance-device cuda")
    if not ok:
        pytest.skip(f"no suitable GPU: {why}")


def _run_on_device(level: str, name: str, world_size: int, rank_pools, adapter, request) -> None:
    """One case on CUDA ranks at `level` ("fx" or "inductor"), judged like the CPU suite.

    At world size 1 only the bytes are judged: structure expectations are written
    for 2+ ranks."""
    case_id = f"{name}-w{world_size}"
    backend = backend_for(world_size)
    expect_result(adapter, case_id, request, level, backend)
    task = "run_fx_case" if level == "fx" else "run_inductor_case"
    results = raise_on_failure(
        rank_pools.get(world_size, backend).run(
            f"conformance.harness:{task}", timeout_s=600, case_id=case_id, adapter_spec=adapter.spec,
        ),
        f"{case_id} ({backend}, {level})",
    )
    if world_size == 1:
        keys = ("diff",) if level == "fx" else ("vs_eager", "vs_compiled")
        for rank, r in enumerate(results):
            diffs = [r[k] for k in keys if r[k] is not None]
            assert not diffs, f"{case_id}: rank {rank}: {diffs}\n{r['plan']}"
    else:
        failure = (verdict.fx if level == "fx" else verdict.inductor)(case_id, results, adapter)
        assert failure is None, failure


@pytest.mark.gpu
@pytest.mark.parametrize("world_size", [1, 2])
@pytest.mark.parametrize("name", GPU_CASES)
def test_cuda_case(name, world_size, cuda_ready, rank_pools, bucketing_adapter, request):
    _run_on_device("fx", name, world_size, rank_pools, bucketing_adapter, request)


# Compiled on the device: the copy-out is Triton kernels there (bucketing/lowering.py),
# checked byte for byte against eager and the unbucketed compile.
COMPILED_GPU_CASES = ["ag-pair-bf16-f32", "ag-8way", "ag-bf16-f32-odd", "ag-users-between", "mixed-kinds",
                      "fsdp-like-step", "ag-members-64"]


@pytest.mark.gpu
@pytest.mark.inductor
@pytest.mark.parametrize("world_size", [1, 2])
@pytest.mark.parametrize("name", COMPILED_GPU_CASES)
def test_cuda_compiled_case(name, world_size, cuda_ready, rank_pools, bucketing_adapter, request):
    _run_on_device("inductor", name, world_size, rank_pools, bucketing_adapter, request)


@pytest.mark.gpu
@pytest.mark.inductor
@pytest.mark.parametrize("name", ["ag-pair-bf16-f32", "ag-cast-fused", "ag-8way"])
def test_triton_codegen(name, cuda_ready, bucketing_adapter, request):
    """One copy-in, one collective, no conversion kernel for view-only members."""
    expect_result(bucketing_adapter, f"{name}-w4", request)
    import re

    from conformance.compiled import compile_and_run, fake_group
    from conformance.programs import build, make_inputs

    case = catalog.BY_NAME[name]
    groups = fake_group(4)
    program = build(case.steps, groups)
    inputs = make_inputs(case.steps, groups, case.name, 0, "cuda")
    _, code = compile_and_run(program, inputs, bucketing_adapter.inductor_pass(**case.options_for(4)), get_code=True)
    assert "triton" in code
    assert len(re.findall(r"all_gather_into_tensor(_out)?\.default\(", code)) == 1
    assert len(re.findall(r"wait_tensor\.default\(", code)) == 1
    assert "_to_copy" not in code
    if bucketing_adapter.name == "project":
        assert len(re.findall(r"bucketing_ops\.all_gather_copy_in\.default\(", code)) == 1


@pytest.mark.gpu
@pytest.mark.inductor
@pytest.mark.parametrize("name", ["ag-pair-bf16-f32", "ag-members-64", "ag-users-between", "policy-layers-merge-all",
                                  "fsdp-like-step", "mixed-kinds"])
def test_the_fake_target_generates_what_the_real_gpu_gets(name, cuda_ready, bucketing_adapter):
    """The codegen target (conformance/fake_cuda.py) against the real device, one preset: any
    difference beyond comments fails, listed (this keeps the CPU-only GPU checks honest)."""
    from conformance import codegen, fake_cuda

    arch = fake_cuda.preset_of_current_device()
    if arch is None:
        pytest.skip(f"{torch.cuda.get_device_name(0)} matches no preset in {sorted(fake_cuda.PRESETS)}")
    real = codegen.case_code(f"{name}-w4", bucketing_adapter, "cuda", None)
    target = codegen.case_code(f"{name}-w4", bucketing_adapter, "cuda", arch)
    diff = codegen.differences(real, target)
    assert not diff, f"{name} on {arch}: the target differs from {torch.cuda.get_device_name(0)}:\n" + "\n".join(diff[:80])


def test_gpu_cases_exist_in_catalog():
    missing = [name for name in GPU_CASES + COMPILED_GPU_CASES if name not in catalog.BY_NAME]
    assert not missing, missing


if __name__ == "__main__":  # `python this_file.py [pytest args]`: these tests need pytest's fixtures
    import sys

    sys.exit(pytest.main([__file__, *sys.argv[1:]]))
