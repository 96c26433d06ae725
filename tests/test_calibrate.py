"""The step calibration (benchmarks/calibrate.py) without a GPU: the simulated compute of
the family's Transformer traced for an H200 inside bounds worked out from the model, the
recording pass on a CPU compile, the preset a GPU maps to, and main's status line."""

from __future__ import annotations

import types

import pytest
import torch
import torch.fx as fx
from torch.utils._pytree import tree_flatten

from benchmarks import calibrate as cal
from benchmarks import sim_timeline as tl
from benchmarks import sim_trace
from benchmarks import simulate as sim
from conformance.models.family import TRANSFORMER_ARGS

GiB = 2**30


def _needs_estimator():
    try:
        sim.check_torch()
    except RuntimeError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def h200_traced():
    """The step's graphs traced for an H200 on fake CUDA tensors, and their estimate."""
    _needs_estimator()
    gpu = sim_trace.gpu("h200")
    graphs = cal.fake_cuda_graphs(gpu)
    return graphs, cal.simulated_compute(graphs, gpu)


def _tensor_bytes(node: fx.Node) -> int:
    """Every element a node's tensor arguments and results hold."""
    vals = tree_flatten(fx.node.map_arg((node.args, node.kwargs, node), lambda n: n.meta.get("val")))[0]
    return sum(v.numel() * v.element_size() for v in vals if isinstance(v, torch.Tensor))


@pytest.mark.inductor
def test_simulated_compute_of_the_transformer_on_h200_lies_within_its_bounds(h200_traced):
    graphs, s = h200_traced
    model, _, (tokens, _) = cal.training_step("cpu")
    batch, seq = tokens.shape
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert (s.bf16_tflops, s.dram_gbps) == (989.5, 4800.0)  # the H100's datasheet peak, the H200's HBM3e
    bytes_per_ms, flops_per_ms = s.dram_gbps * 1e6, s.bf16_tflops * 1e9
    assert s.fallbacks == {}
    assert 0 < s.forward_ms < s.total_ms
    assert s.total_ms == pytest.approx(s.forward_ms + s.backward_ms)
    assert s.backward_ms > 1.5 * s.forward_ms  # dX and dW per matmul: twice the forward's work
    # A node's roofline is at least its bytes at HBM bandwidth. The forward reads every
    # parameter; the backward writes every gradient and reads each Linear weight again (dX).
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    linear_weights = sum(m.weight.numel() * m.weight.element_size() for m in linears)
    assert s.forward_ms >= params / bytes_per_ms
    assert s.backward_ms >= (params + linear_weights) / bytes_per_ms
    # ... and at most its bytes plus its FLOPs at 75% of the peak. FLOPs of the step:
    # 2 x tokens x in x out per Linear in the forward, twice that in the backward; causal
    # attention counted whole: 2 matmuls of seq x seq x dim per sequence and layer in the
    # forward, 5 in the backward.
    matmuls = 6 * tokens.numel() * sum(m.in_features * m.out_features for m in linears)
    attention = 7 * 2 * TRANSFORMER_ARGS.n_layers * batch * seq * seq * TRANSFORMER_ARGS.dim
    moved = sum(_tensor_bytes(n) for gm in graphs for n in gm.graph.nodes if not tl.is_free(n))
    assert s.total_ms <= moved / bytes_per_ms + (matmuls + attention) / (0.75 * flops_per_ms)
    assert s.compute_nodes == cal.compute_nodes(graphs) > 100


@pytest.fixture(scope="module")
def cpu_compiled():
    """The GPU path on the CPU: the step compiled by Inductor under the recording pass."""
    train_step, graphs = cal.compile_training_step("cpu", warmup=1)
    return train_step, graphs


@pytest.mark.inductor
def test_the_recording_pass_keeps_the_forward_and_the_backward(cpu_compiled):
    _, (forward, backward) = cpu_compiled
    # The forward returns the loss and what it saves; the backward takes those saved
    # tensors and the loss's gradient.
    saved = len(forward.graph.output_node().args[0]) - 1
    assert sum(n.op == "placeholder" for n in backward.graph.nodes) == saved + 1


@pytest.mark.inductor
def test_the_recorded_graphs_cost_what_the_fake_cuda_trace_does(cpu_compiled, h200_traced):
    """The same decompositions: estimated for an H200 they agree, a few nodes apart."""
    _, graphs = cpu_compiled
    _, traced = h200_traced
    recorded = cal.simulated_compute(graphs, sim_trace.gpu("h200"))
    assert recorded.forward_ms == pytest.approx(traced.forward_ms, rel=0.05)
    assert recorded.backward_ms == pytest.approx(traced.backward_ms, rel=0.05)
    assert recorded.compute_nodes == pytest.approx(traced.compute_nodes, rel=0.05)


@pytest.mark.inductor
def test_main_on_a_gpu_prints_the_row_and_writes_it(cpu_compiled, monkeypatch, capsys, tmp_path):
    """main's GPU path with the compile and the timing done on the CPU and an H200's answers."""
    import json

    import conformance.gpu

    monkeypatch.setattr(conformance.gpu, "suitable_gpu", lambda: (True, "1 x NVIDIA H200 (SM90)"))
    monkeypatch.setattr(cal, "compile_training_step", lambda device: cpu_compiled)
    monkeypatch.setattr(cal, "median_step_ms", lambda train_step, steps: 2.5)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device=None: _props("NVIDIA H200", 9, 0, 132, 139.8))
    path = tmp_path / "calibration.json"
    assert cal.main(["--steps", "3", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    row = json.loads(path.read_text())
    assert set(row) == set(cal.KEYS)
    assert (row["gpu"], row["steps"], row["measured_step_ms"]) == ("NVIDIA H200", 3, 2.5)
    assert "| NVIDIA H200 |" in out
    try:
        sim.check_torch()
    except RuntimeError as e:  # the measurement alone, and why
        assert row["note"] == str(e) and row["simulated_compute_ms"] is None
        assert row["compute_nodes"] == cal.compute_nodes(cpu_compiled[1]) > 100
        assert f"note: {e}" in out
        return
    total = row["simulated_forward_ms"] + row["simulated_backward_ms"]
    assert row["simulated_compute_ms"] == pytest.approx(total, abs=2e-6)
    assert row["measured_over_simulated"] == pytest.approx(2.5 / row["simulated_compute_ms"], rel=0.01)
    assert row["figures"].startswith("simulator preset h200: 990 dense bf16 TFLOPS, 4800 GB/s HBM")
    assert row["note"] is None and row["estimator_fallbacks"] == {}


def _props(name, major, minor, sms, memory_gib):
    return types.SimpleNamespace(name=name, major=major, minor=minor, multi_processor_count=sms,
                                 total_memory=int(memory_gib * GiB))


@pytest.mark.parametrize("props, preset", [
    (_props("NVIDIA H200", 9, 0, 132, 139.8), "h200"),
    (_props("NVIDIA H100 80GB HBM3", 9, 0, 132, 79.2), "h100"),
    (_props("NVIDIA A100-SXM4-80GB", 8, 0, 108, 79.3), "a100"),
    (_props("NVIDIA A100-SXM4-40GB", 8, 0, 108, 39.4), None),  # less and slower HBM
    (_props("NVIDIA H100 PCIe", 9, 0, 114, 79.2), None),
    (_props("NVIDIA H100 NVL", 9, 0, 132, 93.6), None),
    (_props("NVIDIA L40S", 8, 9, 142, 44.4), None),
])
def test_a_gpu_maps_to_the_simulators_preset_only_when_it_is_one(props, preset, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    gpu = cal.preset_of_current_gpu()
    assert (gpu.key if gpu else None) == preset


def test_main_without_a_gpu_says_it_needs_one(monkeypatch, capsys):
    import conformance.gpu

    monkeypatch.setattr(conformance.gpu, "suitable_gpu", lambda: (False, "torch.cuda.is_available() is False"))
    assert cal.main(["--steps", "5"]) == 0
    out = capsys.readouterr().out.strip()
    assert out == "calibrate: needs an SM80+ CUDA GPU (torch.cuda.is_available() is False); nothing measured."


def test_the_table_shows_a_missing_estimate_as_na():
    row = dict.fromkeys(cal.KEYS)
    row.update(gpu="NVIDIA H200", torch="2.11.0", measured_step_ms=1.25)
    body = cal.table(row).splitlines()[2]
    assert [c.strip() for c in body.strip("|").split("|")] == ["NVIDIA H200", "2.11.0", "1.25"] + ["n/a"] * 5


@pytest.mark.parametrize("tests, calibration, status", [(0, 0, 0), (1, 0, 1), (0, 3, 3), (2, 3, 2)])
def test_gpu_tests_calibrate_after_the_tests_whatever_they_give(tests, calibration, status, monkeypatch):
    from conformance import gpu_entry

    commands = []

    def call(command, **kwargs):
        commands.append(command[2])  # [python, -m, module, ...]
        return tests if command[2] == "pytest" else calibration

    monkeypatch.setattr(gpu_entry, "suitable_gpu", lambda: (True, "1 x NVIDIA H200 (SM90)"))
    monkeypatch.setattr(gpu_entry.subprocess, "call", call)
    assert gpu_entry.main([]) == status
    assert commands == ["pytest", "benchmarks.calibrate"]
