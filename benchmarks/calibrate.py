"""The simulated compute of a training step beside the same step timed on one GPU.

    python -m benchmarks.calibrate [--steps N] [--json PATH]

On one SM80+ CUDA GPU, no process group: the model family's bf16 + f32
Transformer (`transformer-bf16-f32`: torch's test Transformer at
TRANSFORMER_ARGS, bf16 Linear, f32 embeddings and norms, autocast bf16, one
rank's batch), unsharded, so the step has compute and no collectives. Its
training step (forward, loss, backward; no optimizer) is compiled with
Inductor while a post-grad custom pass that changes nothing keeps a copy of
each graph; the compiled step is timed with CUDA events, median of N steps
after warm-up. The captured graphs are then estimated as the simulator
(benchmarks/simulate.py) estimates a step's compute: `Estimator.compute_ms`
per node in graph order, inside the simulator's preset when the GPU is one of
them (same name, capability, multiprocessors and memory), else with torch's
own figures for the GPU.

Printed: one table of the GPU, torch's version, the measured step, the
simulated forward, backward and total compute, measured / simulated, and the
number of compute nodes; `--json` writes those fields. The simulated compute
leaves out fusion and launch gaps (see simulate.py), so the ratio is what the
simulator misses on this GPU for a step of this size.

Without such a GPU it says so and exits 0; `simulated_compute` alone runs on
any machine, on graphs traced for a GPU preset on fake CUDA tensors
(`fake_cuda_graphs`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import statistics
import sys

import torch
import torch.fx as fx
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

from . import sim_timeline as tl
from . import sim_trace
from . import simulate as sim

MODEL = "transformer-bf16-f32"
WARMUP_STEPS = 3  # the first compiles the forward and the backward
KEYS = ("gpu", "torch", "figures", "steps", "measured_step_ms", "simulated_forward_ms", "simulated_backward_ms",
        "simulated_compute_ms", "measured_over_simulated", "compute_nodes", "estimator_fallbacks", "note")


def training_step(device: str):
    """(model, forward_loss(tokens, targets) -> loss, (tokens, targets)): the family's
    Transformer as its entry builds it, unsharded, on `device`."""
    from conformance.models.family import MODELS

    spec = MODELS[MODEL]
    torch.manual_seed(0)
    model = spec.make().to(device)
    batch = spec.batch(0, device)

    def forward_loss(tokens, targets):
        with spec.autocast(device):
            return spec.loss(model(tokens), targets)

    return model, forward_loss, batch


class PostGradRecorder(CustomGraphPass):
    """A post-grad custom pass that keeps a copy of every graph it sees and changes nothing."""

    def __init__(self):
        self.graphs: list[fx.GraphModule] = []

    def __call__(self, graph: fx.Graph) -> None:
        # A copy: Inductor's later passes still rewrite the graph it lowers.
        self.graphs.append(sim.copy_module(graph.owning_module))

    def uuid(self) -> str:
        return get_hash_for_files((__file__,)).hex()


def compile_training_step(device: str, warmup: int = WARMUP_STEPS):
    """(train_step, [forward, backward] post-grad graphs): the compiled step, run `warmup` times."""
    model, forward_loss, batch = training_step(device)
    compiled = torch.compile(forward_loss, fullgraph=True)
    params = list(model.parameters())

    def train_step():
        for p in params:
            p.grad = None  # each step's backward writes fresh gradients, as the graph does
        compiled(*batch).backward()

    recorder = PostGradRecorder()
    torch._dynamo.reset()
    # No caches: a cached compile skips the post-grad passes and records nothing.
    with sim_trace._no_caches(), torch._inductor.config.patch(post_grad_custom_post_pass=recorder):
        for _ in range(warmup):
            train_step()
    if len(recorder.graphs) != 2:
        raise RuntimeError(f"expected a forward and a backward graph, recorded {len(recorder.graphs)}")
    return train_step, recorder.graphs


def median_step_ms(train_step, steps: int) -> float:
    """The median GPU time of `steps` calls, each between two CUDA events."""
    events = []
    torch.cuda.synchronize()
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        train_step()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events)


@dataclasses.dataclass
class SimulatedCompute:
    forward_ms: float
    backward_ms: float
    compute_nodes: int
    bf16_tflops: float  # the figures the estimates used
    dram_gbps: float
    fallbacks: dict  # estimator fallbacks by op

    @property
    def total_ms(self) -> float:
        return self.forward_ms + self.backward_ms


def simulated_compute(graphs: list[fx.GraphModule], gpu: sim_trace.Gpu | None) -> SimulatedCompute:
    """The simulator's compute estimate of a [forward, backward] pair of post-grad
    graphs, inside GPU preset `gpu`, or for the CUDA device torch sees when None."""
    sim.check_torch()
    estimator = sim.Estimator(gpu)
    with sim_trace.estimation(gpu) if gpu is not None else contextlib.nullcontext():
        step = tl.run_step([("forward", graphs[0].graph), ("backward", graphs[1].graph)],
                           estimator.compute_ms, estimator.comm_ms)
        tflops = float(torch._inductor.utils.get_device_tflops(torch.bfloat16))
        gbps = float(torch._inductor.utils.get_gpu_dram_gbps())
    forward, backward = step.graphs
    return SimulatedCompute(forward.compute_ms, backward.compute_ms, compute_nodes(graphs), tflops, gbps,
                            dict(estimator.failures))


def compute_nodes(graphs: list[fx.GraphModule]) -> int:
    """Nodes that run a kernel (views, waits and allocations do not: sim_timeline.is_free)."""
    return sum(not tl.is_free(n) for gm in graphs for n in gm.graph.nodes)


def fake_cuda_graphs(gpu: sim_trace.Gpu) -> list[fx.GraphModule]:
    """The step's [forward, backward] post-grad graphs traced for GPU preset `gpu` on this machine."""
    model, forward_loss, batch = training_step("cpu")
    count = sum(p.numel() for p in model.parameters())
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    program = sim_trace.Program(forward_loss, batch, count, nbytes, count, None, int(batch[0].numel()))
    return sim_trace.trace(program, gpu).graphs


def preset_of_current_gpu() -> sim_trace.Gpu | None:
    """The simulator's preset for CUDA device 0: same name, capability and multiprocessors,
    memory within 10% (an A100 of 40 GB or an H100 NVL has other bandwidths)."""
    props = torch.cuda.get_device_properties(0)
    for g in sim_trace.GPUS.values():
        p = g.preset
        if (g.key.upper() in props.name.upper()
                and (p.major, p.minor, p.multi_processor_count) == (props.major, props.minor,
                                                                    props.multi_processor_count)
                and abs(props.total_memory / p.total_memory - 1) < 0.1):
            return g
    return None


def calibrate(steps: int) -> dict:
    """Time the compiled step on CUDA device 0 and estimate its captured graphs: a row of KEYS."""
    train_step, graphs = compile_training_step("cuda")
    measured = median_step_ms(train_step, steps)
    gpu = preset_of_current_gpu()
    row = dict.fromkeys(KEYS)
    row.update(gpu=torch.cuda.get_device_name(0), torch=torch.__version__, steps=steps,
               measured_step_ms=round(measured, 6))
    row.update(compute_nodes=compute_nodes(graphs))
    try:
        sim.check_torch()
    except RuntimeError as e:  # a torch without the simulator's estimator: the measurement alone
        row.update(note=str(e))
        return row
    s = simulated_compute(graphs, gpu)
    source = f"simulator preset {gpu.key}" if gpu is not None else "torch's figures for this GPU"
    row.update(figures=f"{source}: {s.bf16_tflops:.0f} dense bf16 TFLOPS, {s.dram_gbps:.0f} GB/s HBM",
               simulated_forward_ms=round(s.forward_ms, 6), simulated_backward_ms=round(s.backward_ms, 6),
               simulated_compute_ms=round(s.total_ms, 6),
               measured_over_simulated=round(measured / s.total_ms, 2) if s.total_ms else None,
               estimator_fallbacks=s.fallbacks)
    return row


def _cell(x) -> str:
    return "n/a" if x is None else f"{x:.4g}" if isinstance(x, float) else str(x)


def table(row: dict) -> str:
    head = ["GPU", "torch", "measured step ms", "simulated forward ms", "simulated backward ms",
            "simulated compute ms", "measured / simulated", "compute nodes"]
    keys = ["gpu", "torch", "measured_step_ms", "simulated_forward_ms", "simulated_backward_ms",
            "simulated_compute_ms", "measured_over_simulated", "compute_nodes"]
    cells = [_cell(row[k]) for k in keys]
    widths = [max(len(h), len(c)) for h, c in zip(head, cells)]
    return "\n".join(["| " + " | ".join(x.ljust(w) for x, w in zip(line, widths)) + " |"
                      for line in (head, ["-" * w for w in widths], cells)])


def main(argv=None) -> int:
    from conformance.gpu import suitable_gpu

    parser = argparse.ArgumentParser(prog="python -m benchmarks.calibrate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50, help="timed steps after warm-up (the median is reported)")
    parser.add_argument("--json", help="write the row as a JSON object")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be positive")
    ok, description = suitable_gpu()
    if not ok:
        print(f"calibrate: needs an SM80+ CUDA GPU ({description}); nothing measured.")
        return 0
    for name in ("torch._dynamo", "torch._inductor", "torch._functorch"):
        logging.getLogger(name).setLevel(logging.ERROR)  # the compile's chatter
    row = calibrate(args.steps)
    print(f"{MODEL}, one GPU, unsharded, median of {args.steps} compiled steps; simulated: the simulator's "
          "per-node roofline of the same post-grad graphs (no fusion, no launch gaps)")
    print(table(row))
    for key in ("figures", "note"):
        if row[key]:
            print(f"{key}: {row[key]}")
    if row["estimator_fallbacks"]:
        print("estimator fallbacks: " + ", ".join(f"{k} x{v}" for k, v in row["estimator_fallbacks"].items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(row, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
