"""Buckets by module: module FQNs read from the graph's metadata, the user's
`module_buckets` plan (torch's `module_bucket_plans` format), the module policy
and its `block_classes`."""

import pytest
import torch

import bucketing.core as bc
from bucketing import modules
from bucketing.options import make_options

from .graphs import StandInEstimates, ag, rs, trace

f32, bf16 = torch.float32, torch.bfloat16
c10d = torch.ops._c10d_functional
BLOCKS = 4


@pytest.mark.parametrize("path, expected", [
    ("L['self'].layers.0.attention", "layers.0.attention"),
    ("L['fn']._modules['layers']['0']._modules['attention']", "layers.0.attention"),
    ('L["model"].layers[3].mlp', "layers.3.mlp"),
    ("L['self']._orig_mod.layers.1", "layers.1"),
    ("self.norm", "norm"),
    ("L['self']", ""),
    ("G['model'].layers.2", "layers.2"),
    # torch.nn.utils.parametrize: a parametrization belongs to the module it parametrizes.
    ("L['self'].tok_embeddings.parametrizations.weight[0]", "tok_embeddings"),
    ("L['self']._modules['layers']['1'].attention.wq.parametrizations.weight.0", "layers.1.attention.wq"),
])
def test_module_paths_read_as_the_fqns_a_user_writes(path, expected):
    assert modules.fqn(path) == expected
    assert modules.in_module_tree(path)


# torchtitan's SimpleFSDP calls a parametrization module held in the closure of
# a property; Dynamo names it by that route, which is no module FQN.
CLOSURE_PATH = "dict(type(L['self'].layers.0.attention.wo).__dict__)['weight'].fget.__closure__[0].cell_contents"


def _forward_through_closure(group_name):
    """_forward with every gather's innermost module the one shared parametrization."""
    gm = _forward(group_name)
    for node in gm.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if stack:
            (path, _), = stack.values()
            node.meta["nn_module_stack"] = {path: (path, "Linear"), CLOSURE_PATH: (CLOSURE_PATH, "Replicate")}
    return gm


def test_modules_reached_outside_the_tree_leave_the_stack(group_name):
    assert not modules.in_module_tree(CLOSURE_PATH)
    gm = _forward_through_closure(group_name)
    node = next(n for n in gm.graph.nodes if n.meta.get("nn_module_stack"))
    assert modules.module_stack(node) == (("layers.0.proj", "Linear"),)
    plan = bc.bucket_collectives(gm, locality_flops=0)
    assert [(b.module, len(b.members)) for b in plan.buckets] == [(f"layers.{i}", 2) for i in range(BLOCKS)]
    plan = bc.bucket_collectives(_forward_through_closure(group_name), module_buckets=PLAN, policy="merge_all")
    assert [b.module for b in plan.buckets] == ["layers.0", "layers.1", "layers.2+layers.3"]


@pytest.mark.parametrize("plan, message", [
    ("layers.0", "module_buckets must be a list"),
    ([["layers.0", 3]], "module_buckets entry"),
    ([[]], "module_buckets entry"),
    ([""], "module_buckets entry"),
    (["layers.0", ["layers.1", "layers.0"]], "overlapping modules 'layers.0' and 'layers.0'"),
    (["layers", "layers.1"], "overlapping modules 'layers' and 'layers.1'"),
])
def test_bad_module_buckets_fail_at_construction(plan, message):
    with pytest.raises(ValueError, match=message):
        bc.BucketingPass(module_buckets=plan)


def test_block_classes_are_checked():
    with pytest.raises(ValueError, match="block_classes"):
        make_options(block_classes=[""])
    assert make_options(block_classes="TransformerBlock").block_classes == ("TransformerBlock",)


def test_plans_differing_only_in_module_buckets_hash_apart():
    a = bc.BucketingPass(module_buckets=["layers.0", "layers.1"])
    b = bc.BucketingPass(module_buckets=[["layers.0", "layers.1"]])
    assert a.uuid() != b.uuid()


def _tag(node, path, cls="Linear", key="nn_module_stack"):
    node.meta[key] = {path: (path, cls)}


def _forward(group_name):
    """Four blocks, each a bf16 weight and an f32 bias gathered where used, then a head outside them."""

    def f(x, head, *params):
        for w, b in zip(params[::2], params[1::2]):
            x = (x.to(bf16) @ ag(w, group_name).t()).float() + ag(b, group_name)
        return x @ ag(head, group_name).t()

    gm = trace(f, ((2, 8), f32), ((2, 8), f32), *[((2, 8), bf16), ((2,), f32)] * BLOCKS)
    gathers = [n for n in gm.graph.nodes if n.target is c10d.all_gather_into_tensor.default]
    for i, node in enumerate(gathers[:-1]):
        _tag(node, f"L['fn'].layers.{i // 2}.proj")
    _tag(gathers[-1], "L['fn'].output")
    return gm


def _backward(group_name):
    """Gradients reduce-scattered per block in reverse (bf16 weight, f32 bias), tagged as backward nodes are."""

    def f(*grads):
        return tuple(rs(g, group_name) for g in grads)

    gm = trace(f, *[((8, 8), bf16), ((8,), f32)] * BLOCKS)
    scatters = [n for n in gm.graph.nodes if n.target is c10d.reduce_scatter_tensor.default]
    for i, node in enumerate(scatters):
        _tag(node, f"L['fn'].layers.{BLOCKS - 1 - i // 2}.proj", key="fwd_nn_module_stack")
    return gm


PLAN = ["layers.0", "layers.1", ["layers.2", "layers.3"]]


def test_module_buckets_make_one_all_gather_per_entry(group_name):
    plan = bc.bucket_collectives(_forward(group_name), module_buckets=PLAN, policy="merge_all")
    assert [(b.module, len(b.members), b.dtypes) for b in plan.buckets] == [
        ("layers.0", 2, ("bfloat16", "float32")),
        ("layers.1", 2, ("bfloat16", "float32")),
        ("layers.2+layers.3", 4, ("bfloat16", "float32")),
    ]
    # The head sits outside every entry and follows the policy: alone here.
    assert [s.node_name for s in plan.skipped] == ["all_gather_into_tensor_8"]
    assert "module=layers.2+layers.3" in bc.explain(plan)


def test_module_buckets_hold_whatever_the_compute_window(group_name):
    # A window of 0 FLOPs splits every matmul apart outside the entries.
    plan = bc.bucket_collectives(_forward(group_name), module_buckets=PLAN, policy="locality", locality_flops=0)
    assert [len(b.members) for b in plan.buckets] == [2, 2, 4]


def test_backward_reduce_scatters_bucket_per_entry_and_dtype(group_name):
    plan = bc.bucket_collectives(_backward(group_name), module_buckets=PLAN)
    got = sorted((b.module, b.dtypes, len(b.members)) for b in plan.buckets)
    assert got == [("layers.2+layers.3", ("bfloat16",), 2), ("layers.2+layers.3", ("float32",), 2)]
    # layers.0 and layers.1 hold one gradient per dtype each: left alone, saying so.
    reasons = {s.node_name: s.reason for s in plan.skipped}
    assert len(reasons) == 4 and all("in module layers." in r for r in reasons.values()), reasons


def test_caps_stay_hard_limits_inside_an_entry(group_name):
    plan = bc.bucket_collectives(_forward(group_name), module_buckets=[["layers.0", "layers.1"]],
                                 max_bucket_count=3)
    assert [len(b.members) for b in plan.buckets if b.module == "layers.0+layers.1"] == [3]


def test_module_policy_blocks_by_index_or_by_class(group_name):
    # Default: the outermost indexed module is the block.
    plan = bc.bucket_collectives(_forward(group_name), locality_flops=0)
    assert [(b.module, len(b.members)) for b in plan.buckets] == [(f"layers.{i}", 2) for i in range(BLOCKS)]
    # By class: every gather below a "Stage" module at layers.0 / layers.2.
    gm = _forward(group_name)
    for node in gm.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if stack:
            (path, _), = stack.values()
            i = int(path.split(".")[2]) if ".layers." in path else None
            if i is not None:
                stage = f"L['fn'].layers.{i - i % 2}"
                node.meta["nn_module_stack"] = {stage: (stage, "Stage"), path: (path, "Linear")}
    plan = bc.bucket_collectives(gm, locality_flops=0, block_classes=("Stage",))
    assert [(b.module, len(b.members)) for b in plan.buckets] == [("layers.0", 4), ("layers.2", 4)]
    # The locality policy ignores module metadata: a 0-FLOP window splits every matmul.
    plan = bc.bucket_collectives(_forward(group_name), policy="locality", locality_flops=0)
    assert all(b.module is None for b in plan.buckets)
    assert max((len(b.members) for b in plan.buckets), default=1) <= 2


def test_parametrized_parameters_outside_blocks_are_no_block_of_their_own(group_name):
    """The embedding's, the final norm's and the output's parametrizations end in an
    index (the ParametrizationList entry): they share buckets, as the root of FSDP2 does."""
    def program(emb, norm, out, w0, w1):
        return [ag(x, group_name) for x in (emb, w0, w1, norm, out)]

    gm = trace(program, *[((4, 8), torch.float32)] * 5)
    paths = ["tok_embeddings", "layers.0.attention.wq", "layers.1.attention.wq", "norm", "output"]
    gathers = [n for n in gm.graph.nodes if n.target is c10d.all_gather_into_tensor.default]
    for node, path in zip(gathers, paths):
        full = f"L['self'].{path}.parametrizations.weight[0]"
        node.meta["nn_module_stack"] = {path: (f"L['self'].{path}", "Module"), full: (full, "ParametrizationList")}
    plan = bc.bucket_collectives(gm, multidtype=True)
    units = sorted((b.module or "", len(b.members)) for b in plan.buckets)
    assert units == [("", 3)], units  # the one-member blocks layers.0 and layers.1 stay alone
    assert not any(b.module and "parametrizations" in b.module for b in plan.buckets)


def test_blocks_per_bucket_merges_consecutive_blocks_in_the_order_the_graph_needs_them(group_name):
    plan = bc.bucket_collectives(_forward(group_name), locality_flops=0, blocks_per_bucket=2)
    assert [(b.module, len(b.members)) for b in plan.buckets] == [("layers.0+layers.1", 4), ("layers.2+layers.3", 4)]
    # Backward: the gradients of layers.3 come first, so layers.3 and layers.2 share a bucket.
    plan = bc.bucket_collectives(_backward(group_name), blocks_per_bucket=2)
    got = sorted((b.module, b.dtypes, len(b.members)) for b in plan.buckets)
    assert got == [("layers.1+layers.0", ("bfloat16",), 2), ("layers.1+layers.0", ("float32",), 2),
                   ("layers.3+layers.2", ("bfloat16",), 2), ("layers.3+layers.2", ("float32",), 2)]
    # An explicit module_buckets entry stays as the user wrote it.
    plan = bc.bucket_collectives(_forward(group_name), locality_flops=0, blocks_per_bucket=3,
                                 module_buckets=[["layers.0"]])
    assert [(b.module, len(b.members)) for b in plan.buckets] == [
        ("layers.0", 2), ("layers.1+layers.2+layers.3", 6)]


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_bad_blocks_per_bucket_fails_at_construction(value):
    with pytest.raises(ValueError, match="blocks_per_bucket"):
        bc.BucketingPass(blocks_per_bucket=value)


def _blocks_and_whens(group_name, gm=None):
    from bucketing.collectives import find_collectives
    from bucketing.plan import when
    from bucketing.plan.policy import module_unit
    from bucketing.plan.timeline import Timeline

    gm = gm if gm is not None else _forward(group_name)
    options = bc.BucketingOptions()
    collectives, _ = find_collectives(gm.graph, options.collectives, options.fuse_casts)
    timeline = Timeline(gm.graph)
    whens = {c.node: when(c, timeline) for c in collectives}
    blocks = {}
    for c in collectives:
        unit, _ = module_unit(c, options)
        if unit is not None:
            blocks.setdefault(unit, []).append(c)
    # One millisecond of compute between consecutive blocks' first uses.
    anchors = sorted({min(whens[c.node].first_use for c in m) for m in blocks.values()})
    before = [float(sum(1 for a in anchors if a < p)) for p in range(len(timeline.nodes) + 1)]
    return list(blocks.values()), whens, before


@pytest.mark.parametrize("latency_ms, ms_per_byte, expected", [
    (0.5, 0.0, 1),  # each block's collectives fit under its compute: one block a bucket
    (1.5, 0.0, 2),  # latency-bound: two blocks' compute (2 ms) hides one 1.5 ms collective
    (2.5, 0.0, 3),
    (0.0, 1.0, 4),  # bandwidth-bound at any size: every block, for the caps and the memory budget to split
])
def test_blocks_per_bucket_estimated_from_collective_and_compute_costs(group_name, latency_ms, ms_per_byte,
                                                                        expected):
    from bucketing.plan.estimates import BlockEstimate

    blocks, whens, before = _blocks_and_whens(group_name)
    assert len(blocks) == 4
    assert BlockEstimate.of(blocks, whens, before, StandInEstimates(latency_ms, ms_per_byte)).blocks_per_bucket() \
        == expected


def test_estimated_buckets_hold_one_block_at_the_start_and_the_end(group_name, monkeypatch):
    """Two blocks a bucket by the estimates (a latency of 1.5 blocks' compute), but
    the first bucket waits with nothing to hide it and the backward's last
    likewise: those hold one block each. blocks_per_bucket=2 is taken as written."""
    import bucketing.plan.estimates as estimates
    from bucketing.plan.timeline import Timeline

    def latency_of_one_and_a_half_blocks(gm):
        blocks, whens, _ = _blocks_and_whens(group_name, gm)
        before = StandInEstimates().compute_ms_before(Timeline(gm.graph))  # a millisecond a node
        block_ms = estimates.BlockEstimate.of(blocks, whens, before, StandInEstimates()).block_ms
        costs = StandInEstimates(1.5 * block_ms, 0.0, 0.0)
        assert estimates.BlockEstimate.of(blocks, whens, before, costs).blocks_per_bucket() == 2
        monkeypatch.setattr(estimates, "device_costs", lambda device: costs)

    latency_of_one_and_a_half_blocks(_forward(group_name))
    plan = bc.bucket_collectives(_forward(group_name), locality_flops=0)
    assert [b.module for b in plan.buckets] == ["layers.0", "layers.1+layers.2", "layers.3"]
    # A backward: each block's gradient computed (a matmul each, last block first) and reduced.
    def backward(x, *weights):
        return tuple(rs(x @ w, group_name) for w in reversed(weights))

    gm = trace(backward, ((8, 8), f32), *[((8, 8), f32)] * BLOCKS)
    scatters = [n for n in gm.graph.nodes if n.target is c10d.reduce_scatter_tensor.default]
    for i, node in enumerate(scatters):
        _tag(node, f"L['fn'].layers.{BLOCKS - 1 - i}.proj", key="fwd_nn_module_stack")
    latency_of_one_and_a_half_blocks(gm)
    plan = bc.bucket_collectives(gm)
    # One gradient a block: the first and the last block's stay alone.
    assert [b.module for b in plan.buckets] == ["layers.2+layers.1"]
    assert sorted(s.node_name for s in plan.skipped) == sorted(n.name for n in (scatters[0], scatters[-1]))
    latency_of_one_and_a_half_blocks(_forward(group_name))
    plan = bc.bucket_collectives(_forward(group_name), locality_flops=0, blocks_per_bucket=2)
    assert [b.module for b in plan.buckets] == ["layers.0+layers.1", "layers.2+layers.3"]


def test_blocks_per_bucket_counts_the_buckets_the_cap_makes(group_name):
    """With a cap of one block's bytes, two blocks merged are still two collectives:
    at a 1.5 ms latency no run of blocks fits within its compute (1 ms a block),
    so the estimate takes every block and finds the group communication-bound."""
    from bucketing.plan.estimates import BlockEstimate

    blocks, whens, before = _blocks_and_whens(group_name)
    one_block = max(sum(c.nbytes for c in members) for members in blocks)
    free = BlockEstimate.of(blocks, whens, before, StandInEstimates(1.5, 0.0))
    assert (free.blocks_per_bucket(), free.communication_bound()) == (2, False)
    capped = BlockEstimate.of(blocks, whens, before, StandInEstimates(1.5, 0.0), cap_bytes=one_block)
    assert (capped.comm_ms(2), capped.blocks_per_bucket(), capped.communication_bound()) == (3.0, 4, True)


@pytest.mark.parametrize("ms_per_byte", [0.0, 1.0], ids=["compute-bound", "communication-bound"])
def test_with_estimates_copies_that_cost_more_than_merging_saves_are_refused_however_the_step_is_bound(
        group_name, monkeypatch, ms_per_byte):
    """Each block's weight (160 bytes moved: 0.016 ms of copies) and the head stay
    alone, also where the network bounds the step (160 ms a weight): the copies
    run on the compute stream, and in a backward the gradients wait behind them."""
    import bucketing.plan.estimates as estimates

    # Merging saves 10 us; a byte copied in and out costs 0.1 us: the weight's
    # copies (0.016 ms) cost more than merging saves, the bias's (40 bytes) less.
    monkeypatch.setattr(estimates, "device_costs", lambda device: StandInEstimates(0.01, ms_per_byte, 1e-4))
    plan = bc.bucket_collectives(_forward(group_name), locality_flops=0)
    reasons = [s.reason for s in plan.skipped if "copy-in and copy-out cost" in s.reason]
    assert len(reasons) == 5, plan


@pytest.mark.parametrize("ms_per_byte", [0.0, 1.0], ids=["compute-bound", "communication-bound"])
def test_with_estimates_a_collective_outside_the_blocks_joins_them_where_communication_bounds_the_step(
        group_name, monkeypatch, ms_per_byte):
    """Communication-bound, every collective saved shortens the step: the head's gather
    (used after the last block) joins the blocks' unit, and a gradient outside
    any block joins the blocks' reduce-scatter of its dtype. Compute-bound, both
    stay out of the blocks."""
    import bucketing.plan.estimates as estimates

    monkeypatch.setattr(estimates, "device_costs", lambda device: StandInEstimates(0.01, ms_per_byte, 0.0))
    forward = bc.bucket_collectives(_forward(group_name), locality_flops=0)
    gm = _backward(group_name)
    bias = [n for n in gm.graph.nodes if n.target is c10d.reduce_scatter_tensor.default][1]
    del bias.meta["fwd_nn_module_stack"]  # layers.3's bias gradient, now outside every block
    backward = bc.bucket_collectives(gm, locality_flops=0)
    if ms_per_byte:
        everything = "+".join(f"layers.{i}" for i in range(BLOCKS))
        assert [(b.module, len(b.members)) for b in forward.buckets] == [(everything, 2 * BLOCKS + 1)]
        backward_blocks = "+".join(f"layers.{i}" for i in reversed(range(BLOCKS)))
        assert sorted((b.module, b.dtypes, len(b.members)) for b in backward.buckets) == [
            (backward_blocks, ("bfloat16",), BLOCKS), (backward_blocks, ("float32",), BLOCKS)]
    else:
        assert [(b.module, len(b.members)) for b in forward.buckets] == [(f"layers.{i}", 2) for i in range(BLOCKS)]
        assert bias.name not in {m for b in backward.buckets for m in b.members}


def _head_first(group_name):
    """_forward with the head used before the blocks, as a backward needs the output's
    and the final norm's weights before any block's."""

    def f(x, head, *params):
        x = x @ ag(head, group_name).t()
        for w, b in zip(params[::2], params[1::2]):
            x = (x.to(bf16) @ ag(w, group_name).t()).float() + ag(b, group_name)
        return x

    gm = trace(f, ((2, 8), f32), ((2, 8), f32), *[((2, 8), bf16), ((2,), f32)] * BLOCKS)
    gathers = [n for n in gm.graph.nodes if n.target is c10d.all_gather_into_tensor.default]
    _tag(gathers[0], "L['fn'].output")
    for i, node in enumerate(gathers[1:]):
        _tag(node, f"L['fn'].layers.{i // 2}.proj")
    return gm


COPY_OUTS = {  # options: the copy-out op the rewrite emits on the CPU
    "into": ({}, torch.ops.bucketing_ops.copy_out_into.default),
    "lowered": ({"lower_copy_out": "always"}, torch.ops.bucketing_ops.copy_out.default),
    "packed": ({"copy_out": "packed"}, torch.ops.bucketing_ops.copy_out_packed.default),
}


@pytest.mark.parametrize("copy_out", list(COPY_OUTS))
@pytest.mark.parametrize("ms_per_byte", [0.0, 1.0], ids=["compute-bound", "communication-bound"])
def test_with_estimates_a_gather_needed_before_the_blocks_joins_them_and_is_copied_out_ahead(
        group_name, monkeypatch, ms_per_byte, copy_out):
    """Communication-bound, the head's gather, needed before any block (compute between:
    more than merging saves), joins the blocks' bucket anyway, since every collective
    saved shortens the step. It is copied out at its own first use and the blocks'
    members at theirs, so the blocks' parameters are not gathered out over the head's
    compute. Compute-bound it stays alone."""
    import bucketing.plan.estimates as estimates

    options, op = COPY_OUTS[copy_out]
    monkeypatch.setattr(estimates, "device_costs", lambda device: StandInEstimates(0.01, ms_per_byte, 0.0))
    gm = _head_first(group_name)
    head = next(n for n in gm.graph.nodes if n.target is c10d.all_gather_into_tensor.default).name
    plan = bc.bucket_collectives(gm, locality_flops=0, **options)
    if not ms_per_byte:
        assert head in {s.node_name for s in plan.skipped} and not any(b.apart for b in plan.buckets), plan
        return
    (bucket,) = plan.buckets
    assert (len(bucket.members), bucket.apart) == (2 * BLOCKS + 1, (head,)), plan
    nodes = list(gm.graph.nodes)
    copies = [i for i, n in enumerate(nodes) if n.target is op]
    mms = [i for i, n in enumerate(nodes) if n.target is torch.ops.aten.mm.default]
    assert len(copies) == 2 and len(mms) == BLOCKS + 1, gm.graph
    # The head's copy-out before the head's matmul, the blocks' after it and before the first block's.
    assert copies[0] < mms[0] < copies[1] < mms[1], (copies, mms)
    assert [len(nodes[i].args[2]) for i in copies] == [1, 2 * BLOCKS]  # members' offsets


def test_with_estimates_the_memory_budget_is_two_blocks_gathered(group_name, monkeypatch):
    """FSDP2's prefetch bound: with estimates and no memory_budget_mb, buckets may
    add two blocks' gathered parameters (here 2 x 160 bytes) to the estimated peak."""
    import bucketing.plan.estimates as estimates

    budgets = []
    from bucketing.plan import memory

    real = memory.split_to_budget

    def spy(buckets, whens, timeline, budget, *args):
        budgets.append(budget)
        return real(buckets, whens, timeline, budget, *args)

    monkeypatch.setattr(memory, "split_to_budget", spy)
    monkeypatch.setattr(estimates, "device_costs", lambda device: StandInEstimates(0.01, 0.0, 0.0))
    cap_mb = 160 / 2**20
    bc.bucket_collectives(_forward(group_name), locality_flops=0, bucket_cap_mb=cap_mb)
    bc.bucket_collectives(_forward(group_name), locality_flops=0, bucket_cap_mb=cap_mb, memory_budget_mb=1e-4)
    monkeypatch.setattr(estimates, "device_costs", lambda device: None)
    bc.bucket_collectives(_forward(group_name), locality_flops=0, bucket_cap_mb=cap_mb)
    assert budgets == [320, 1e-4 * 2**20, 160], budgets


def test_no_estimates_on_the_cpu():
    from bucketing.plan.costs import device_costs

    assert device_costs(torch.device("cpu")) is None
