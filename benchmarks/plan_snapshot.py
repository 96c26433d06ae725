"""Every plan the pass makes on the model family and the catalog, as text, to hold a change against.

    python -m benchmarks.plan_snapshot --write PATH     # record
    python -m benchmarks.plan_snapshot --compare PATH   # exit 1 naming each plan that differs

One process on a fake process group: each catalog case is traced at each of
its world sizes and planned with its options; each model of the family is
traced to its post-grad graphs (CPU, and the H200 device with torch's
estimates) and planned under every variant the suite trains it with. A
record is `str(plan)` (buckets, members, positions, everything left alone and
why) and the bucketed graph's nodes, so a change of order shows too.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.fx as fx

from . import sim_trace
from .simulate import copy_module


def _graph_text(graph: fx.Graph) -> str:
    return "\n".join(f"{n.op} {n.name} {n.target} {n.args} {n.kwargs}" for n in graph.nodes)


def _record(gm: fx.GraphModule, options: dict) -> str:
    import bucketing

    plan = bucketing.bucket_collectives(gm, **options)
    return str(plan) + "\n---\n" + _graph_text(gm.graph)


def catalog_plans() -> dict[str, str]:
    from conformance import catalog
    from conformance.harness import trace
    from conformance.pool import make_groups
    from conformance.programs import make_inputs

    out = {}
    ids = catalog.all_case_ids()
    for world in sorted({catalog.get(i)[1] for i in ids}):
        sim_trace.init_world(world)
        groups = make_groups(world)
        for case_id in ids:
            case, w = catalog.get(case_id)
            if w != world:
                continue
            inputs = make_inputs(case.steps, groups, case.name, 0)
            try:
                text = _record(trace(case, groups, inputs), case.options_for(world))
            except Exception as e:  # a case the pass is meant to reject is a record too
                text = f"raised {type(e).__name__}: {e}"
            out[f"catalog {case_id}"] = text
    return out


def family_plans() -> dict[str, str]:
    from conformance.models.family import MODELS

    out = {}
    for name, spec in MODELS.items():
        world = spec.world_sizes[0]
        for device in ("cpu", "h200"):
            program = sim_trace.build(name, world, None, None, 0, 0)
            gpu = sim_trace.gpu("h200")
            traced = sim_trace.trace(program, gpu).graphs if device == "h200" else _cpu_trace(program)
            for variant, options in {"default": {}, **spec.variants()}.items():
                for g, gm in zip(("forward", "backward"), traced):
                    copy = copy_module(gm)
                    try:
                        if device == "h200":
                            with sim_trace.estimation(gpu):
                                text = _record(copy, options)
                        else:
                            text = _record(copy, options)
                    except Exception as e:
                        text = f"raised {type(e).__name__}: {e}"
                    out[f"family {name} w{world} {device} {variant} {g}"] = text
    return out


def _cpu_trace(program) -> list:
    sim_trace._warm_up()
    return sim_trace._capture(program.step, program.inputs, None)


def simulated() -> dict[str, str]:
    from .simulate import KEYS, simulate

    worlds = simulate("llama3-8b", [64], "h200", passes=("unbucketed", "project", "project-merge_all"))
    rows = [p.row("llama3-8b", "h200", w.world_size) for w in worlds for p in w.passes]
    return {"simulate llama3-8b w64 h200": json.dumps([{k: r[k] for k in KEYS} for r in rows], indent=1)}


def snapshot(parts) -> dict[str, str]:
    torch.manual_seed(0)
    out = {}
    for part in parts:
        out.update({"catalog": catalog_plans, "family": family_plans, "simulate": simulated}[part]())
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.plan_snapshot")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", metavar="PATH")
    action.add_argument("--compare", metavar="PATH")
    p.add_argument("--parts", default="catalog,family,simulate")
    args = p.parse_args(argv)
    got = snapshot(args.parts.split(","))
    if args.write:
        with open(args.write, "w") as f:
            json.dump(got, f, indent=0, sort_keys=True)
        print(f"wrote {len(got)} plans to {args.write}")
        return 0
    with open(args.compare) as f:
        want = json.load(f)
    differ = [k for k in sorted(set(want) | set(got)) if k.split()[0] in args.parts and want.get(k) != got.get(k)]
    for k in differ:
        print(f"differs: {k}")
    print(f"{len(got)} plans, {len(differ)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
