"""Planning on traced graphs: keys, caps, count caps, dependencies, determinism."""

import torch

import bucketing.core as bc
from bucketing.collectives import find_collectives
from bucketing.options import make_options
from bucketing.plan import make_policy, plan

from .graphs import WORLD, ag, ar, c10d, rs, trace

bf16, f32 = torch.bfloat16, torch.float32


def _plan(gm, **options):
    opts = make_options(**options)
    found, _ = find_collectives(gm.graph, opts.collectives, opts.fuse_casts)
    planned = plan(gm.graph, found, make_policy(opts, found[0].node.meta["val"].device))
    buckets = planned.buckets + [a.bucket for a in planned.alone if a.unjoined]
    buckets.sort(key=lambda b: planned.whens[b.members[0].node].position)
    kept_out = [a.collective.node.name for a in planned.alone if not a.unjoined]
    return [[m.node.name for m in b.members] for b in buckets], kept_out


def test_multidtype_all_gathers_share_a_key(group_name):
    gm = trace(lambda a, b, c: (ag(a, group_name), ag(b, group_name), ag(c, group_name)),
               ((3,), bf16), ((5,), f32), ((2,), bf16))
    buckets, _ = _plan(gm)
    assert len(buckets) == 1 and len(buckets[0]) == 3
    per_dtype, _ = _plan(gm, multidtype=False)
    assert sorted(map(len, per_dtype)) == [1, 2]  # bf16 members merged across the f32 one


def test_reductions_never_mix_dtypes_or_ops(group_name):
    gm = trace(
        lambda a, b, c, d: (rs(a, group_name), rs(b, group_name), rs(c, group_name, "max"), ar(d, group_name)),
        ((8,), bf16), ((8,), f32), ((8,), bf16), ((8,), bf16),
    )
    buckets, _ = _plan(gm)
    assert sorted(map(len, buckets)) == [1, 1, 1, 1]


def test_cap_is_inclusive_and_one_byte_less_splits(group_name):
    # Four f32 all-gathers of 16 elements: 16 * 4 * WORLD bytes each, gathered.
    gm = trace(lambda *xs: tuple(ag(x, group_name) for x in xs), *[((16,), f32)] * 4)
    total = 4 * 16 * 4 * WORLD
    exact, _ = _plan(gm, bucket_cap_mb=total / 2**20)
    assert list(map(len, exact)) == [4]
    short, _ = _plan(gm, bucket_cap_mb=(total - 1) / 2**20)
    assert list(map(len, short)) == [3, 1]


def test_callable_cap_gets_the_bucket_index(group_name):
    gm = trace(lambda *xs: tuple(ag(x, group_name) for x in xs), *[((16,), f32)] * 6)
    seen = []
    one = 16 * 4 * WORLD

    def cap(i):
        seen.append(i)
        return (one if i == 0 else 2 * one) / 2**20

    buckets, _ = _plan(gm, bucket_cap_mb=cap)
    assert list(map(len, buckets)) == [1, 2, 2, 1]
    assert sorted(set(seen)) == [0, 1, 2, 3]


def test_member_over_the_cap_stays_alone_and_keeps_the_bucket_open(group_name):
    gm = trace(lambda a, b, c: (ag(a, group_name), ag(b, group_name), ag(c, group_name)),
               ((4,), f32), ((4096,), f32), ((4,), f32))
    buckets, skipped = _plan(gm, bucket_cap_mb=1024 * WORLD / 2**20)
    assert list(map(len, buckets)) == [2]
    assert skipped == ["all_gather_into_tensor_1"]


def test_a_full_bucket_takes_no_later_member_that_would_fit_its_room(group_name):
    # Cap: three units. The first bucket (two units) refuses the second collective (three
    # units), which opens its own; the third (one unit) fits the first bucket's room, but
    # joining would issue the first bucket only once the third is ready.
    gm = trace(lambda a, b, c: (ag(a, group_name), ag(b, group_name), ag(c, group_name)),
               ((32,), f32), ((48,), f32), ((16,), f32))
    buckets, _ = _plan(gm, bucket_cap_mb=48 * 4 * WORLD / 2**20)
    assert buckets == [["all_gather_into_tensor"], ["all_gather_into_tensor_1"], ["all_gather_into_tensor_2"]]


def test_count_cap(group_name):
    gm = trace(lambda *xs: tuple(ag(x, group_name) for x in xs), *[((3,), f32)] * 5)
    buckets, _ = _plan(gm, max_bucket_count=2)
    assert list(map(len, buckets)) == [2, 2, 1]


def test_dependent_collective_is_not_merged(group_name):
    def f(a, b):
        x = ag(a, group_name)
        y = ag(b + x[:3], group_name)  # depends on x
        return x, y

    gm = trace(f, ((3,), f32), ((3,), f32))
    buckets, _ = _plan(gm)
    assert list(map(len, buckets)) == [1, 1]


def test_transitive_dependency_through_compute_is_seen(group_name):
    def f(a, b, c):
        x = ag(a, group_name)
        z = (x * 2).sum() + c.sum()
        y = ag(b + z, group_name)
        return y

    gm = trace(f, ((3,), f32), ((3,), f32), ((3,), f32))
    buckets, _ = _plan(gm)
    assert list(map(len, buckets)) == [1, 1]


def test_cross_bucket_cycle_is_refused(group_name):
    # a1 (all-gather) and b1 (all-reduce) open buckets; a2 depends on b1 and b2
    # depends on a1. Merging both pairs would make each bucket wait on the other.
    def f(p, q, r, s):
        a1 = ag(p, group_name)
        b1 = ar(q, group_name)
        a2 = ag(r + b1[:3], group_name)
        b2 = ar(s + a1[:3], group_name)
        return a2, b2

    gm = trace(f, ((3,), f32), ((3,), f32), ((3,), f32), ((3,), f32))
    buckets, _ = _plan(gm)
    # a2 may join a1's bucket, which then depends on b1's; b2 (reading a1) may not join
    # b1's and starts a bucket of its own.
    assert sorted(map(len, buckets)) == [1, 1, 2]
    bc.bucket_collectives(gm)
    gm.graph.lint()


def test_a_bucket_another_depends_on_stays_open(group_name):
    # HSDP's gradients: each all-reduce (over replicas) feeds a reduce-scatter
    # (over shards). The all-reduces' bucket stays open when the reduce-scatters'
    # bucket comes to read it: one bucket of each, the second after the first.
    def f(*grads):
        return tuple(rs(ar(g, group_name), group_name) for g in grads)

    gm = trace(f, *[((4 * WORLD,), f32)] * 4)
    buckets, _ = _plan(gm, policy="merge_all")
    assert [[name.split("_")[0] for name in b] for b in buckets] == [["all"] * 4, ["reduce"] * 4]
    plan = bc.bucket_collectives(gm, policy="merge_all")
    assert [(b.kind, len(b.members)) for b in plan.buckets] == [("all_reduce", 4), ("reduce_scatter", 4)]
    gm.graph.lint()


def test_a_dependency_through_another_bucket_is_refused(group_name):
    # r1 reads a1's result and shares a bucket with r2; a2 reads r2 only. Once
    # merged, r2's result waits on a1's bucket (through r1), so a2 may not join it.
    def f(p, q, s, t):
        a1 = ar(p, group_name)
        r1 = rs(a1, group_name)
        r2 = rs(q, group_name)
        a2 = ar(s + r2.repeat(WORLD), group_name)
        return r1, a2, t

    gm = trace(f, ((4 * WORLD,), f32), ((4 * WORLD,), f32), ((4 * WORLD,), f32), ((1,), f32))
    plan = bc.bucket_collectives(gm, policy="merge_all")
    assert [(b.kind, len(b.members)) for b in plan.buckets] == [("reduce_scatter", 2)]
    reasons = {s.node_name: s.reason for s in plan.skipped}
    assert reasons["all_reduce_1"] == ("its input depends on reduce_scatter_tensor's bucket, "
                                       "which depends on the open bucket's result"), reasons
    gm.graph.lint()


def test_non_adjacent_merge_across_other_groups_and_compute(group_name):
    import torch.distributed as dist

    other = dist.new_group(list(range(WORLD))).group_name

    def f(a, b, c, d):
        x = ag(a, group_name)
        u = ag(b, other)
        w = torch.sin(c)
        y = ag(d, group_name)
        return x, u, w, y

    gm = trace(f, ((3,), f32), ((3,), f32), ((3,), f32), ((3,), bf16))
    buckets, _ = _plan(gm)
    assert sorted(map(len, buckets)) == [1, 2]


def test_plan_is_deterministic(group_name):
    def f(*xs):
        return tuple(ag(x, group_name) if i % 3 else rs(x, group_name) for i, x in enumerate(xs))

    specs = [((8,), bf16 if i % 2 else f32) for i in range(24)]
    first = _plan(trace(f, *specs), max_bucket_count=3)[0]
    for _ in range(3):
        assert _plan(trace(f, *specs), max_bucket_count=3)[0] == first


def test_locality_policy_keeps_buckets_within_layers(group_name):
    # Three "layers": each gathers a weight used by a matmul. merge_all takes all
    # three at once; locality with no compute allowed inside a bucket gives one
    # bucket per layer.
    def f(x, w0, w1, w2, b0, b1, b2):
        for w, b in ((w0, b0), (w1, b1), (w2, b2)):
            x = x @ ag(w, group_name).t() + ag(b, group_name)
        return x

    specs = [((2, 8), f32)] + [((2, 8), f32)] * 3 + [((2,), f32)] * 3
    gm = trace(f, *specs)
    merge_all, _ = _plan(gm, policy="merge_all")
    assert sorted(map(len, merge_all)) == [6]
    # The default window is what a collective's latency is worth: these 2x8
    # matmuls are far below it, so the default merges like merge_all.
    assert _plan(gm)[0] == merge_all
    local, _ = _plan(gm, policy="locality", locality_flops=0)
    assert len([b for b in local if len(b) > 1]) >= 2
    # No bucket spans two layers' weights.
    weights = {"all_gather_into_tensor", "all_gather_into_tensor_2", "all_gather_into_tensor_4"}
    for bucket in local:
        assert len(weights & set(bucket)) <= 1, bucket


def test_exact_reductions_merge_reductions_only_on_groups_of_two(group_name):
    """A sum of 2 values is the same in any order; over more ranks a merged
    reduction may add in another order, so exact_reductions leaves it."""
    import torch.distributed as dist

    pair = dist.new_group([0, 1]).group_name

    def program(a, b, c, d, e, f, g, h):
        return (ag(a, group_name), ag(b, group_name),
                rs(c, group_name), rs(d, group_name),  # groups of 4
                ar(e, group_name), ar(f, group_name),
                rs(g, pair, world=2), ar(h, pair))  # groups of 2

    specs = [((8,), f32)] * 8
    plan = bc.bucket_collectives(trace(program, *specs), exact_reductions=True, policy="merge_all")
    assert plan.counts() == {"all_gather": 1}  # the pair's rs and ar are one each: nothing to merge with
    left = {s.node_name: s.reason for s in plan.skipped}
    assert sum("exact_reductions, group of 4" in r for r in left.values()) == 4, left

    def pairs_only(a, b, c, d):
        return rs(a, pair, world=2), rs(b, pair, world=2), ar(c, pair), ar(d, pair)

    plan = bc.bucket_collectives(trace(pairs_only, *specs[:4]), exact_reductions=True, policy="merge_all")
    assert plan.counts() == {"reduce_scatter": 1, "all_reduce": 1}
    assert "exact_reductions, group of 4" in str(bc.bucket_collectives(
        trace(program, *specs), exact_reductions=True))
    # Without the option the groups of 4 merge as before.
    assert bc.bucket_collectives(trace(program, *specs), policy="merge_all").counts() == \
        {"all_gather": 1, "reduce_scatter": 1, "all_reduce": 1}


def test_a_collective_with_several_waits_and_a_direct_reader_merges_and_each_reads_its_part(group_name):
    """Every wait of a member, and a node reading its result directly, read the member's part."""
    def program(a, b):
        r = c10d.reduce_scatter_tensor(a, "sum", WORLD, group_name)
        first, second = c10d.wait_tensor(r), c10d.wait_tensor(r)
        return first * 2, second + 1, rs(b, group_name)

    gm = trace(program, ((8, 3), f32), ((8,), f32))
    collective = next(n for n in gm.graph.nodes if n.target is c10d.reduce_scatter_tensor.default)
    waits = [u for u in collective.users]
    assert len(waits) == 2
    # A direct reader of the result (as a graph may hold after other passes).
    with gm.graph.inserting_after(waits[1]):
        direct = gm.graph.call_function(torch.ops.aten.neg.default, (collective,))
    direct.meta["val"] = collective.meta["val"]
    out = next(n for n in gm.graph.nodes if n.op == "output")
    out.args = ((*out.args[0], direct),)
    gm.recompile()
    plan = bc.bucket_collectives(gm)
    assert plan.counts() == {"reduce_scatter": 1}
    assert not plan.skipped
    readers = {n.target: n for n in gm.graph.nodes
               if n.target in (torch.ops.aten.mul.Tensor, torch.ops.aten.add.Tensor, torch.ops.aten.neg.default)}
    parts = {r.args[0] for r in readers.values()}
    assert len(parts) == 1, [r.format_node() for r in readers.values()]  # all three read one member output
    (part,) = parts
    assert part.target is torch.ops.aten.view.default
    assert part.meta["val"].shape == (2, 3)
    assert not any(n.target is c10d.wait_tensor.default and n.args[0] is collective for n in gm.graph.nodes)
    gm.graph.lint()


def test_the_memory_split_ends_where_only_an_unsplittable_collective_raises_the_peak(monkeypatch):
    """A collective alone and already held back is over the budget by itself: the
    split stops (before, it halved it into itself and an empty part, forever)."""
    from types import SimpleNamespace

    from bucketing.plan import memory
    from bucketing.plan.records import Bucket

    member = SimpleNamespace(nbytes=1 << 30, node=object())
    alone = Bucket(0, None, "k", 1 << 20, [member], member.nbytes, held_back=True)
    pair = Bucket(1, None, "k", 1 << 31, [SimpleNamespace(nbytes=4, node=object())] * 2, 8)
    monkeypatch.setattr(memory, "live_bytes", lambda timeline: [0])
    calls = []

    def peak(buckets, *args):
        calls.append(len(buckets))
        assert len(calls) < 10, "the split does not end"
        return 0, {id(b): b.nbytes for b in buckets if b is alone}
    monkeypatch.setattr(memory, "_peak", peak)
    out = memory.split_to_budget([alone, pair], {}, None, 0, "copy", lambda bs: {id(b): 0 for b in bs})
    assert out == [alone, pair] and calls == [2]


def test_the_memory_budget_holds_back_the_prefetch_needed_last_not_the_largest(monkeypatch):
    """Three prefetched buckets add bytes at the peak: the first block's, the largest
    (it carries the embeddings' parameters too) and needed soonest, and two later ones.
    Holding back the nearest would issue the farther ones behind it (a group issues
    in one order) and leave the next compute waiting: the one needed last is held
    back first, then the next, until the peak fits."""
    from types import SimpleNamespace

    from bucketing.plan import memory
    from bucketing.plan.records import Bucket, When

    def bucket(index, first_use, nbytes):
        members = [SimpleNamespace(nbytes=nbytes // 2, node=object()) for _ in range(2)]
        return Bucket(index, None, "k", 1 << 40, members, nbytes), \
            {m.node: When(first_use - 1, 0, first_use, first_use, m.nbytes, m.nbytes, 0.0) for m in members}

    first, w1 = bucket(0, 10, 1900)
    second, w2 = bucket(1, 20, 1600)
    third, w3 = bucket(2, 30, 1600)
    whens = {**w1, **w2, **w3}
    monkeypatch.setattr(memory, "live_bytes", lambda timeline: [0])
    order = []

    def peak(buckets, whens, base_live, limit, copy_out, issue):
        adding = [b for b in buckets if not b.held_back]
        if sum(b.nbytes for b in adding) <= limit:  # fits once one is held back
            return None, {}
        return 0, {id(b): b.nbytes for b in adding}
    monkeypatch.setattr(memory, "_peak", peak)
    real_halve = memory.halve
    monkeypatch.setattr(memory, "halve", lambda b, why: order.append("halved") or real_halve(b, why))
    out = memory.split_to_budget([first, second, third], whens, None, 3600, "copy", lambda bs: {id(b): 0 for b in bs})
    assert out == [first, second, third] and not order
    assert [b.held_back for b in out] == [False, False, True]
    # A later bucket that gives back less than half the largest addition is not the one chosen.
    small, w4 = bucket(3, 40, 600)
    for b in (first, second, third):
        b.held_back = False
    out = memory.split_to_budget([first, second, third, small], {**whens, **w4}, None, 5100, "copy",
                                 lambda bs: {id(b): 0 for b in bs})
    assert [b.held_back for b in out] == [False, False, True, False]


def test_each_reduction_waits_as_late_as_the_live_bytes_where_it_is_held_allow(monkeypatch):
    """Six reduce-scatters of 100 bytes' input, issued at 0, 10, .., 50, their results
    first used at the end (60). Live bytes are high at the start of the graph (a
    backward's saved activations) and fall: the first two reductions must be waited
    for before the next is issued, the later ones may wait to the end. One depth for
    the whole graph was set by its tightest point: every one waited for at once."""
    from types import SimpleNamespace

    from bucketing.collectives import REDUCE_SCATTER
    from bucketing.plan import memory
    from bucketing.plan.records import Bucket, When

    buckets, whens = [], {}
    for k in range(6):
        member = SimpleNamespace(nbytes=100, node=object(), group_name="g")
        whens[member.node] = When(10 * k, 10 * k - 1, 60, 60, 100, 25, 0.0)
        buckets.append(Bucket(k, REDUCE_SCATTER, "k", 1 << 40, [member], 100))
    base = [1000 - 12 * t for t in range(62)]  # 1000 at the start, 268 at the end
    monkeypatch.setattr(memory, "live_bytes", lambda timeline: base)
    issue = {id(b): 10 * k for k, b in enumerate(buckets)}
    depths = memory.reductions_in_flight(buckets, whens, None, 50, "copy", issue)
    assert [depths[id(b)] for b in buckets] == [1, 1, None, None, None, None], depths
    # No higher a peak than every one waited for at once (the first is over the budget
    # even so: it is issued where live bytes peak), while four of six wait to the end.
    def worst(depth):
        waits = memory.reduction_waits(buckets, whens, issue, depth)
        return memory._worst(base, [(issue[id(b)], waits[id(b)], 100) for b in buckets])
    assert worst(lambda b: depths[id(b)]) == worst(1) == 1100
    # One depth for the whole graph, the deepest within the budget: none is, so the
    # shallowest for all.
    assert all(worst(d) > max(base) + 50 for d in (None, 4, 2, 1))


def test_each_chained_reduction_is_waited_for_before_the_issue_its_own_depth_names():
    """placement.waited_before: per reduction its own depth; None: no pairing (waited
    at its first use); a reduction the plan did not see (of a bucket that could not
    be built) takes the shallowest depth the plan gave."""
    from types import SimpleNamespace

    from bucketing.apply.placement import waited_before
    from bucketing.collectives import WAIT

    class Node(SimpleNamespace):
        __hash__ = object.__hash__

    rs = c10d.reduce_scatter_tensor.default
    nodes = []
    for k in range(5):
        wait = Node(target=WAIT, name=f"w{k}")
        nodes.append(Node(target=rs, users={wait: None}, name=f"rs{k}"))
    depths = {nodes[0]: 1, nodes[1]: 2, nodes[2]: None, nodes[4]: 1}  # nodes[3]: unseen
    pairs = waited_before([nodes], {}, depths)
    assert {(w.name, n.name) for w, n in pairs} == {("w0", "rs1"), ("w1", "rs3"), ("w3", "rs4")}
    assert waited_before([nodes], {}, None) == []
