"""Published training measurements beside the simulator's predictions.

    python -m benchmarks.published [--compute-efficiency E] [--json PATH]

Each setting below is a published llama3-8b step (tokens per second per GPU,
or a step time) with its source. For each, the simulator traces the same
model, sequence, batch and GPU count, and plays the unbucketed step and the
bucketed steps (torch's pass, the default options) under both comm models
(`torch`, `measured`), with activation checkpointing `--ac` (default
`selective`, every second layer: the published runs checkpoint selectively);
the compute runs at `--compute-efficiency` of torch's
roofline, fitted by default to the first setting (its 8-GPU step, where
communication hides behind compute). Printed: the published figure, each
prediction, and the published effect of scaling or bucketing beside the
simulated one.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    gpu: str
    world_size: int
    seq: int
    batch: int
    tokens_per_gpu_s: float | None  # published throughput
    step_ms: float | None  # or published step time
    source: str
    note: str = ""


SETTINGS = (
    Setting("titan-fsdp2-bs2-8", "h100", 8, 8192, 2, 6667.0, None,
            "torchtitan docs/performance.md: llama3-8b, 8 H100, FSDP2, torch.compile, bs 2, seq 8192",
            "selective activation checkpointing"),
    Setting("titan-fsdp2-bs2-128", "h100", 128, 8192, 2, 6514.0, None,
            "torchtitan docs/performance.md: llama3-8b, 128 H100, FSDP2, torch.compile, bs 2, seq 8192"),
    Setting("titan-simplefsdp-block-8", "h100", 8, 8192, 1, 7227.0, None,
            "torchtitan PR 1881: llama3-8b, 8 H100, SimpleFSDP, per-block bucketing, bs 1"),
    Setting("titan-simplefsdp-block-64", "h100", 64, 8192, 1, 4984.0, None,
            "torchtitan PR 1881: llama3-8b, 64 H100, SimpleFSDP, per-block bucketing, bs 1"),
    Setting("titan-fsdp2-bs1-8", "h100", 8, 8192, 1, 7380.0, None,
            "torchtitan PR 1881: llama3-8b, 8 H100, FSDP2, bs 1"),
    Setting("titan-fsdp2-bs1-64", "h100", 64, 8192, 1, 5097.0, None,
            "torchtitan PR 1881: llama3-8b, 64 H100, FSDP2, bs 1"),
)
PASSES = ("unbucketed", "torch", "project")


def run(efficiency: float | None, log=None, ac: str = "selective") -> tuple[list[dict], float]:
    """Rows per (setting, comm model, pass); the efficiency used."""
    from . import simulate as sim

    traced: dict = {}

    def step_ms(s: Setting, comm_model: str, eff: float) -> dict:
        key = (s.gpu, s.world_size, s.seq, s.batch)
        if key not in traced:
            (traced[key],) = sim.simulate("llama3-8b", [s.world_size], s.gpu, PASSES, seq=s.seq, batch=s.batch,
                                          log=log, ac=ac)
        world = traced[key]
        est = world.estimator.with_models(comm_model, eff)
        out = {}
        traced_names = {n.name for gm in world.traced.graphs for n in gm.graph.nodes}
        for p in world.passes:
            added = est.for_pass({n.name for _, gm in p.graphs for n in gm.graph.nodes} - traced_names)
            with sim.sim_trace.estimation(world.estimator.gpu):
                played = sim.tl.run_step([(g, gm.graph) for g, gm in p.graphs], added.compute_ms, added.comm_ms)
            out[p.name] = played.step_ms
        return out

    first = SETTINGS[0]
    if efficiency is None:
        # The first setting's 8-GPU step: communication hides behind compute, so the
        # step is the compute's; the efficiency that makes it the published one.
        at_roofline = step_ms(first, "measured", 1.0)["project"]
        published_ms = first.seq * first.batch / first.tokens_per_gpu_s * 1e3
        efficiency = min(1.0, at_roofline / published_ms)
    rows = []
    for s in SETTINGS:
        published = s.step_ms or s.seq * s.batch / s.tokens_per_gpu_s * 1e3
        for cm in sim.COMM_MODELS:
            steps = step_ms(s, cm, efficiency)
            rows.append({"setting": s.name, "source": s.source, "gpu": s.gpu, "world_size": s.world_size,
                         "seq": s.seq, "batch": s.batch, "ac": ac, "comm_model": cm, "compute_efficiency": round(efficiency, 4),
                         "published_step_ms": round(published, 1),
                         **{f"{p}_ms": round(v, 1) for p, v in steps.items()}})
    return rows, efficiency


def table(rows: list[dict]) -> str:
    head = ["setting", "GPUs", "bs", "comm model", "published ms", *(f"{p} ms" for p in PASSES), "project / published"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    for r in rows:
        lines.append("| " + " | ".join([r["setting"], str(r["world_size"]), str(r["batch"]), r["comm_model"],
                                        f"{r['published_step_ms']:.0f}", *(f"{r[p + '_ms']:.0f}" for p in PASSES),
                                        f"{r['project_ms'] / r['published_step_ms']:.2f}"]) + " |")
    return "\n".join(lines)


def slowdowns(rows: list[dict]) -> list[str]:
    """The published effect of going from 8 GPUs to more, beside the simulated one."""
    by = {(r["setting"], r["comm_model"]): r for r in rows}
    lines = []
    for small, large, simulated in (("titan-fsdp2-bs2-8", "titan-fsdp2-bs2-128", "project"),
                                    ("titan-simplefsdp-block-8", "titan-simplefsdp-block-64", "project"),
                                    ("titan-fsdp2-bs1-8", "titan-fsdp2-bs1-64", "project")):
        for cm in ("torch", "measured"):
            a, b = by.get((small, cm)), by.get((large, cm))
            if not a or not b:
                continue
            pub = b["published_step_ms"] / a["published_step_ms"]
            simu = b[simulated + "_ms"] / a[simulated + "_ms"]
            lines.append(f"{small} -> {large} ({cm}): published step x{pub:.3f}, simulated ({simulated}) x{simu:.3f}, "
                         f"simulated / published slowdown {(simu - 1) / (pub - 1) if pub != 1 else float('nan'):.2f}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.published", description=__doc__.split("\n\n")[0])
    parser.add_argument("--compute-efficiency", type=float, default=None, metavar="E",
                        help="the fraction of torch's roofline the compute reaches (default: fitted to the first "
                             "setting)")
    parser.add_argument("--ac", default="selective", choices=("none", "selective", "full"),
                        help="activation checkpointing of the simulated steps")
    parser.add_argument("--json", help="write the rows as a JSON list")
    args = parser.parse_args(argv)
    from .simulate import quiet_torch_logs

    quiet_torch_logs()
    rows, eff = run(args.compute_efficiency, log=lambda m: print(m, file=sys.stderr, flush=True), ac=args.ac)
    print(f"compute efficiency {eff:.3f} of torch's roofline; activation checkpointing {args.ac}")
    print(table(rows))
    print()
    print("\n".join(slowdowns(rows)))
    for s in SETTINGS:
        print(f"{s.name}: {s.source}" + (f" ({s.note})" if s.note else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
