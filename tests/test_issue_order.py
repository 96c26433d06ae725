"""Every rank issues a process group's collectives in one order, whatever its node positions."""

import torch

import bucketing.core as bc

from .graphs import ag, rs, trace

c10d = torch.ops._c10d_functional
f32 = torch.float32


def _two_layers(group_name, late: bool):
    """Layer 0 gathers p and z, layer 1 gathers q1 and q2. z's input is computed
    before layer 1's gathers, or (`late`, as on a rank that pads its shard
    there) after them."""

    def f(p, q1, q2, r):
        if not late:
            z = r * 2
        a = ag(p, group_name)
        b1 = ag(q1, group_name)
        b2 = ag(q2, group_name)
        if late:
            z = r * 2
        c = ag(z, group_name)
        return (a + c) @ torch.ones(8, 8), (b1 + b2) @ torch.ones(8, 8)

    gm = trace(f, *[((2, 8), f32)] * 4)
    layers = {"all_gather_into_tensor": 0, "all_gather_into_tensor_1": 1, "all_gather_into_tensor_2": 1,
              "all_gather_into_tensor_3": 0}
    for node in gm.graph.nodes:
        if node.name in layers:
            path = f"L['self'].layers.{layers[node.name]}"
            node.meta["nn_module_stack"] = {path: (path, torch.nn.Linear)}
    return gm


def _issue_order(gm) -> list[str]:
    """The merged collectives in graph order, named by their bucket's first member."""
    plan = bc.bucket_collectives(gm)
    gm.graph.lint()
    first = {b.collective: b.members[0] for b in plan.buckets}
    return [first[n.name] for n in gm.graph.nodes if n.name in first]


def test_buckets_issue_in_one_order_whatever_the_positions(group_name):
    # Layer 0's bucket is ready once z exists; on the "late" rank that is after
    # layer 1's inputs, and a schedule by position alone issued layer 1 first
    # there: the two ranks' collectives mismatched.
    early = _issue_order(_two_layers(group_name, late=False))
    late = _issue_order(_two_layers(group_name, late=True))
    assert early == late == ["all_gather_into_tensor", "all_gather_into_tensor_1"]


def test_a_prefetch_does_not_queue_behind_a_reduction_issued_later(group_name):
    """A reduce-scatter bucket whose first gradient comes early but whose last
    comes late is issued late; an all-gather on the same group placed between
    its members must not be chained behind it."""

    def f(g1, p, g2, w):
        r1 = rs(g1 * 2, group_name)
        gathered = ag(p, group_name)  # independent of both gradients
        h = (w @ w) @ w  # compute that produces the late gradient
        r2 = rs(h.reshape(-1)[: g2.numel()] + g2, group_name)
        return r1, r2, gathered @ w

    gm = trace(f, ((16,), f32), ((2, 8), f32), ((32,), f32), ((8, 8), f32))
    plan = bc.bucket_collectives(gm, policy="merge_all", collectives=("reduce_scatter",))
    assert plan.counts() == {"reduce_scatter": 1}
    nodes = list(gm.graph.nodes)
    gather = next(i for i, n in enumerate(nodes) if n.target is c10d.all_gather_into_tensor.default)
    scatter = next(i for i, n in enumerate(nodes) if n.target is c10d.reduce_scatter_tensor.default)
    assert gather < scatter, gm.graph


def test_the_wait_of_a_collective_left_alone_moves_to_its_first_user(group_name):
    """A lone reduce-scatter's wait goes just before the first read of its result,
    as a bucket's wait does, so compute in between hides it."""

    def f(g, p, q, w):
        alone = rs(g, group_name)
        gathered = ag(p, group_name) + ag(q, group_name)
        h = (w @ w) @ w
        return h, gathered, alone * 2

    gm = trace(f, ((16,), torch.bfloat16), ((2, 8), f32), ((2, 8), f32), ((8, 8), f32))
    plan = bc.bucket_collectives(gm, policy="merge_all")
    assert plan.counts() == {"all_gather": 1}
    nodes = list(gm.graph.nodes)
    scatter = next(n for n in nodes if n.target is c10d.reduce_scatter_tensor.default)
    (wait,) = scatter.users
    matmuls = [i for i, n in enumerate(nodes) if n.target is torch.ops.aten.mm.default]
    assert nodes.index(wait) > max(matmuls), gm.graph
    assert nodes.index(wait) == nodes.index(next(iter(wait.users))) - 1


def test_a_reduction_is_not_held_behind_an_all_gather_planned_after_more_compute(group_name):
    """Gradients reduced before the compute, a parameter gathered after it (its
    input exists from the start, as a backward re-gather's does): each group
    issues in the order the compute reaches them, so the reduction goes first
    and the compute hides it. All-gathers first regardless held every reduction
    of a backward graph behind its re-gathers, to the end of the step."""

    def f(g1, g2, w, p):
        r1, r2 = rs(g1 * 2, group_name), rs(g2 * 2, group_name)
        h = (w @ w) @ w
        gathered = ag(p, group_name)
        return r1, r2, h, gathered @ w

    gm = trace(f, ((16,), f32), ((16,), f32), ((8, 8), f32), ((2, 8), f32))
    plan = bc.bucket_collectives(gm, policy="merge_all", collectives=("reduce_scatter",))
    assert plan.counts() == {"reduce_scatter": 1}
    nodes = list(gm.graph.nodes)
    scatter = next(i for i, n in enumerate(nodes) if n.target is c10d.reduce_scatter_tensor.default)
    gather = next(i for i, n in enumerate(nodes) if n.target is c10d.all_gather_into_tensor.default)
    first_matmul = next(i for i, n in enumerate(nodes) if n.target is torch.ops.aten.mm.default)
    assert scatter < first_matmul < gather, gm.graph


def test_with_estimates_buckets_still_issue_in_one_order(group_name, monkeypatch):
    """The estimate-driven plan (deeper prefetch, leads by estimated time) keeps one
    order across ranks: compute time is counted on FLOP nodes only, and the node a
    padding rank adds has none."""
    import dataclasses

    import bucketing.plan.estimates as estimates
    from bucketing.plan.costs import DeviceCosts

    @dataclasses.dataclass(frozen=True)
    class Latency(DeviceCosts):
        def collective_ms(self, kind, nbytes, group_size):
            return 1e-3 + nbytes * 1e-9

    monkeypatch.setattr(estimates, "device_costs", lambda device: Latency(1e6, 1e12))
    early = _issue_order(_two_layers(group_name, late=False))
    late = _issue_order(_two_layers(group_name, late=True))
    assert early == late == ["all_gather_into_tensor", "all_gather_into_tensor_1"]


def test_members_copied_out_apart_keep_their_own_place_in_the_prefetch_depth():
    """Three buckets in flight (WITH_ESTIMATES): a bucket whose first member is copied
    out apart from the rest (Bucket.apart) gates later prefetches as that member alone
    and the rest would, so joining it brings no later bucket's issue forward."""
    from types import SimpleNamespace

    from bucketing.collectives import ALL_GATHER
    from bucketing.plan.estimates import WITH_ESTIMATES
    from bucketing.plan.issue import issue_positions
    from bucketing.plan.records import Bucket, When

    def member(position, first_use):
        m = SimpleNamespace(node=object(), input=None, waits=(), group_name="g")
        whens[m.node] = When(position, 0, first_use, first_use, 1, 4, 0.0)
        return m

    def bucket(*members, apart=()):
        return Bucket(0, ALL_GATHER, (), 1.0, list(members), len(members)).set_apart({m.node for m in apart})

    whens = {}
    head, norm, block0, block1, block2 = (member(p, p + 5) for p in (5, 15, 25, 35, 45))
    a, c, d = bucket(head), bucket(block1), bucket(block2)
    joined = issue_positions([a, bucket(norm, block0, apart=[norm]), c, d], whens, WITH_ESTIMATES)
    alone = issue_positions([a, bucket(norm), bucket(block0), c, d], whens, WITH_ESTIMATES)
    # The head, the norm and block0 go at once; block1 once the head is used, block2 once the norm is.
    assert [alone[id(b)] for b in (a, c, d)] == [1, 10, 20]
    assert [joined[id(b)] for b in (a, c, d)] == [1, 10, 20]
    # Not copied out apart, the joined bucket counts once: block1 too goes at once.
    merged = issue_positions([a, bucket(norm, block0), c, d], whens, WITH_ESTIMATES)
    assert [merged[id(b)] for b in (a, c, d)] == [1, 1, 10]


def test_an_all_gather_led_early_waits_for_the_one_held_back_before_it():
    """The memory budget holds back block1's bucket (issued where the prefetch depth
    allows, not led); block2's, led early by the policy, must not go before it: a
    group's stream runs in issue order, and block1's compute, sooner, would wait
    behind block2's gather."""
    from types import SimpleNamespace

    from bucketing.collectives import ALL_GATHER
    from bucketing.plan.estimates import WITH_ESTIMATES
    from bucketing.plan.issue import issue_positions
    from bucketing.plan.records import Bucket, When

    whens = {}

    def bucket(position, held_back=False):
        ms = [SimpleNamespace(node=object(), input=None, waits=(), group_name="g") for _ in range(2)]
        for m in ms:
            whens[m.node] = When(position, 0, position + 5, position + 5, 1, 4, 0.0)
        return Bucket(0, ALL_GATHER, (), 1.0, ms, 2, held_back=held_back)

    block0, block1, block2 = bucket(10), bucket(50, held_back=True), bucket(90)
    lead = {id(block0): 0, id(block2): 2}
    at = issue_positions([block0, block1, block2], whens, WITH_ESTIMATES, lambda b: lead.get(id(b)))
    assert at[id(block1)] == 50  # neither led nor eager: where it is (fewer than three before it)
    assert at[id(block2)] == 50  # led to 2, but not before block1
    assert at[id(block0)] == 1


def test_a_reduction_of_a_buckets_result_waits_a_bucket_later(group_name):
    """HSDP's order: each gradient all-reduced over the replicas, then reduce-scattered
    over the shards, the reduce-scatter reading the all-reduce's result at once. The
    reduce-scatters of the first all-reduce bucket are issued with the next all-reduce
    bucket, so the first bucket is waited on after the compute that makes the next
    gradients, not right after it is issued."""
    from .graphs import ar

    def f(x, w0, w1, w2, w3):
        grads = []
        for w in (w0, w1, w2, w3):
            x = x @ w  # the compute that makes the next gradient
            grads.append(rs(ar(x, group_name), group_name))
        return tuple(grads)

    gm = trace(f, *[((8, 8), f32)] * 5)
    plan = bc.bucket_collectives(gm, policy="merge_all", bucket_cap_mb=2 * 8 * 8 * 4 / 2**20)
    gm.graph.lint()
    nodes = list(gm.graph.nodes)
    at = {n: i for i, n in enumerate(nodes)}
    reduce = [n for n in nodes if n.target is c10d.all_reduce.default]
    assert [b.kind for b in plan.buckets].count("all_reduce") == 2 and len(reduce) == 2
    first_wait = next(u for u in reduce[0].users if u.target is c10d.wait_tensor.default)
    matmuls = [n for n in nodes if n.target is torch.ops.aten.mm.default]
    # The first bucket (gradients 0 and 1) is waited on after the matmuls making gradients 2 and 3.
    assert at[first_wait] > at[matmuls[3]] > at[reduce[0]]
