"""The locality policy on traced graphs: locality, overlap, prefetch order, memory budget, report."""

import copy

import torch

import bucketing.core as bc
from bucketing.plan.memory import estimate_peak_bytes

from .graphs import StandInEstimates, ag, ar, trace

c10d = torch.ops._c10d_functional
f32 = torch.float32
NO_LOCALITY = 1e30  # a window no graph here reaches


def _layers(group_name, n_layers, dim):
    """FSDP-style forward: each layer gathers its weight and multiplies by it."""

    def f(x, *weights):
        for w in weights:
            x = x @ ag(w, group_name).t()
        return x

    specs = [((2, dim), f32)] + [((dim // 4, dim), f32)] * n_layers
    return trace(f, *specs)


def test_memory_budget_splits_buckets_and_bounds_the_estimated_peak(group_name):
    gm = _layers(group_name, 8, 64)
    weight_bytes = 64 * 64 * 4  # one gathered weight
    base = estimate_peak_bytes(gm.graph)

    merged = copy.deepcopy(gm)
    plan_all = bc.bucket_collectives(merged, policy="merge_all")
    assert [len(b.members) for b in plan_all.buckets] == [8]
    # Gathering the whole model at once costs about seven more weights.
    assert estimate_peak_bytes(merged.graph) > base + 6 * weight_bytes

    budget = 5 * weight_bytes
    bounded = copy.deepcopy(gm)
    plan = bc.bucket_collectives(bounded, locality_flops=NO_LOCALITY, memory_budget_mb=budget / 2**20)
    sizes = [len(b.members) for b in plan.buckets]
    assert len(sizes) > 1 and sum(sizes) == 8, sizes  # split, yet every weight still merged
    # The budget bounds what merging holds; the copy-out's moment, when a
    # bucket's result and its members exist together, adds one bucket at most.
    largest = max(sizes) * weight_bytes
    assert estimate_peak_bytes(bounded.graph) <= base + budget + largest
    assert all(b.extra_peak_bytes <= budget for b in plan.buckets)


def test_default_budget_is_one_bucket_cap(group_name):
    gm = _layers(group_name, 8, 64)
    weight_bytes = 64 * 64 * 4
    cap_mb = 2 * weight_bytes / 2**20
    plan = bc.bucket_collectives(copy.deepcopy(gm), locality_flops=NO_LOCALITY, bucket_cap_mb=cap_mb)
    explicit = bc.bucket_collectives(copy.deepcopy(gm), locality_flops=NO_LOCALITY, bucket_cap_mb=cap_mb,
                                     memory_budget_mb=cap_mb)
    assert [b.members for b in plan.buckets] == [b.members for b in explicit.buckets]


def test_overlap_rule_keeps_a_late_input_out_of_a_bucket_with_a_window(group_name):
    def f(x, w):
        h = x @ x  # heavy compute: hides the gather of w
        y = h + ag(w, group_name)[:8]
        z = ag(h, group_name)  # its input exists only after the matmul
        return y, z

    gm = trace(f, ((8, 8), f32), ((2, 8), f32))
    assert len(bc.bucket_collectives(copy.deepcopy(gm), policy="merge_all").buckets) == 1
    # The 8x8 matmul (1,024 FLOPs) is more than the window, so it can hide a gather.
    plan = bc.bucket_collectives(copy.deepcopy(gm), locality_flops=100)
    assert plan.buckets == [], "merging would wait for the matmul before the gather of w could start"
    # Where the window says the matmul is too small to hide anything, they merge.
    assert len(bc.bucket_collectives(copy.deepcopy(gm), locality_flops=2000).buckets) == 1


def test_next_bucket_is_prefetched_while_the_previous_one_is_used(group_name):
    def f(x, *params):
        for norm, w in zip(params[::2], params[1::2]):
            x = (x * ag(norm, group_name)) @ ag(w, group_name).t()
        return x

    layers = 4
    gm = trace(f, ((2, 16), f32), *[((4,), f32), ((4, 16), f32)] * layers)
    plan = bc.bucket_collectives(gm, locality_flops=0)
    assert [len(b.members) for b in plan.buckets] == [2] * layers
    position = {n.name: i for i, n in enumerate(gm.graph.nodes)}
    matmuls = [i for i, n in enumerate(gm.graph.nodes) if n.target is torch.ops.aten.mm.default]
    issued = [position[b.collective] for b in plan.buckets]
    # Bucket k+1 starts before layer k's matmul (so it can hide behind it), but
    # not before layer k-1's: at most two buckets in flight.
    for k in range(1, layers):
        assert issued[k] < matmuls[k - 1], (issued, matmuls)
        if k >= 2:
            assert issued[k] > matmuls[k - 2], (issued, matmuls)


def test_with_estimates_three_buckets_are_in_flight_and_nothing_waits_to_issue(group_name, monkeypatch):
    import bucketing.plan.estimates as estimates

    monkeypatch.setattr(estimates, "device_costs", lambda device: StandInEstimates())

    def f(x, extra, head, *params):
        for norm, w in zip(params[::2], params[1::2]):
            x = (x * ag(norm, group_name)) @ ag(w, group_name).t()
        return x + ar(extra, group_name).sum() + ag(head.to(torch.bfloat16), group_name).float().sum()

    layers = 6
    specs = [((2, 16), f32), ((4,), f32), ((4,), f32)] + [((4,), f32), ((4, 16), f32)] * layers
    gm = trace(f, *specs)
    plan = bc.bucket_collectives(gm, locality_flops=0)
    assert [len(b.members) for b in plan.buckets if len(b.members) > 1] == [2] * layers
    nodes = list(gm.graph.nodes)
    position = {n.name: i for i, n in enumerate(nodes)}
    matmuls = [i for i, n in enumerate(nodes) if n.target is torch.ops.aten.mm.default]
    issued = [position[b.collective] for b in plan.buckets]
    # The first three buckets go before any compute; bucket k before layer k-3's
    # matmul but after layer k-4's: four buckets gathered at most.
    assert max(issued[:3]) < matmuls[0], (issued, matmuls)
    for k in range(3, layers):
        assert issued[k] < matmuls[k - 3], (issued, matmuls)
        if k >= 4:
            assert issued[k] > matmuls[k - 4], (issued, matmuls)
    # The all-reduce left alone is issued as soon as its input exists, not where the graph had it.
    all_reduce = next(i for i, n in enumerate(nodes) if n.target is c10d.all_reduce.default)
    assert all_reduce < matmuls[0], (all_reduce, matmuls)
    # The head's all-gather, alone, is prefetched as a seventh bucket would be
    # (once layer 3 uses its bucket), together with the cast that feeds it.
    head = next(i for i, n in enumerate(nodes) if n.target is c10d.all_gather_into_tensor.default
                and n.args[0].target is torch.ops.aten._to_copy.default)
    assert matmuls[2] < head < matmuls[3], (head, matmuls)
    # A collective estimated to take long goes earlier still: twice its time of
    # compute before its first use (30 ms each here, a millisecond a node).
    monkeypatch.setattr(estimates, "device_costs", lambda device: StandInEstimates(latency_ms=30.0))
    gm = trace(f, *specs)
    bc.bucket_collectives(gm, locality_flops=0)
    nodes = list(gm.graph.nodes)
    matmuls = [i for i, n in enumerate(nodes) if n.target is torch.ops.aten.mm.default]
    gathers = [i for i, n in enumerate(nodes) if n.target is c10d.all_gather_into_tensor.default]
    assert max(gathers) < matmuls[0], (gathers, matmuls)
    # Without estimates (the CPU): one bucket ahead, and the all-reduce where it was.
    gm = trace(f, *specs)
    monkeypatch.setattr(estimates, "device_costs", lambda device: None)
    bc.bucket_collectives(gm, locality_flops=0)
    nodes = list(gm.graph.nodes)
    matmuls = [i for i, n in enumerate(nodes) if n.target is torch.ops.aten.mm.default]
    assert next(i for i, n in enumerate(nodes) if n.target is c10d.all_reduce.default) > matmuls[-1]


def test_with_estimates_a_member_whose_copies_cost_more_than_merging_saves_stays_alone(group_name, monkeypatch):
    import bucketing.plan.estimates as estimates

    # Merging saves 10 us; copying a byte in and out costs 1 ns: the 48 bytes a
    # (4,) f32 gather moves cost 0.05 us, the 192 KiB of a (256, 64) one 197 us.
    monkeypatch.setattr(estimates, "device_costs", lambda device: StandInEstimates(0.01, 0.0, 1e-6))

    def f(*params):
        return [ag(p, group_name) * 2 for p in params]

    small, big = ((4,), f32), ((256, 64), f32)
    gm = trace(f, small, big, small, big, small)
    plan = bc.bucket_collectives(gm, policy="locality", locality_flops=NO_LOCALITY)
    assert [len(b.members) for b in plan.buckets] == [3]
    reasons = [s.reason for s in plan.skipped]
    assert len(reasons) == 2 and all("copy-in and copy-out cost" in r for r in reasons), reasons
    # merge_all is the caps alone, estimates or not.
    gm = trace(f, small, big, small, big, small)
    assert [len(b.members) for b in bc.bucket_collectives(gm, policy="merge_all").buckets] == [5]


def test_plan_report_has_positions_overlap_and_memory(group_name):
    gm = _layers(group_name, 4, 16)
    plan = bc.bucket_collectives(gm, locality_flops=NO_LOCALITY)
    (b,) = plan.buckets
    assert b.issued_at <= b.first_use <= b.last_use
    assert b.extra_peak_bytes > 0
    assert "overlap" in bc.explain(plan) and "est. peak +" in bc.explain(plan)


def test_buckets_split_for_memory_still_fit_the_cap_of_their_new_index(group_name):
    gm = _layers(group_name, 8, 64)
    weight_bytes = 64 * 64 * 4
    seen = []

    def cap(i):  # generous for bucket 0, then one weight per bucket
        seen.append(i)
        return (8 if i == 0 else 1) * weight_bytes / 2**20

    plan = bc.bucket_collectives(gm, locality_flops=NO_LOCALITY, bucket_cap_mb=cap,
                                 memory_budget_mb=5 * weight_bytes / 2**20)
    assert plan.buckets, "the memory budget leaves some merging"
    for b in plan.buckets:
        assert b.nbytes <= cap(b.index) * 2**20, (b.index, b.nbytes)
    indices = [b.index for b in plan.buckets]
    assert indices == sorted(set(indices)), indices  # graph order, no index twice


def test_the_items_of_a_split_add_no_bytes():
    """A gradient split into one chunk per rank (as a reduce-scatter's input is) holds
    the gradient's bytes once, not once per chunk; a chunk copied out is new memory."""
    import torch.fx as fx

    def f(x):
        chunks = torch.ops.aten.split.Tensor(torch.ops.aten.mul.Tensor(x, 2.0), 16)
        kept = torch.ops.aten.clone.default(chunks[0])
        return [torch.ops.aten.sum.default(c) for c in chunks[1:]] + [kept]

    gm = fx.experimental.proxy_tensor.make_fx(f)(torch.randn(64, 64))
    grad_bytes, chunk_bytes = 64 * 64 * 4, 16 * 64 * 4
    peak = estimate_peak_bytes(gm.graph)
    assert grad_bytes + chunk_bytes <= peak < grad_bytes + 2 * chunk_bytes, peak
