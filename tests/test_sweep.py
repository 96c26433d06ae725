"""The grid sweep (benchmarks/sweep.py) and the simulator's comm and compute models:
the verdicts on hand-made rows, the bad-input errors, how a group's ranks sit in
nodes, and the claim the sweep rests on (one trace serves every GPU)."""

from __future__ import annotations

import re
from unittest import mock

import pytest

from benchmarks import simulate as sim
from benchmarks import sweep


def _row(pass_name, step, exposed, bound=None, peak=10 * 2**30, comm=None, compute=None, block=2**30):
    bound = bound or step
    return {"pass": pass_name, "model": "m", "gpu": "h100", "seq": 2048, "mesh": "fsdp-64", "comm_model": "torch",
            "step_ms": step, "exposed_comm_ms": exposed, "exposed_comm_pct": 100 * exposed / step,
            "step_over_bound": step / bound, "peak_bytes": peak, "block_bytes": block,
            "comm_ms": comm or bound, "compute_ms": compute or step - exposed}


def test_verdicts_name_each_missed_target():
    rows = [_row("unbucketed", 200, 150, peak=10 * 2**30), _row("torch", 150, 90),
            _row("torch-overlap-best", 120, 40),
            # Slower than the overlap scheduler, more exposed, past 1.10 x bound, peak past 2 blocks.
            _row("project", 130, 50, bound=110, peak=13 * 2**30)]
    (v,) = sweep.verdicts(rows)
    assert (v["bound"], v["torch"], v["exposed"], v["peak"]) == (False, False, False, False)
    assert v["best_torch_ms"] == 120 and v["least_other_exposed_ms"] == 40
    rows[-1] = _row("project", 100, 30, bound=95, peak=11 * 2**30)
    (v,) = sweep.verdicts(rows)
    assert (v["bound"], v["torch"], v["exposed"], v["peak"]) == (True, True, True, True)
    text = sweep.summary(rows)
    assert "misses a target (0 of 1)" in text and "### m, h100" in text


def test_exposed_communication_is_also_judged_against_the_passes_within_the_peak_limit():
    # block 1 GiB: the limit is the unbucketed 10 GiB + 2 GiB
    rows = [_row("unbucketed", 200, 150, peak=10 * 2**30), _row("torch-overlap-best", 150, 60),
            _row("project-merge_all", 110, 20, peak=14 * 2**30), _row("project", 120, 40, peak=11 * 2**30)]
    (v,) = sweep.verdicts(rows)
    assert (v["exposed"], v["exposed_in_peak"]) == (False, True)
    assert (v["least_other_exposed_ms"], v["least_other_exposed_in_peak_ms"]) == (20, 60)
    assert "against only the passes whose peak is within the limit, in 0." in sweep.summary(rows)
    rows[-1] = _row("project", 120, 70, peak=11 * 2**30)
    (v,) = sweep.verdicts(rows)
    assert (v["exposed"], v["exposed_in_peak"]) == (False, False)


def test_the_fastest_overlap_setting_is_reported_as_best():
    rows = [_row("torch-overlap:defaults", 150, 90), _row("torch-overlap:titan", 130, 60)]
    (best,) = sweep._best_overlap(rows)
    assert best["pass"] == "torch-overlap-best" and best["setting"] == "torch-overlap:titan"
    assert best["step_ms"] == 130


def test_bad_input_names_the_parameter(capsys):
    with pytest.raises(ValueError, match="--grid"):
        sweep.grid("everything")
    from benchmarks import sim_trace

    with pytest.raises(ValueError, match="--comm-model"):
        sim.Estimator(sim_trace.gpu("h100"), comm_model="guess")
    with pytest.raises(ValueError, match="--compute-efficiency"):
        sim.Estimator(sim_trace.gpu("h100"), compute_efficiency=1.5)
    with pytest.raises(SystemExit):
        sweep.main(["--jobs", "0"])
    assert "--jobs" in capsys.readouterr().err


@pytest.mark.parametrize("ranks, layout", [
    (list(range(64)), (64, 8)),  # FSDP over 8 nodes
    (list(range(8)), (8, 8)),  # one node
    (list(range(0, 256, 8)), (32, 1)),  # HSDP replicas of an 8-shard mesh: one rank per node
    (list(range(0, 32, 4)), (8, 2)),  # replicas of 4-shard groups: two per node
])
def test_a_groups_ranks_per_node(ranks, layout):
    assert sim.ranks_layout(ranks) == layout


def test_compute_efficiency_scales_compute_only(monkeypatch):
    """At efficiency 0.5 the same node takes twice its roofline (here a fixed 2 ms, so the
    test reads the scaling alone, on any torch); the cache is shared."""
    import torch
    import torch.fx as fx

    from benchmarks import sim_trace

    calls = []
    monkeypatch.setattr(sim.Estimator, "_roofline", lambda self, node: calls.append(node) or 2.0)
    g = fx.Graph()
    a = g.placeholder("a")
    a.meta["val"] = torch.empty(1024, 1024, device="meta")
    mm = g.call_function(torch.ops.aten.mm.default, (a, a))
    mm.meta["val"] = torch.empty(1024, 1024, device="meta")
    est = sim.Estimator(sim_trace.gpu("h100"))
    assert est.compute_ms(mm) == 2.0
    assert est.with_models("measured", 0.5).compute_ms(mm) == 4.0
    assert len(calls) == 1  # the second estimator read the first one's cache


def _graph_text(gm) -> str:
    text = str(gm.graph) + "\n".join(f"{n.name} {n.meta.get('val')}" for n in gm.graph.nodes)
    return re.sub(r" at 0x[0-9a-f]+", "", text)  # script objects' addresses


def _graph_structure(gm) -> list[tuple]:
    """`gm`'s nodes in order, each argument by its position, not its name: new nodes' names
    count from what the graph held before."""
    from torch import fx

    position = {n: i for i, n in enumerate(gm.graph.nodes)}

    def args(a):
        return re.sub(r" at 0x[0-9a-f]+", "", str(fx.node.map_arg(a, lambda n: f"#{position[n]}")))

    return [(n.op, str(n.target), args(n.args), args(n.kwargs), str(n.meta.get("val"))) for n in gm.graph.nodes]


def test_one_trace_serves_every_gpu(fake_world):
    """The graphs traced for an A100 and for an H200 are the same, node for node and
    value for value: the sweep traces once per model, sequence and mesh."""
    from benchmarks import sim_trace

    try:
        sim.check_torch()
    except RuntimeError as e:
        pytest.skip(str(e))
    texts = {}
    for gpu in ("h200", "a100"):
        program = sim_trace.build("llama3-8b", fake_world, None, 1, 256, 1)
        texts[gpu] = [_graph_text(gm) for gm in sim_trace.trace(program, sim_trace.gpu(gpu)).graphs]
    assert texts["a100"] == texts["h200"]


def test_published_slowdowns_compare_the_same_pass():
    from benchmarks import published

    rows = [{"setting": s, "comm_model": cm, "published_step_ms": pub, "project_ms": simu}
            for s, pub, simu in (("titan-simplefsdp-block-8", 1000.0, 1200.0),
                                 ("titan-simplefsdp-block-64", 1450.0, 1260.0))
            for cm in ("torch", "measured")]
    lines = published.slowdowns(rows)
    assert len(lines) == 2
    assert "published step x1.450, simulated (project) x1.050" in lines[0]
    assert "slowdown 0.11" in lines[0]


def test_activation_checkpointing_recomputes_the_checkpointed_layers(fake_world):
    """The backward holds a checkpointed layer's forward matmuls again (7 a layer, less
    any the backward does not read): one layer of two for `selective`, both for `full`;
    the forward is the same."""
    import torch

    from benchmarks import sim_trace

    try:
        sim.check_torch()
    except RuntimeError as e:
        pytest.skip(str(e))
    mm = torch.ops.aten.mm.default
    counts = {}
    for mode in ("none", "selective", "full"):
        program = sim_trace.build("llama3-8b", fake_world, None, 2, 128, 1, ac=mode)
        graphs = sim_trace.trace(program, sim_trace.gpu("h200")).graphs
        counts[mode] = [sum(n.target is mm for n in gm.graph.nodes) for gm in graphs]
    assert counts["none"][0] == counts["selective"][0] == counts["full"][0] == 15, counts
    assert 6 <= counts["selective"][1] - counts["none"][1] <= 7, counts
    assert 12 <= counts["full"][1] - counts["none"][1] <= 14, counts


def test_an_unknown_rule_names_the_parameter():
    from benchmarks import ablation

    with pytest.raises(ValueError, match="rule: expected one of blocks-per-bucket"):
        with ablation.turned_off("everything"):
            pass
    assert ablation.rule_of(ablation.pass_name("joins")) == "joins"
    assert ablation.rule_of("project") is None


def test_every_rule_turned_off_is_reached_by_planning(fake_world):
    """Each rule's patch replaces something planning calls on a small llama3, at the
    default cap or at one its buckets exceed (rules about a full bucket act only where
    the cap binds): an ablation whose target planning no longer reaches would measure
    nothing."""
    from benchmarks import ablation, sim_trace
    from conformance import adapters

    try:
        sim.check_torch()
    except RuntimeError as e:
        pytest.skip(str(e))
    gpu = sim_trace.gpu("h100")
    program = sim_trace.build("llama3-8b", fake_world, None, 4, 256, 1)
    graphs = sim_trace.trace(program, gpu).graphs
    unreached = []
    for rule, (_, patches) in ablation.RULES.items():
        calls = []
        counted = [(target, attribute, _counting(replacement, calls)) for target, attribute, replacement in patches]
        original = ablation.RULES[rule]
        ablation.RULES[rule] = (original[0], counted)
        try:
            with ablation.turned_off(rule), sim_trace.estimation(gpu):
                for gm in graphs:
                    for options in ({}, {"bucket_cap_mb": 4}):
                        adapters.load("project").apply_fx(sim.copy_module(gm), **options)
        finally:
            ablation.RULES[rule] = original
        if not calls:
            unreached.append(rule)
    assert not unreached, f"planning never reached the patches of {unreached}"


def _counting(replacement, calls):
    """`replacement`, recording each call; a value that is not a function counts as
    reached where planning reads the attribute (a property stands in for it)."""
    import functools

    if not callable(replacement) or isinstance(replacement, type):
        return property(lambda self: calls.append(1) or replacement)
    @functools.wraps(replacement)
    def counted(*args, **kwargs):
        calls.append(1)
        return replacement(*args, **kwargs)
    return counted


def test_the_ablation_table_counts_the_targets_a_rule_off_loses():
    from benchmarks import ablation

    rows = [_row("unbucketed", 200, 150), _row("torch", 150, 90), _row("project", 100, 30, bound=95),
            # Without the lead rule: past the bound and more exposed than the default, still ahead of torch.
            _row(ablation.pass_name("lead"), 120, 45, bound=95)]
    text = "\n".join(sweep.ablation_summary(rows))
    (line,) = [x for x in text.splitlines() if x.startswith("| `lead`")]
    assert "bound 1, exposed 1" in line and "x1.200" in line and "+15 ms" in line
    # The ablation pass is no competitor of the default: its exposure is not the least other.
    (v,) = sweep.verdicts(rows)
    assert v["least_other_exposed_ms"] == 90


def test_resume_runs_only_the_passes_a_unit_lacks(tmp_path):
    import json

    units, gpus = sweep.grid("quick")
    whole, partial, missing = units[0], units[1], sweep.Unit("m", 1, 2048, "fsdp-8", 8, None)
    (tmp_path / "cells").mkdir()

    def write(unit, passes):
        for gpu in gpus:
            rows = [{"pass": p, "gpu": gpu, "comm_model": cm} for p in passes for cm in ("torch", "measured")]
            (tmp_path / "cells" / f"{unit.name}-{gpu}.json").write_text(json.dumps(rows))
    write(whole, sweep.pass_names(ablate=False))
    write(partial, sweep.pass_names(ablate=False)[:-1])  # a search setting added since
    rows, todo = sweep.resumed([whole, partial, missing], gpus, ("torch", "measured"), False, str(tmp_path))
    assert len(rows) == 2 * len(sweep.pass_names(ablate=False)) * len(gpus)
    assert [(u, done is None) for u, done in todo] == [(partial, False), (missing, True)]
    # The ablations are missing from every unit once asked for; a comm model missing runs a unit whole.
    _, todo = sweep.resumed([whole], gpus, ("torch", "measured"), True, str(tmp_path))
    assert [u for u, done in todo if done] == [whole]
    _, todo = sweep.resumed([whole], gpus, ("torch", "other"), False, str(tmp_path))
    assert todo == [(whole, None)]


def _chunked_graph():
    """A gathered parameter cut into 64 ranks' pieces and joined again on dim 1, as a
    parameter sharded on dim 1 comes out of its all-gather: 64 getitems of one split."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x):
        return torch.cat(torch.chunk(x, 64), dim=1)

    return make_fx(f, tracing_mode="fake")(torch.randn(64 * 4, 8))


def test_a_getitems_roofline_is_computed_once_with_the_same_numbers():
    import operator

    from torch._inductor.fx_passes import overlap_scheduling

    from benchmarks import sim_trace

    roofline = getattr(overlap_scheduling, "estimate_roofline_runtime_ms", None)
    gm = _chunked_graph()
    if roofline is None:  # torch 2.11 has no roofline estimate: the context leaves the module as it is
        with sim_trace.getitem_roofline_once():
            assert not hasattr(overlap_scheduling, "estimate_roofline_runtime_ms")
        return
    getitems = [n for n in gm.graph.nodes if n.target is operator.getitem]
    assert len(getitems) == 64
    calls = []

    def counted(node):
        calls.append(node)
        return roofline(node)

    with sim_trace.fake_device(sim_trace.gpu("h100")):
        plain = [roofline(n) for n in gm.graph.nodes if n.op == "call_function"]
        with mock.patch.object(overlap_scheduling, "estimate_roofline_runtime_ms", counted), \
                sim_trace.getitem_roofline_once():
            memo = [overlap_scheduling.estimate_roofline_runtime_ms(n) for n in gm.graph.nodes
                    if n.op == "call_function"]
    assert memo == plain
    # Every chunk has the same layout: one estimate serves the 64 getitems.
    assert sum(n.target is operator.getitem for n in calls) == 1
    assert overlap_scheduling.estimate_roofline_runtime_ms is roofline


def test_a_failed_pass_is_listed_and_left_out_of_the_tables():
    rows = [_row("unbucketed", 200, 150), _row("torch", 150, 90), _row("project", 100, 30, bound=95),
            _row("torch-overlap:titan", 120, 40) | {"note": "autofix_cycles"},
            {k: v for k, v in _row("torch-overlap:defaults", 1, 0).items()
             if k in ("pass", "model", "gpu", "seq", "mesh", "comm_model")} | {"failed": "cyclic extra dep"}]
    (best,) = sweep._best_overlap(rows)
    assert best["setting"] == "torch-overlap:titan"
    (v,) = sweep.verdicts(rows + [best])
    assert v["best_torch_ms"] == 120
    text = sweep.summary(rows + [best])
    assert "### Passes that failed on a cell" in text and "cyclic extra dep" in text
    assert "`overlap_scheduling_autofix_cycles`" in text and "torch-overlap:titan (m h100" in text


def test_the_overlap_search_shares_pre_bucketing_with_the_same_graphs(fake_world):
    """Every overlap setting starts from one pre-bucketed graph per GPU and cap, without the
    scheduler's estimate log: each setting's graphs are the ones its whole run gives."""
    from conformance import adapters

    from benchmarks import sim_trace

    try:
        sim.check_torch()
    except RuntimeError as e:
        pytest.skip(str(e))
    program = sim_trace.build("llama3-8b", fake_world, None, 2, 256, 1)
    traced = sim_trace.trace(program, sim_trace.gpu(sweep.TRACE_GPU))
    base = [("forward", traced.graphs[0]), ("backward", traced.graphs[1])]
    memo: dict = {}
    for gpu_name, (name, options) in [(g, item) for g in ("h100", "a100") for item in sweep.overlap_passes().items()]:
        gpu = sim_trace.gpu(gpu_name)
        shared = sweep._apply(name, base, gpu, memo)
        whole = []
        for _, gm in base:
            copy = sim.copy_module(gm)
            with sim_trace.estimation(gpu):
                adapters.load("torch-overlap").apply_fx(copy, **options)
            whole.append(_graph_structure(copy))
        assert [_graph_structure(gm) for _, gm in shared] == whole, name
    if memo:  # torch 2.13 on: one pre-bucketing per graph and resolved cap, not per setting and GPU
        caps = {options.get("bucket_cap_mb") for options in sweep.overlap_passes().values()}
        assert len(memo) < 2 * 2 * len(sweep.overlap_passes())
        assert len(memo) <= 2 * 2 * len(caps)


def test_a_copy_keeps_an_order_that_is_not_topological():
    """torch's FSDP pre-bucketing leaves merged collectives after some of their users and its
    overlap scheduler reads that order: a pass's copy keeps it, node for node."""
    import torch
    from torch import fx

    def f(x):
        a = torch.relu(x)
        b = torch.neg(a)
        return torch.add(a, b)

    gm = fx.symbolic_trace(f)
    relu, neg = (n for n in gm.graph.nodes if n.op == "call_function" and n.target in (torch.relu, torch.neg))
    neg.append(relu)  # relu now after its user
    order = [n.name for n in gm.graph.nodes]
    assert order.index("relu") > order.index("neg")
    copy = sim.copy_module(gm)
    assert [n.name for n in copy.graph.nodes] == order
    assert [str(n.args) for n in copy.graph.nodes] == [str(n.args) for n in gm.graph.nodes]
    assert all(a is not b for a, b in zip(copy.graph.nodes, gm.graph.nodes))
