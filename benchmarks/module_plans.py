"""Buckets by module on a real model: ours and torch's manual bucketer, one plan.

    python -m benchmarks.module_plans [--model transformer-bf16-f32] [--world 2] [--steps 20]

Trains a model of the conformance family (SimpleFSDP-style, compiled forward,
backward and AdamW step) on gloo ranks under four variants, timed in turns in
the same processes: unbucketed, our default policy, our pass given the model's
`module_buckets` plan, and torch's `manual_overlap_bucketing` given the same
plan. Prints collectives per graph (forward all-gathers / backward
reduce-scatters), whether the parameters after the timed steps are
bit-identical to the unbucketed run's, and the median step time.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from conformance import adapters
from conformance.models import family
from conformance.models.simple_fsdp import local_tensor
from conformance.models.training import Recorder
from conformance.timing import time_in_turns


def _trainer(spec, mesh, rank: int, custom_pass):
    model = spec.build(mesh, "cpu")
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    inputs, targets = spec.batch_for(mesh, rank, "cpu")
    compiled = torch.compile(model)
    recorder = Recorder(custom_pass)

    def step():
        with torch._inductor.config.patch(post_grad_custom_post_pass=recorder, fx_graph_cache=False):
            optim.zero_grad(set_to_none=True)
            with spec.autocast("cpu"):
                out = compiled(inputs)
            spec.loss(out, targets).backward()
            optim.step()

    step()  # compiles forward and backward
    return model, step, recorder


def bench_model(ctx, model_id: str, steps: int) -> list[dict]:
    """Rank task: every variant of one model; returns rows (rank 0's are reported)."""
    spec = family.MODELS[model_id]
    mesh = spec.mesh("cpu", ctx.world_size)
    plan = spec.module_plan
    ours, torch_manual = adapters.load("project"), adapters.load("torch-manual")
    variants = {
        "unbucketed": None,
        "ours default": ours.inductor_pass(),
        "ours module_buckets": ours.inductor_pass(module_buckets=plan),
        "torch manual_overlap_bucketing": torch_manual.inductor_pass(module_buckets=plan),
    }
    trained = {name: _trainer(spec, mesh, ctx.rank, custom) for name, custom in variants.items()}
    times = time_in_turns({name: t[1] for name, t in trained.items()}, steps, "cpu")
    base = [local_tensor(p).detach() for p in trained["unbucketed"][0].parameters()]
    rows = []
    for name, (model, _, recorder) in trained.items():
        params = [local_tensor(p).detach() for p in model.parameters()]
        identical = all(torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
                        for a, b in zip(base, params))
        forward, backward = recorder.after[:2]
        rows.append({"variant": name, "all_gathers": forward["all_gather"],
                     "reduce_scatters": backward["reduce_scatter"], "identical": identical,
                     "median_ms": statistics.median(times[name]) * 1e3})
    return rows


def main(argv=None) -> None:
    from conformance.pool import RankPool, raise_on_failure

    p = argparse.ArgumentParser(prog="python -m benchmarks.module_plans")
    p.add_argument("--model", default="transformer-bf16-f32", choices=[m for m, s in family.MODELS.items()
                                                                        if s.module_plan])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args(argv)
    pool = RankPool(args.world, timeout_s=1800)
    try:
        rows = raise_on_failure(pool.run("benchmarks.module_plans:bench_model", timeout_s=1800,
                                         model_id=args.model, steps=args.steps), args.model)[0]
    finally:
        pool.close()
    base = next(r["median_ms"] for r in rows if r["variant"] == "unbucketed")
    print(f"{args.model}, {args.world} gloo ranks, plan {family.MODELS[args.model].module_plan}, "
          f"median of {args.steps} steps timed in turns\n")
    print("| variant | forward all-gathers | backward reduce-scatters | bit-identical | step ms | vs unbucketed |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['variant']} | {r['all_gathers']} | {r['reduce_scatters']} | {'yes' if r['identical'] else 'no'} "
              f"| {r['median_ms']:.1f} | {r['median_ms'] / base:.2f} |")


if __name__ == "__main__":
    main()
