"""Seeded ops are no barrier, module blocks shape buckets, and every collective
left alone is listed with its reason (plan, explain, log)."""

import copy
import logging

import torch
import torch.nn.functional as F

import bucketing.core as bc

from .graphs import ag, rs, trace

f32, bf16 = torch.float32, torch.bfloat16
c10d = torch.ops._c10d_functional


def _alone(plan) -> dict[str, str]:
    return {s.node_name: s.reason for s in plan.skipped}


def test_attention_between_two_all_gathers_is_no_barrier(group_name):
    def f(q, a, b):
        x = ag(a, group_name)
        attn = F.scaled_dot_product_attention(q, q, q)  # tagged nondeterministic_seeded
        return attn, x, ag(b, group_name)

    gm = trace(f, ((1, 2, 4, 8), f32), ((4,), f32), ((4,), f32))
    sdpa = [n for n in gm.graph.nodes if "scaled_dot_product" in str(n.target)]
    assert sdpa and torch.Tag.nondeterministic_seeded in sdpa[0].target.tags
    plan = bc.bucket_collectives(gm, policy="merge_all")
    assert [len(b.members) for b in plan.buckets] == [2]
    gm.graph.lint()


def _rng_graph(group_name, second_seeded: bool):
    """ag(a) feeds a random draw r1; b's all-gather reads r2, drawn after r1."""

    def f(a, c):
        r1 = torch.bernoulli(ag(a, group_name).sigmoid())
        r2 = torch.bernoulli(c) if second_seeded else c * 2
        return r1, ag(r2, group_name)

    return trace(f, ((4,), f32), ((4,), f32))


def test_seeded_ops_keep_their_order_so_a_bucket_cannot_reorder_them(group_name):
    # Merging would move r1 (a user of the bucket) after r2 (an input of it).
    gm = _rng_graph(group_name, second_seeded=True)
    plan = bc.bucket_collectives(gm, policy="merge_all")
    assert plan.buckets == []
    assert "depends on" in " ".join(_alone(plan).values())
    # Without the second draw nothing ties r1 to b's input: they merge.
    free = _rng_graph(group_name, second_seeded=False)
    assert [len(b.members) for b in bc.bucket_collectives(free, policy="merge_all").buckets] == [2]
    draws = [n.name for n in free.graph.nodes if n.target is torch.ops.aten.bernoulli.default]
    assert draws == ["bernoulli"]


def _blocks(group_name):
    """Three 'layers' of two gathers each, every collective tagged with a module path."""

    def f(x, *ws):
        for w in ws:
            x = x @ ag(w, group_name).t()
        return x

    gm = trace(f, ((2, 8), f32), *[((2, 8), f32)] * 6)
    gathers = [n for n in gm.graph.nodes if n.target is c10d.all_gather_into_tensor.default]
    for i, node in enumerate(gathers):
        path = f"L['self'].layers.{i // 2}.mlp.w{i % 2}"
        node.meta["nn_module_stack"] = {path: (path, torch.nn.Linear)}
    return gm


def test_buckets_follow_module_blocks_whatever_the_compute(group_name):
    # A window of 0 FLOPs would split every matmul apart; the blocks hold.
    plan = bc.bucket_collectives(_blocks(group_name), locality_flops=0)
    assert [len(b.members) for b in plan.buckets] == [2, 2, 2]
    assert plan.skipped == []
    # merge_all ignores blocks.
    assert [len(b.members) for b in bc.bucket_collectives(_blocks(group_name), policy="merge_all").buckets] == [6]


def test_every_reason_for_staying_alone_is_listed(group_name):
    # No other collective of its key.
    gm = trace(lambda a, b: (ag(a, group_name), rs(b, group_name)), ((4,), f32), ((8,), f32))
    assert "no other collective of its key" in _alone(bc.bucket_collectives(gm))["all_gather_into_tensor"]

    # Dependency: b's input is a's result.
    gm = trace(lambda a: ag(ag(a, group_name)[:4], group_name), ((4,), f32))
    reasons = _alone(bc.bucket_collectives(gm))
    assert "depends on" in reasons["all_gather_into_tensor_1"], reasons
    assert "depends on" in reasons["all_gather_into_tensor"], reasons

    # Cap: two gathers of 4 * 16 * 4 bytes each under a cap of one.
    gm = trace(lambda a, b: (ag(a, group_name), ag(b, group_name)), ((16,), f32), ((16,), f32))
    reasons = _alone(bc.bucket_collectives(gm, bucket_cap_mb=4 * 16 * 4 / 2**20))
    assert "is full" in reasons["all_gather_into_tensor"], reasons

    # Count cap.
    gm = trace(lambda *xs: tuple(ag(x, group_name) for x in xs), *[((4,), f32)] * 3)
    reasons = _alone(bc.bucket_collectives(gm, max_bucket_count=2))
    assert "max_bucket_count=2" in reasons["all_gather_into_tensor_2"], reasons

    # Locality window: a matmul between the two first uses.
    def layers(x, a, b):
        x = x @ ag(a, group_name).t()
        return x @ ag(b, group_name).t()

    gm = trace(layers, ((8, 8), f32), ((2, 8), f32), ((2, 8), f32))
    reasons = _alone(bc.bucket_collectives(gm, locality_flops=10))
    assert "locality window" in reasons["all_gather_into_tensor_1"], reasons

    # Overlap window (the case of test_policy's overlap test).
    def late(x, w):
        h = x @ x
        return h + ag(w, group_name)[:8], ag(h, group_name)

    gm = trace(late, ((8, 8), f32), ((2, 8), f32))
    reasons = _alone(bc.bucket_collectives(gm, locality_flops=100))
    assert "overlap window" in " ".join(reasons.values()), reasons

    # Barrier: an in-place write between the two gathers.
    def mutate(a, b, buf):
        x = ag(a, group_name)
        buf.add_(1)
        return x, ag(b, group_name)

    gm = trace(mutate, ((4,), f32), ((4,), f32), ((4,), f32))
    assert any(n.target is torch.ops.aten.add_.Tensor for n in gm.graph.nodes)
    reasons = _alone(bc.bucket_collectives(gm, policy="merge_all"))
    assert "side-effecting node" in reasons["all_gather_into_tensor_1"], reasons

    # Memory budget: eight layers' weights, a budget of about two.
    def deep(x, *ws):
        for w in ws:
            x = x @ ag(w, group_name).t()
        return x

    gm = trace(deep, ((2, 64), f32), *[((16, 64), f32)] * 8)
    plan = bc.bucket_collectives(gm, locality_flops=1e30, memory_budget_mb=2 * 64 * 64 * 4 / 2**20)
    assert any("memory budget" in r for r in _alone(plan).values()), bc.explain(plan)


def test_alone_collectives_reach_explain_and_the_log(group_name, caplog):
    gm = trace(lambda a: ag(ag(a, group_name)[:4], group_name), ((4,), f32))
    text = bc.explain(copy.deepcopy(gm))
    assert "left all_gather_into_tensor_1: its input depends on" in text, text
    with caplog.at_level(logging.INFO, logger="bucketing"):
        bc.bucket_collectives(gm)
    assert "left all_gather_into_tensor_1" in caplog.text
