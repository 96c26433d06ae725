"""The simulator's rule for which nodes run no kernel (benchmarks/sim_timeline.py's
`is_free`), held against a graph traced by hand, and its independence from the
pass it judges."""

from __future__ import annotations

import ast
import operator
import pathlib

import torch
from torch.fx.experimental.proxy_tensor import make_fx

import bucketing.ops  # noqa: F401  (registers bucketing_ops, whose copies the rule must charge)
from benchmarks import sim_timeline as tl

c10d = torch.ops._c10d_functional
aten = torch.ops.aten

SIM_TIMELINE = pathlib.Path(tl.__file__)


def _step(w, x, shard, out):
    y = torch.mm(x, w)  # a kernel
    flat = y.view(-1)  # a view
    head, tail = torch.split(flat, [3, 13])  # split_with_sizes (views) and two getitems
    scratch = torch.empty(16, dtype=torch.uint8)  # an allocation
    packed = torch.ops.bucketing_ops.all_gather_copy_in([shard], [0], [shard.numel()], "bfloat16", 64)
    gathered = c10d.wait_tensor(c10d.all_gather_into_tensor(packed, 4, "0"))
    filled = torch.full((4,), 1.0)  # a fill kernel, not an allocation
    out.copy_(y)  # an in-place copy: it writes its alias
    return head + 1, tail, scratch, gathered, filled


def _traced():
    return make_fx(_step, tracing_mode="fake")(
        torch.randn(4, 4), torch.randn(4, 4), torch.randn(8, dtype=torch.bfloat16), torch.empty(4, 4))


def test_free_nodes_of_a_traced_step():
    gm = _traced()
    by_target = {}
    for node in gm.graph.nodes:
        key = node.op if node.op != "call_function" else node.target
        by_target.setdefault(key, set()).add(tl.is_free(node))
    free = {
        "placeholder", "output", aten.view.default, aten.split_with_sizes.default, operator.getitem,
        aten.empty.memory_format, c10d.all_gather_into_tensor.default, c10d.wait_tensor.default,
    }
    kernels = {
        aten.mm.default, aten.add.Tensor, aten.full.default, aten.copy_.default,
        torch.ops.bucketing_ops.all_gather_copy_in.default,
    }
    assert set(by_target) == free | kernels, set(by_target) ^ (free | kernels)
    assert {t for t, v in by_target.items() if v == {True}} == free
    assert {t for t, v in by_target.items() if v == {False}} == kernels


def test_free_rule_on_single_nodes():
    """Classes the traced step does not reach: reshape (a post-grad graph's views),
    the other uninitialised allocations, and the pass's copy-out ops."""
    import torch.fx as fx

    g = fx.Graph()
    x = g.placeholder("x")
    cases = {
        aten.reshape.default: ((x, [16]), True),
        aten._unsafe_view.default: ((x, [16]), True),
        aten.empty_strided.default: (([4, 4], [4, 1]), True),
        aten.new_empty.default: ((x, [4]), True),
        aten.new_empty_strided.default: ((x, [4], [1]), True),
        aten.empty_like.default: ((x,), True),
        aten.zeros.default: (([4],), False),
        aten.clone.default: ((x,), False),
        c10d.reduce_scatter_tensor.default: ((x, "sum", 4, "0"), True),
        torch.ops.bucketing_ops.copy_out.default: ((x, 1, [0], [8], "bfloat16", [4], [1]), False),
        torch.ops.bucketing_ops.copy_out_into.default: ((x, 1, [0], [8], "bfloat16", [x]), False),
    }
    for target, (args, expected) in cases.items():
        node = g.call_function(target, args)
        assert tl.is_free(node) is expected, target


def test_sim_timeline_imports_nothing_from_bucketing():
    """The judge keeps its own rules: nothing in sim_timeline comes from the judged pass."""
    tree = ast.parse(SIM_TIMELINE.read_text())
    imported = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            imported.append("." * node.level + (node.module or ""))
    assert imported, "no imports parsed"
    assert not [m for m in imported if m == "bucketing" or m.startswith("bucketing.")], imported
    assert not [m for m in imported if m.startswith(".")], imported  # nothing relative either
