"""Rewriting with a fake process group: graph shape, lint, order, idempotence."""

import importlib
import logging

import expecttest
import pytest
import torch

import bucketing.core as bc

from .graphs import WORLD, ag, ar, count, rs, trace

c10d = torch.ops._c10d_functional
bf16, f32 = torch.bfloat16, torch.float32


def _names(gm):
    return [n.name for n in gm.graph.nodes]


class TestCanonical(expecttest.TestCase):
    @staticmethod
    def _bucketed_code(**options) -> str:
        """A bf16 (cast fused) and an f32 all-gather of 4 fake ranks, bucketed with `options`."""
        import torch.distributed as dist
        from torch.testing._internal.distributed.fake_pg import FakeStore

        if not dist.is_initialized():
            dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
        g = dist.group.WORLD.group_name

        def f(w, n):
            return ag(w.to(bf16), g) * 2, ag(n, g)

        gm = trace(f, ((5,), f32), ((3,), f32))
        plan = bc.bucket_collectives(gm, **options)
        assert len(plan.buckets) == 1
        return gm.code.strip().replace(f"'{g}'", "GROUP")

    def test_bf16_f32_bucket_graph(self):
        """Default copy-out on the CPU: the graph allocates each member, one op fills them all; consumers
        read dense tensors of the unbucketed shapes."""
        self.assertExpectedInline(
            self._bucketed_code(),
            """\
def forward(self, w_1, n_1):
    all_gather_copy_in_default = torch.ops.bucketing_ops.all_gather_copy_in.default([w_1, n_1], [0, 16], [5, 3], 'bfloat16,float32', 32);  w_1 = n_1 = None
    all_gather_into_tensor_default = torch.ops._c10d_functional.all_gather_into_tensor.default(all_gather_copy_in_default, 4, GROUP);  all_gather_copy_in_default = None
    wait_tensor_default = torch.ops._c10d_functional.wait_tensor.default(all_gather_into_tensor_default);  all_gather_into_tensor_default = None
    new_empty_default = torch.ops.aten.new_empty.default(wait_tensor_default, [4, 5], dtype = torch.bfloat16)
    new_empty_default_1 = torch.ops.aten.new_empty.default(wait_tensor_default, [4, 3], dtype = torch.float32)
    copy_out_into_default = torch.ops.bucketing_ops.copy_out_into.default(wait_tensor_default, 4, [0, 16], [10, 12], 'bfloat16,float32', [new_empty_default, new_empty_default_1]);  wait_tensor_default = copy_out_into_default = None
    view_default = torch.ops.aten.view.default(new_empty_default, [20]);  new_empty_default = None
    mul = torch.ops.aten.mul.Tensor(view_default, 2);  view_default = None
    view_default_1 = torch.ops.aten.view.default(new_empty_default_1, [12]);  new_empty_default_1 = None
    return (mul, view_default_1)""",
        )

    def test_bf16_f32_bucket_graph_with_packed_copy_out(self):
        """copy_out="packed": one op packs each dtype's members densely; members are contiguous slices."""
        self.assertExpectedInline(
            self._bucketed_code(copy_out="packed"),
            """\
def forward(self, w_1, n_1):
    all_gather_copy_in_default = torch.ops.bucketing_ops.all_gather_copy_in.default([w_1, n_1], [0, 16], [5, 3], 'bfloat16,float32', 32);  w_1 = n_1 = None
    all_gather_into_tensor_default = torch.ops._c10d_functional.all_gather_into_tensor.default(all_gather_copy_in_default, 4, GROUP);  all_gather_copy_in_default = None
    wait_tensor_default = torch.ops._c10d_functional.wait_tensor.default(all_gather_into_tensor_default);  all_gather_into_tensor_default = None
    copy_out_packed_default = torch.ops.bucketing_ops.copy_out_packed.default(wait_tensor_default, 4, [0, 16], [10, 12], 'bfloat16,float32');  wait_tensor_default = None
    getitem = copy_out_packed_default[0]
    slice_tensor = torch.ops.aten.slice.Tensor(getitem, 0, 0, 20);  getitem = None
    view_default = torch.ops.aten.view.default(slice_tensor, [20]);  slice_tensor = None
    mul = torch.ops.aten.mul.Tensor(view_default, 2);  view_default = None
    getitem_1 = copy_out_packed_default[1];  copy_out_packed_default = None
    slice_tensor_1 = torch.ops.aten.slice.Tensor(getitem_1, 0, 0, 12);  getitem_1 = None
    view_default_1 = torch.ops.aten.view.default(slice_tensor_1, [12]);  slice_tensor_1 = None
    return (mul, view_default_1)""",
        )

    def test_bf16_f32_bucket_graph_with_view_copy_out(self):
        """copy_out="views": per-dtype views of the gathered buffer, fused into consumers."""
        self.assertExpectedInline(
            self._bucketed_code(copy_out="views"),
            """\
def forward(self, w_1, n_1):
    all_gather_copy_in_default = torch.ops.bucketing_ops.all_gather_copy_in.default([w_1, n_1], [0, 16], [5, 3], 'bfloat16,float32', 32);  w_1 = n_1 = None
    all_gather_into_tensor_default = torch.ops._c10d_functional.all_gather_into_tensor.default(all_gather_copy_in_default, 4, GROUP);  all_gather_copy_in_default = None
    wait_tensor_default = torch.ops._c10d_functional.wait_tensor.default(all_gather_into_tensor_default);  all_gather_into_tensor_default = None
    view_dtype = torch.ops.aten.view.dtype(wait_tensor_default, torch.bfloat16)
    view_default = torch.ops.aten.view.default(view_dtype, [4, 16]);  view_dtype = None
    slice_tensor = torch.ops.aten.slice.Tensor(view_default, 1, 0, 5);  view_default = None
    clone_default = torch.ops.aten.clone.default(slice_tensor, memory_format = torch.contiguous_format);  slice_tensor = None
    view_default_1 = torch.ops.aten.view.default(clone_default, [20]);  clone_default = None
    mul = torch.ops.aten.mul.Tensor(view_default_1, 2);  view_default_1 = None
    view_dtype_1 = torch.ops.aten.view.dtype(wait_tensor_default, torch.float32);  wait_tensor_default = None
    view_default_2 = torch.ops.aten.view.default(view_dtype_1, [4, 8]);  view_dtype_1 = None
    slice_tensor_1 = torch.ops.aten.slice.Tensor(view_default_2, 1, 4, 7);  view_default_2 = None
    clone_default_1 = torch.ops.aten.clone.default(slice_tensor_1, memory_format = torch.contiguous_format);  slice_tensor_1 = None
    view_default_3 = torch.ops.aten.view.default(clone_default_1, [12]);  clone_default_1 = None
    return (mul, view_default_3)""",
        )


def test_counts_lint_and_cast_fusion(group_name):
    def f(*xs):
        outs = [ag(x.to(bf16), group_name) for x in xs[:3]]
        outs += [rs(x, group_name) for x in xs[3:6]]
        outs += [ar(x, group_name) for x in xs[6:]]
        return tuple(outs)

    gm = trace(f, *[((8,), f32)] * 9)
    plan = bc.bucket_collectives(gm)
    gm.graph.lint()
    assert count(gm, c10d.all_gather_into_tensor.default) == 1
    assert count(gm, c10d.reduce_scatter_tensor.default) == 1
    assert count(gm, c10d.all_reduce.default) == 1
    assert count(gm, c10d.wait_tensor.default) == 3
    assert count(gm, torch.ops.aten._to_copy.default) == 0  # casts folded into the copy-in
    assert plan.counts() == {"all_gather": 1, "reduce_scatter": 1, "all_reduce": 1}
    ag_bucket = next(b for b in plan.buckets if b.kind == "all_gather")
    assert ag_bucket.nbytes == 3 * 8 * 2 * 4 and ag_bucket.padding_bytes == 0


def test_user_of_early_member_before_later_member_is_reordered(group_name):
    def f(a, b):
        x = ag(a, group_name)
        early_use = x * 3  # sits before the second collective in the original order
        y = ag(b, group_name)
        return early_use, y

    gm = trace(f, ((3,), f32), ((5,), bf16))
    bc.bucket_collectives(gm)
    gm.graph.lint()
    names = _names(gm)
    assert count(gm, c10d.all_gather_into_tensor.default) == 1
    wait = next(n for n in gm.graph.nodes if n.target is c10d.wait_tensor.default)
    mul = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.mul.Tensor)
    assert names.index(wait.name) < names.index(mul.name)


def test_issue_after_last_input_and_wait_before_first_use(group_name):
    def f(a, b, c):
        x = ag(a, group_name)
        h = torch.sin(c)  # independent compute: overlaps the merged collective
        y = ag(b + 1, group_name)
        return x * h[:1], y

    gm = trace(f, ((3,), f32), ((3,), f32), ((3,), f32))
    bc.bucket_collectives(gm)
    order = _names(gm)
    copy_in = next(n for n in gm.graph.nodes if "copy_in" in n.name)
    add = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.add.Tensor)
    wait = next(n for n in gm.graph.nodes if n.target is c10d.wait_tensor.default)
    assert order.index(add.name) < order.index(copy_in.name) < order.index(wait.name)


def test_second_run_changes_nothing(group_name):
    gm = trace(lambda *xs: tuple(ag(x, group_name) for x in xs), *[((3,), f32), ((5,), bf16)] * 3)
    bc.bucket_collectives(gm)
    code = gm.code
    plan = bc.bucket_collectives(gm)
    assert plan.buckets == [] and gm.code == code


def test_graph_without_collectives_is_untouched(group_name):
    gm = trace(lambda a: torch.sin(a) * 2, ((4,), f32))
    code = gm.code
    plan = bc.bucket_collectives(gm)
    assert plan.buckets == [] and plan.skipped == [] and gm.code == code


def test_unknown_collectives_are_left_alone(group_name):
    def f(a, b):
        x = c10d.wait_tensor(c10d.all_to_all_single(a, [2, 2, 2, 2], [2, 2, 2, 2], group_name))
        y = c10d.wait_tensor(c10d.broadcast(b, 0, group_name))
        z = [c10d.wait_tensor(t) for t in c10d.all_gather_into_tensor_coalesced([a, b], 4, group_name)]
        w = [c10d.wait_tensor(t) for t in c10d.reduce_scatter_tensor_coalesced([a, b], "sum", 4, group_name)]
        return x, y, *z, *w, ag(a, group_name)

    gm = trace(f, ((8,), f32), ((8,), f32))
    code = gm.code
    plan = bc.bucket_collectives(gm)
    assert plan.buckets == [] and gm.code == code


def test_pass_never_raises_into_a_compile(group_name, monkeypatch, caplog):
    gm = trace(lambda *xs: tuple(ag(x, group_name) for x in xs), *[((3,), f32)] * 3)
    code = gm.code

    def boom(*a, **k):
        raise RuntimeError("planner exploded")

    monkeypatch.setattr(bc, "plan", boom)
    bc.BucketingPass()(gm.graph)
    assert gm.code == code
    assert "pass failed" in caplog.text


def _graph_state(gm):
    """Every node as the compile would see it: object, name, op, target, inputs, in order."""
    return [(n, n.name, n.op, n.target, n.args, n.kwargs) for n in gm.graph.nodes]


# Each step of the rewrite after the first new node, made to fail once its
# changes are made. The members' casts are fused (the cast nodes go too on
# success), one bucket depends on another's result, and the plan check is
# inserted: every kind of change the rewrite makes is in flight when it fails.
_REWRITE_STEPS = {
    "replace": "bucketing.apply.replace_members",
    "place": "bucketing.apply.place",
    "reorder": "bucketing.apply.placement.reorder",
    "describe": "bucketing.report.locate",
    "lint": "torch.fx.Graph.lint",
}


@pytest.mark.parametrize("step", sorted(_REWRITE_STEPS))
def test_failed_rewrite_leaves_the_graph_as_it_was(group_name, monkeypatch, caplog, step):
    def f(w, n, b):
        x = ag(w.to(bf16), group_name) * 2
        y = ag(n, group_name)
        # A second bucket, whose inputs depend on the first bucket's results.
        z = ag((x.float() + b.sum()).to(bf16), group_name)
        v = ag(y + 1, group_name)
        return x, y, z, v, ag(b, group_name)

    gm = trace(f, ((5,), f32), ((3,), f32), ((4,), f32))
    code, state = gm.code, _graph_state(gm)
    module_name, _, attr = _REWRITE_STEPS[step].rpartition(".")
    owner = torch.fx.Graph if module_name == "torch.fx.Graph" else importlib.import_module(module_name)
    real = getattr(owner, attr)
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        real(*args, **kwargs)  # the step's changes happen, then it fails
        raise RuntimeError(f"{step} failed")

    monkeypatch.setattr(owner, attr, failing)
    bc.BucketingPass(policy="merge_all", verify_plan_across_ranks=True)(gm.graph)
    with pytest.raises(RuntimeError, match=f"{step} failed"):
        bc.bucket_collectives(gm, policy="merge_all")
    monkeypatch.setattr(owner, attr, real)
    assert len(calls) == 2
    assert "pass failed; graph left as it was" in caplog.text and f"{step} failed" in caplog.text
    assert _graph_state(gm) == state
    gm.graph.lint()
    gm.recompile()
    assert gm.code == code
    assert len(bc.bucket_collectives(gm, policy="merge_all").buckets) == 2  # and it still buckets afterwards


def test_a_bucket_that_fails_to_build_leaves_no_node_behind(group_name, monkeypatch):
    """Its members stay as they were, with the reason; the other bucket still merges."""
    import bucketing.apply

    real = bucketing.apply.copy_provenance

    def fail_for_reductions(source, nodes):
        if source.target is c10d.reduce_scatter_tensor.default:
            raise RuntimeError("provenance exploded")
        real(source, nodes)

    monkeypatch.setattr(bucketing.apply, "copy_provenance", fail_for_reductions)
    gm = trace(lambda a, b, c, d: (ag(a, group_name), ag(b, group_name), rs(c, group_name), rs(d, group_name)),
               ((3,), f32), ((5,), f32), ((8,), f32), ((4,), f32))
    plan = bc.bucket_collectives(gm)
    assert [b.kind for b in plan.buckets] == ["all_gather"]
    assert sorted(s.reason for s in plan.skipped) == ["rewrite failed: provenance exploded"] * 2
    assert count(gm, c10d.reduce_scatter_tensor.default) == 2
    assert count(gm, c10d.wait_tensor.default) == 3  # the two reductions' and the all-gather bucket's
    assert count(gm, torch.ops.bucketing_ops.all_gather_copy_in.default) == 1
    effects = (c10d.wait_tensor.default, torch.ops.bucketing_ops.copy_out_into.default)
    assert all(n.users or n.op == "output" or n.target in effects for n in gm.graph.nodes)


def test_a_graph_that_cannot_be_put_back_fails_the_compile_loudly(group_name, monkeypatch, caplog):
    """If an original node is gone, the graph cannot be restored: the pass says so and
    raises, rather than hand Inductor a half-rewritten graph under a "left as it was" line."""
    import bucketing.apply
    import bucketing.apply.checkpoint

    gm = trace(lambda *xs: tuple(ag(x, group_name) for x in xs), ((3,), f32), ((5,), f32))
    real = bucketing.apply.replace_members

    def erase_then_fail(emitted):
        replaced = real(emitted)
        gm.graph.erase_node(replaced[0])  # a member's wait, which nothing uses any more
        raise RuntimeError("replace failed")

    monkeypatch.setattr(bucketing.apply, "replace_members", erase_then_fail)
    with pytest.raises(bucketing.apply.checkpoint.RestoreFailed, match="wait_tensor"):
        bc.BucketingPass()(gm.graph)
    assert "could not be put back" in caplog.text


def test_torch_style_drop_in_functions(group_name):
    gm = trace(lambda *xs: tuple(ag(x, group_name) for x in xs), ((3,), f32), ((5,), bf16), ((2,), f32))
    bc.bucket_all_gather(gm, None, "custom_ops_multidtype")
    assert count(gm, c10d.all_gather_into_tensor.default) == 1
    gm = trace(lambda *xs: tuple(ag(x, group_name) for x in xs), ((3,), f32), ((5,), bf16), ((2,), f32))
    bc.bucket_all_gather(gm, lambda i: 2000.0)  # torch's default mode: one bucket per dtype
    assert count(gm, c10d.all_gather_into_tensor.default) == 2
    gm = trace(lambda *xs: tuple(rs(x, group_name) for x in xs), ((8,), f32), ((4,), f32))
    bc.bucket_reduce_scatter(gm)
    assert count(gm, c10d.reduce_scatter_tensor.default) == 1
    gm = trace(lambda *xs: tuple(ar(x, group_name) for x in xs), ((8,), f32), ((4,), f32))
    bc.bucket_all_reduce(gm)
    assert count(gm, c10d.all_reduce.default) == 1


def test_coexists_with_torch_builtin_ops(group_name):
    import torch._inductor.fx_passes.bucketing as torch_bucketing  # registers bucketing::*

    assert hasattr(torch.ops.bucketing, "_pre_bucket_all_gather")
    assert hasattr(torch.ops.bucketing_ops, "all_gather_copy_in")
    gm = trace(lambda *xs: tuple(ag(x, group_name) for x in xs), ((4,), f32), ((4,), f32))
    torch_bucketing.bucket_all_gather(gm, lambda i: 2000.0, "custom_ops")
    gm2 = trace(lambda *xs: tuple(ag(x, group_name) for x in xs), ((4,), f32), ((4,), f32))
    bc.bucket_collectives(gm2)
    assert count(gm2, torch.ops.bucketing_ops.all_gather_copy_in.default) == 1


def test_works_without_fake_vals(group_name):
    # make_fx with real tensors gives real meta values; the pass brings its own fake mode.
    import torch.fx.experimental.proxy_tensor as pt

    gm = pt.make_fx(lambda a, b: (ag(a, group_name), ag(b, group_name)))(torch.zeros(3), torch.zeros(2, dtype=bf16))
    plan = bc.bucket_collectives(gm)
    assert len(plan.buckets) == 1
    gm.graph.lint()


def test_gather_in_place_fills_the_ranks_slot_and_gathers_into_the_buffer(group_name, caplog):
    """gather_in_place: the copy-in allocates the gathered buffer, the collective reads this
    rank's slot of it and writes the buffer; a group that does not resolve gathers through
    the staging chunk, with a log line."""
    gm = trace(lambda *xs: tuple(ag(x, group_name) for x in xs), ((3,), f32), ((5,), bf16))
    bc.bucket_collectives(gm, gather_in_place=True)
    assert count(gm, c10d.all_gather_into_tensor.default) == 0
    (gather,) = [n for n in gm.graph.nodes if n.target is c10d.all_gather_into_tensor_out.default]
    (copy_in,) = [n for n in gm.graph.nodes if n.target is torch.ops.bucketing_ops.all_gather_copy_in_slot.default]
    slot = gather.args[0]
    chunk = copy_in.args[4]
    assert gather.kwargs["out"] is copy_in and copy_in.args[5:] == (WORLD, 0)
    assert slot.target is torch.ops.aten.slice.Tensor and slot.args == (copy_in, 0, 0, chunk)
    assert tuple(copy_in.meta["val"].shape) == (WORLD * chunk,)

    gm = trace(lambda *xs: tuple(ag(x, "no-such-group") for x in xs), ((3,), f32), ((5,), bf16))
    with caplog.at_level(logging.INFO, logger="bucketing"):
        bc.bucket_collectives(gm, gather_in_place=True)
    assert count(gm, torch.ops.bucketing_ops.all_gather_copy_in.default) == 1
    assert "gather_in_place: group no-such-group does not resolve here" in caplog.text
