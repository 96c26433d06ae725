"""The step simulator (benchmarks/simulate.py): the timeline on hand-built graphs with
chosen durations, answers computed by hand; the failure cases; and the physics of one
small real model traced for an H200."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.fx as fx

from benchmarks import sim_timeline as tl
from benchmarks import simulate as sim

c10d = torch.ops._c10d_functional
aten = torch.ops.aten


class Builder:
    """An FX graph built by hand: meta tensors as values, durations by node name."""

    def __init__(self):
        self.graph = fx.Graph()
        self.compute: dict[str, float] = {}
        self.comm: dict[str, float] = {}

    def _node(self, target, args, val, name):
        node = self.graph.call_function(target, args)
        node.name = name
        node.meta["val"] = val
        return node

    def input(self, name, numel, dtype=torch.bfloat16):
        node = self.graph.placeholder(name)
        node.meta["val"] = torch.empty(numel, dtype=dtype, device="meta")
        return node

    def compute_node(self, name, ms, *inputs, numel=1, dtype=torch.float32):
        """A kernel of `ms` reading `inputs`, writing `numel` elements."""
        self.compute[name] = ms
        return self._node(aten.cat.default, (list(inputs),), torch.empty(numel, dtype=dtype, device="meta"), name)

    def all_gather(self, name, ms, shard, ranks, group):
        self.comm[name] = ms
        val = shard.meta["val"]
        out = torch.empty(val.numel() * ranks, dtype=val.dtype, device="meta")
        return self._node(c10d.all_gather_into_tensor.default, (shard, ranks, group), out, name)

    def wait(self, name, collective):
        return self._node(c10d.wait_tensor.default, (collective,), collective.meta["val"], name)

    def view(self, name, src, start, length):
        return self._node(aten.narrow.default, (src, 0, start, length),
                          src.meta["val"].narrow(0, start, length), name)

    def output(self, *nodes):
        self.graph.output(tuple(nodes))

    def run(self) -> tl.StepRun:
        return tl.run_step([("forward", self.graph)], lambda n: self.compute[n.name], lambda n: self.comm[n.name])


def test_two_collectives_hidden_behind_compute():
    b = Builder()
    x = b.input("x", 8)
    ag1 = b.all_gather("ag1", 2.0, x, 4, "g")  # issued at 0: runs 0-2
    ag2 = b.all_gather("ag2", 3.0, x, 4, "g")  # issued at 0, the stream busy until 2: runs 2-5
    c1 = b.compute_node("c1", 4.0, x)  # 0-4
    c2 = b.compute_node("c2", 4.0, c1)  # 4-8
    w1, w2 = b.wait("w1", ag1), b.wait("w2", ag2)  # both ended by 8: no stall
    c3 = b.compute_node("c3", 1.0, c2, w1, w2)  # 8-9
    b.output(c3)
    step = b.run()
    assert step.step_ms == pytest.approx(9.0)
    assert step.compute_ms == pytest.approx(9.0)
    assert step.comm_ms == pytest.approx(5.0)
    assert step.exposed_comm_ms == pytest.approx(0.0)
    assert step.bound_ms == pytest.approx(9.0)
    runs = {c.node: c for c in step.collectives}
    assert (runs["ag1"].start_ms, runs["ag1"].end_ms) == pytest.approx((0.0, 2.0))
    assert (runs["ag2"].start_ms, runs["ag2"].end_ms) == pytest.approx((2.0, 5.0))
    assert runs["ag1"].stall_ms == runs["ag2"].stall_ms == 0.0


def test_a_wait_exposes_a_collective():
    b = Builder()
    x = b.input("x", 8)
    c1 = b.compute_node("c1", 1.0, x)  # 0-1
    ag = b.all_gather("ag", 5.0, c1, 4, "g")  # issued after c1: runs 1-6
    c2 = b.compute_node("c2", 2.0, x)  # 1-3
    w = b.wait("w", ag)  # the compute waits 3-6
    c3 = b.compute_node("c3", 1.0, w, c2)  # 6-7
    b.output(c3)
    step = b.run()
    assert step.step_ms == pytest.approx(7.0)
    assert step.compute_ms == pytest.approx(4.0)
    assert step.comm_ms == pytest.approx(5.0)
    assert step.exposed_comm_ms == pytest.approx(3.0)
    assert step.bound_ms == pytest.approx(5.0)
    (run,) = step.collectives
    assert (run.issue_ms, run.start_ms, run.end_ms, run.stall_ms) == pytest.approx((1.0, 1.0, 6.0, 3.0))
    assert (run.position, run.wait_node) == (2, "w")


@pytest.mark.parametrize("groups, step_ms", [(("g0", "g1"), 5.0), (("g0", "g0"), 9.0)])
def test_two_process_groups_run_in_parallel(groups, step_ms):
    b = Builder()
    x = b.input("x", 8)
    a = b.all_gather("a", 4.0, x, 4, groups[0])
    c = b.all_gather("c", 4.0, x, 4, groups[1])
    wa, wc = b.wait("wa", a), b.wait("wc", c)
    out = b.compute_node("out", 1.0, wa, wc)
    b.output(out)
    step = b.run()
    # Two streams: both run 0-4, then the compute 4-5. One stream: 0-4, 4-8, then 8-9.
    assert step.step_ms == pytest.approx(step_ms)
    assert step.comm_ms == pytest.approx(4.0 if groups[0] != groups[1] else 8.0)
    assert step.exposed_comm_ms == pytest.approx(step_ms - 1.0)
    assert sorted(step.comm_by_group.values()) == pytest.approx([4.0, 4.0] if groups[0] != groups[1] else [8.0])


def test_peak_memory_of_a_gathered_bucket():
    # Two bf16 shards of 100 and 300 elements (200 + 600 bytes) packed by a copy-in
    # (800 bytes), all-gathered over 4 ranks (3200 bytes), read as two views by two
    # consumers writing 1000 f32 elements each (4000 bytes).
    b = Builder()
    s1, s2 = b.input("s1", 100), b.input("s2", 300)
    packed = b.compute_node("copy_in", 0.1, s1, s2, numel=400, dtype=torch.bfloat16)
    ag = b.all_gather("ag", 1.0, packed, 4, "g")
    w = b.wait("w", ag)
    v1, v2 = b.view("v1", w, 0, 400), b.view("v2", w, 400, 1200)
    u1 = b.compute_node("u1", 1.0, v1, numel=1000)
    u2 = b.compute_node("u2", 1.0, v2, numel=1000)
    b.output(u1, u2)
    peak, at, profile = tl.memory_profile(b.graph)
    inputs = 200 + 600
    # The copy-in's buffer lives until the wait; the gathered buffer until its last
    # view's consumer; views cost nothing; outputs stay.
    assert profile == [inputs, inputs, inputs + 800, inputs + 800 + 3200, inputs + 800 + 3200,
                       inputs + 3200, inputs + 3200, inputs + 3200 + 4000, inputs + 3200 + 8000,
                       inputs + 8000]
    assert peak == inputs + 3200 + 8000
    assert [n.name for n in b.graph.nodes][at] == "u2"
    assert b.run().peak_bytes == peak


def test_items_of_a_copy_out_are_freed_each_after_its_own_last_use():
    # A merged all-reduce's result (1000 f32: 4000 bytes) copied out into two new
    # members of 900 and 100 elements (3600 + 400 bytes): the big one is read at
    # once, the small one at the end. Inductor frees each MultiOutput buffer on its
    # own; a split's items (views) would keep the whole buffer instead.
    import bucketing.ops  # noqa: F401 (registers the copy-out op)

    b = Builder()
    x = b.input("x", 1000, torch.float32)
    ar = b._node(c10d.all_reduce.default, (x, "sum", "g"), torch.empty(1000, device="meta"), "ar")
    b.comm["ar"] = 1.0
    w = b.wait("w", ar)
    members = [torch.empty(900, device="meta"), torch.empty(100, device="meta")]
    out = b._node(torch.ops.bucketing_ops.copy_out.default, (w, 1, [0, 3600], [3600, 400], "float32,float32",
                                                             [900, 100], [1, 1]), members, "copy_out")
    big, small = (b._node(operator.getitem, (out, i), members[i], f"m{i}") for i in range(2))
    u1 = b.compute_node("u1", 1.0, big, numel=10)  # 40 bytes
    u2 = b.compute_node("u2", 1.0, u1, numel=10)
    u3 = b.compute_node("u3", 1.0, u2, small, numel=10)
    b.output(u3)
    peak, at, profile = tl.memory_profile(b.graph, free_inputs=True)
    names = [n.name for n in b.graph.nodes]
    live = dict(zip(names, profile))
    # x lives to the wait, the merged result to the copy-out, the members from their
    # getitems; after u1 only the small member, u1 and u2 remain (the big one freed
    # after u1, not held until the small one's last use).
    assert live["ar"] == 4000 + 4000 and live["copy_out"] == 4000
    assert live["m1"] == 3600 + 400
    assert live["u2"] == 400 + 40 + 40
    assert peak == 8000 and names[at] == "ar"


def test_inputs_of_a_later_graph_are_freed_after_their_last_use():
    fw = Builder()
    p = fw.input("p", 1000)  # the caller's parameter shard: 2000 bytes, held throughout
    act = fw.compute_node("act", 1.0, p, numel=500)  # 2000 bytes saved for the backward
    fw.output(act)
    bw = Builder()
    saved, p2 = bw.input("act", 500, torch.float32), bw.input("p", 1000)
    g = bw.compute_node("g", 1.0, saved, p2, numel=100)
    h = bw.compute_node("h", 1.0, g, numel=100)
    bw.output(h)
    durations = {**fw.compute, **bw.compute}
    step = tl.run_step([("forward", fw.graph), ("backward", bw.graph)], lambda n: durations[n.name],
                       lambda n: 0.0)
    assert [g.peak_bytes for g in step.graphs] == [2000 + 2000, 2000 + 2000 + 400]
    # The backward frees `act` after `g`: then p (held), g and h.
    _, _, profile = tl.memory_profile(bw.graph, free_inputs=True, held=frozenset({"p"}), held_bytes=2000)
    assert profile[-2] == 2000 + 400 + 400
    assert step.step_ms == pytest.approx(3.0)


@pytest.mark.parametrize("argv, parameter", [
    (["--model", "llama3-9b", "--world-size", "8"], "--model"),
    (["--model", "llama3-8b", "--world-size", "8", "--passes", "project,nope"], "--passes"),
    (["--model", "llama3-8b", "--world-size", "8", "--gpu", "v100"], "--gpu"),
    (["--model", "llama3-8b", "--world-size", "8", "--mesh", "2by4"], "--mesh"),
    (["--model", "llama3-8b", "--world-size", "8", "--ac", "some"], "--ac"),
    (["--model", "llama3-8b", "--world-size", "8", "--comm-model", "guess"], "--comm-model"),
])
def test_unknown_names_fail_naming_the_parameter(argv, parameter, capsys):
    with pytest.raises(SystemExit) as exc:
        sim.main(argv)
    assert exc.value.code == 2
    assert parameter in capsys.readouterr().err


@pytest.mark.parametrize("kwargs, parameter", [
    ({"model": "gpt-17"}, "--model"),
    ({"model": "llama3-8b", "passes": ["unbucketed", "bucket-everything"]}, "--passes"),
    ({"model": "llama3-8b", "gpu": "tpu"}, "--gpu"),
    ({"model": "llama3-8b", "ac": "half"}, "--ac"),
    ({"model": "llama3-8b", "comm_model": "guess"}, "--comm-model"),
    ({"model": "llama3-8b", "compute_efficiency": 0.0}, "--compute-efficiency"),
])
def test_the_api_raises_naming_the_parameter(kwargs, parameter):
    with pytest.raises(ValueError, match=parameter):
        sim.simulate(world_sizes=[8], **kwargs)


def test_physics_of_a_small_llama3_on_h200(fake_world):
    """llama3-8b's sizes cut to one block at 512 tokens, SimpleFSDP, every default pass."""
    from benchmarks import sim_trace

    try:
        sim.check_torch()
    except RuntimeError as e:
        pytest.skip(str(e))
    world = fake_world
    (result,) = sim.simulate("llama3-8b", [world], "h200", sim.DEFAULT_PASSES, layers=1, seq=512)
    steps = {p.name: p.step for p in result.passes}
    program = result.traced.program
    figures = sim_trace.link_figures(sim_trace.gpu("h200"))
    assert program.parameters == 128256 * 4096 * 2 + 218_112_000 + 4096  # embeddings, a block, the final norm
    base = steps["unbucketed"]
    # 6 x parameters x tokens at the dense bf16 peak, and at most 4 times that.
    ideal_ms = 6 * program.parameters * program.tokens / (figures["bf16_tflops"] * 1e12) * 1e3
    assert ideal_ms <= base.compute_ms <= 4 * ideal_ms
    # Every parameter byte all-gathered and reduce-scattered at the fastest link the preset has.
    fastest = max(figures["intra_node_gbps"], figures["inter_node_gbps"]) * 1e9
    moved = 2 * program.parameter_bytes
    assert base.comm_ms >= moved / fastest * 1e3
    assert base.exposed_comm_ms > 0
    for name, step in steps.items():
        assert step.step_ms >= step.bound_ms * (1 - 1e-9), name
        assert step.compute_ms >= base.compute_ms * (1 - 1e-9), name
    # Bucketing merged something and the estimators never fell back.
    assert sum(c.kind == "all_gather" for c in steps["project-merge_all"].collectives) \
        < sum(c.kind == "all_gather" for c in base.collectives)
    assert result.estimator.failures == {}
    rows = [p.row("llama3-8b", "h200", world) for p in result.passes]
    assert all(set(r) == set(sim.KEYS) for r in rows)


def test_the_pass_reads_torchs_estimates_for_the_simulated_gpu():
    """What the default policy plans with on CUDA (bucketing/costs.py), for an H200
    in nodes of 8: a collective's latency grows with the group, so merging saves
    more across nodes; a copy costs its bytes twice at HBM bandwidth. (torch < 2.13's
    NCCL model is ring-only and saves less across nodes than a copy costs.)"""
    from benchmarks import sim_trace
    from bucketing.collectives import ALL_GATHER
    from bucketing.plan.costs import device_costs

    with sim_trace.estimation(sim_trace.gpu("h200")):
        costs = device_costs(torch.device("cuda"))
        assert costs is not None
        block = 436 * 2**20  # one llama3-8b block, bf16, gathered
        within, across, wide = (costs.collective_ms(ALL_GATHER, block, n) for n in (8, 64, 512))
        assert 0 < within < across < wide
        saves = [costs.merge_saves_ms(ALL_GATHER, block, block, n) for n in (8, 64, 512)]
        assert 0 < saves[0] < saves[1] < saves[2]
        # 4.8 TB/s: 4.8 GB read and written once each takes 2 ms.
        assert costs.copy_ms(4.8e9) == pytest.approx(2.0, rel=0.01)
        # Within a node merging a gathered block saves less than copying it costs.
        assert saves[0] < costs.copy_ms(block)


def test_the_pass_charges_no_compute_for_nodes_without_a_kernel():
    """A split's chunks (how an uneven shard is padded) and their getitems, views and
    collectives run no compute kernel: on the simulated H200 the pass's compute before
    a position counts none of them (torch's roofline would charge each getitem the
    split's whole input), as the simulator's timeline does not."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    from benchmarks import sim_trace
    from bucketing.plan.costs import device_costs
    from bucketing.plan.timeline import Timeline

    from .graphs import ag

    try:
        sim.check_torch()  # torch < 2.13 has no roofline: FLOPs alone, none for these nodes
    except RuntimeError as e:
        pytest.skip(str(e))

    def f(x, w, shard):
        chunks = x.split(64)
        y = torch.cat([c * 2 for c in chunks[:2]])
        return y @ w, ag(shard, "some-group")

    with sim_trace.estimation(sim_trace.gpu("h200")):
        with FakeTensorMode():
            args = [torch.empty(s, device="cuda") for s in ((1024, 4096), (4096, 4096), (4096,))]
            gm = make_fx(f)(*args)
        costs = device_costs(torch.device("cuda"))
        timeline = Timeline(gm.graph)
        before = costs.compute_ms_before(timeline)
    charged = {node: before[i + 1] - before[i] for i, node in enumerate(timeline.nodes)}
    free = [n for n in timeline.nodes if tl.is_free(n)]
    assert {n.target for n in free} >= {operator.getitem, torch.ops.aten.split.Tensor}, free
    assert all(charged[n] == 0 for n in free), {n.name: charged[n] for n in free}
    matmul = next(n for n in timeline.nodes if n.target is torch.ops.aten.mm.default)
    assert charged[matmul] > 0


def test_a_node_of_symbolic_shape_has_a_hashable_signature():
    """benchmarks.published traces graphs with symbolic sizes: the estimate cache keys them by expression."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    from benchmarks.simulate import _signature

    gm = make_fx(lambda x: (x * 2).sum(0), tracing_mode="symbolic")(torch.randn(4, 3))
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    keys = {_signature(n) for n in nodes}  # raised "unhashable type: non-nested SymInt"
    assert len(keys) == len(nodes)
    assert any("s" in str(k) for k in keys), keys  # the size is symbolic, kept as its expression
