"""The GPU code target on a machine without a GPU: the command line, its seams, and what
our copy ops launch per bucket."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from benchmarks.kernels_per_bucket import kernels_inside_our_ops
from conformance import codegen, fake_cuda


@pytest.mark.inductor
def test_the_command_prints_cuda_code_with_one_all_gather_for_the_bucket():
    run = subprocess.run(
        [sys.executable, "-m", "conformance.codegen", "--device", "cuda", "--arch", "sm90",
         "--case", "ag-bf16-f32-odd-w2"],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    code = run.stdout
    assert len(re.findall(r"all_gather_into_tensor\.default\(", code)) == 1, code
    assert "@triton.jit" in code  # the copy-out kernel (the case has no other compute)
    assert codegen.copy_out_kernels(code) == {"triton_for_fused_0"}
    assert "with torch.cuda._DeviceGuard(0):" in code
    assert "device='cuda:0'" in code and "device='cpu'" not in code
    assert "empty_strided_cpu(" not in code[code.find("def call("):]


@pytest.mark.inductor
@pytest.mark.parametrize("members", [2, 8, 64])
def test_one_copy_in_op_and_one_copy_out_kernel_whatever_the_member_count(members):
    """bf16 beside f32: one cat per dtype in (inside our op), one Triton kernel out for every member."""
    code = codegen.case_code(f"ag-members-{members}-w4", "project", "cuda", "sm90")
    assert kernels_inside_our_ops(code) == 2
    assert codegen.census(code)["triton"] == 1
    assert codegen.copy_out_kernels(code) == {"triton_for_fused_0"}


@pytest.mark.inductor
def test_a_copy_out_the_lowering_cannot_build_stays_our_op(monkeypatch):
    from bucketing import lowering

    def refuse(*args, **kwargs):
        raise NotImplementedError("no such piece in this release")

    monkeypatch.setattr(lowering, "_copies", refuse)
    code = codegen.case_code("ag-members-2-w4", "project", "cuda", "sm90")
    assert "torch.ops.bucketing_ops.copy_out.default(" in code
    assert codegen.census(code)["triton"] == 0


def test_a_moved_seam_is_named_with_the_torch_version(monkeypatch):
    import torch
    import torch.utils._triton

    monkeypatch.delattr(torch.utils._triton, "triton_backend")
    with pytest.raises(fake_cuda.SeamMoved, match=rf"torch\.utils\._triton\.triton_backend.*{re.escape(torch.__version__)}"):
        with fake_cuda.target("sm90"):
            pass


def test_an_unknown_preset_is_refused_naming_the_parameter():
    with pytest.raises(ValueError, match="arch: 'sm70'"):
        fake_cuda.preset("sm70")
    with pytest.raises(ValueError, match="device: 'tpu'"):
        codegen.generate(lambda x: x, [], None, device="tpu")


def test_the_target_leaves_torch_as_it_found_it():
    import torch

    before = (torch.cuda.is_available(), torch.cuda.device_count())
    with fake_cuda.target("sm80"):
        assert torch.cuda.is_available() and torch.cuda.get_device_capability() == (8, 0)
    assert (torch.cuda.is_available(), torch.cuda.device_count()) == before


@pytest.mark.inductor
def test_members_copied_out_ahead_stay_apart_from_the_rest_in_generated_code(group_name, monkeypatch):
    """A head's gather needed before the blocks joins their bucket (communication-bound
    stand-in estimates) and is copied out ahead: in the sm90 code its copy-out kernel runs
    before the head's matmul, and the blocks' after it; Inductor does not fuse the two."""
    import torch

    import bucketing
    import bucketing.plan.estimates as estimates

    from .graphs import StandInEstimates, ag

    class Linear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(64, 256))

        def forward(self, x):
            return x @ ag(self.weight, group_name).t()

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.output = Linear()
            self.layers = torch.nn.ModuleList(Linear() for _ in range(3))

        def forward(self, x):
            x = self.output(x)
            for layer in self.layers:
                x = torch.relu(layer(x))
            return x

    monkeypatch.setattr(estimates, "device_costs", lambda device: StandInEstimates(0.01, 1.0, 0.0))
    code = codegen.generate(Net(), [torch.randn(8, 256)], bucketing.BucketingPass(), "cuda", "sm90")
    body = code[code.find("def call("):]
    assert len(re.findall(r"all_gather_into_tensor\.default\(", body)) == 1, body
    copies = sorted(body.find(f"{kernel}.run(") for kernel in codegen.copy_out_kernels(code))
    matmuls = [m.start() for m in re.finditer(r"extern_kernels\.mm\(", body)]
    assert len(copies) == 2 and min(copies) >= 0 and len(matmuls) == 4, body
    assert copies[0] < matmuls[0] < copies[1] < matmuls[1], body
