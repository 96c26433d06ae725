"""FX-level checks, run on every rank of a pool (see pool.py).

Each rank traces the case program under fake mode with the real process group,
applies the pass under test to one copy, runs both graphs for real and compares
every output byte for byte, except the results of sums that a merge may
reorder, which must stay within the reordering bound (`reordering_bounds`). The
rank returns what the test process needs to judge: collective counts before and
after, the first differing byte, the first element beyond its bound, the plan
text, and a digest of the rewritten graph (all ranks must build the same one).
"""

from __future__ import annotations

import hashlib

import torch
import torch.distributed as dist
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import make_fx

from . import adapters, catalog
from .programs import GLOO_UNSUPPORTED, build, collective_input, make_inputs, output_steps

c10d = torch.ops._c10d_functional
aten = torch.ops.aten

# The suite keeps its own table of collectives on purpose: it must not depend on
# the pass it checks (and it also counts the `_out` all-gather some passes emit).
KINDS = ("all_gather", "reduce_scatter", "all_reduce")
KIND_BY_TARGET = {
    c10d.all_gather_into_tensor.default: "all_gather",
    c10d.all_gather_into_tensor_out.default: "all_gather",
    c10d.reduce_scatter_tensor.default: "reduce_scatter",
    c10d.all_reduce.default: "all_reduce",
}


def count_collectives(graph: fx.Graph) -> dict[str, int]:
    counts = dict.fromkeys(KINDS, 0)
    for node in graph.nodes:
        kind = KIND_BY_TARGET.get(node.target)
        if kind:
            counts[kind] += 1
    return counts


def _as_bytes(x: torch.Tensor) -> torch.Tensor:
    if x.numel() == 0:  # empty tensors may keep odd strides that view(uint8) rejects
        return x.new_empty((*x.shape[:-1], x.shape[-1] * x.element_size()), dtype=torch.uint8)
    # clone(contiguous_format) gives canonical strides; contiguous() may keep a
    # stride != 1 on a size-1 last dim, which view(uint8) rejects.
    return x.clone(memory_format=torch.contiguous_format).view(torch.uint8)


def _from_bytes(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if x.numel() == 0:  # view(dtype) rejects empty byte tensors with odd strides
        return x.new_empty((*x.shape[:-1], x.shape[-1] // dtype.itemsize), dtype=dtype)
    return x.view(dtype)


def gather_bytes_where_unsupported(gm: fx.GraphModule, backend: str) -> None:
    """gloo cannot gather fp8 or int16: gather their bytes and view them back."""
    if backend != "gloo":
        return
    graph = gm.graph
    changed = False
    for node in list(graph.nodes):
        if node.target is not c10d.all_gather_into_tensor.default:
            continue
        inp = node.args[0]
        dtype = inp.meta["val"].dtype
        if dtype not in GLOO_UNSUPPORTED:
            continue
        wait = next(iter(node.users))
        with graph.inserting_before(node):
            as_bytes = graph.call_function(_as_bytes, (inp,))
        node.args = (as_bytes, *node.args[1:])
        with graph.inserting_after(wait):
            back = graph.call_function(_from_bytes, (wait, dtype))
        wait.replace_all_uses_with(back, delete_user_cb=lambda u, back=back: u is not back)
        changed = True
    if changed:
        gm.recompile()


def first_difference(expected, actual) -> tuple[int, int, str] | None:
    """(output index, byte offset, what) of the first mismatch, or None."""
    if len(expected) != len(actual):
        return (-1, -1, f"{len(expected)} outputs expected, {len(actual)} produced")
    for i, (e, a) in enumerate(zip(expected, actual)):
        if e is None or a is None:  # a parameter without a gradient
            if e is not None or a is not None:
                return (i, -1, f"{'no tensor' if e is None else 'a tensor'} expected, "
                               f"{'none' if a is None else 'a tensor'} produced")
            continue
        if e.dtype != a.dtype or e.shape != a.shape:
            return (i, -1, f"{e.dtype}{list(e.shape)} expected, {a.dtype}{list(a.shape)} produced")
        eb, ab = (_as_bytes(t.detach().reshape(-1)).cpu() for t in (e, a))
        diff = (eb != ab).nonzero()
        if diff.numel():
            off = int(diff[0])
            return (i, off, f"byte {off}: expected {int(eb[off])}, got {int(ab[off])}")
    return None


def largest_difference(expected, actual) -> float:
    """The largest |expected - actual| over all elements of all outputs (0.0 when bit-identical)."""
    largest = 0.0
    for e, a in zip(expected, actual):
        if e is not None and a is not None and e.numel():
            largest = max(largest, float((e.detach().double() - a.detach().double()).abs().max()))
    return largest


# Unit roundoff of the dtypes a sum may be reordered in (integer sums are exact in any order).
UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-24, torch.float64: 2.0**-53}


def reordering_bound(abs_sum: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
    """How far two summation orders of n terms may part, per element:
    2 (n - 1) u sum_i |x_i| (float64), u the unit roundoff of `dtype`."""
    return 2 * (n - 1) * UNIT_ROUNDOFF[dtype] * abs_sum.to(torch.float64)


def reordering_bounds(ctx, steps, inputs, exact: bool) -> list[torch.Tensor | None]:
    """Per output of the program: the bound each element must stay within, or None where
    the bytes must match. A bound applies to a floating sum over more than 2 ranks (a
    merge may add in another order; 2 values add the same in any order) when the pass
    claims no exact reductions (`exact`), and only to the result itself or its `consume`
    (x 2, exact); everything else (all-gathers, min/max, integers, matmuls) is bytes.

    sum_i |x_i| comes from an all_reduce of |x| in float64 over the step's group rather
    than from regenerating the other ranks' inputs: it sees exactly what each rank's
    collective received (slices, casts) and needs no group membership. Its own error
    (float64, at most 4 terms) is far below the bound. Every rank must call this with
    the same steps and `exact`: the all_reduces run in lockstep."""
    per_step = []
    for step, x in zip(steps, inputs):
        _, size, group = ctx.groups[step.group]
        if (exact or size <= 2 or step.kind == "all_gather" or step.reduce_op != "sum"
                or step.dtype not in UNIT_ROUNDOFF or step.matmul_now):
            per_step.append(None)
            continue
        abs_sum = collective_input(step, x).abs().to(torch.float64).contiguous()
        dist.all_reduce(abs_sum, group=group)
        if step.kind == "reduce_scatter":  # this rank's part
            abs_sum = abs_sum.narrow(0, dist.get_rank(group) * step.shape[0], step.shape[0])
        bound = reordering_bound(abs_sum, size, step.dtype)
        per_step.append(bound * 2 if step.use_now else bound)  # consume() doubles: exact
    return [per_step[i] for i in output_steps(steps)]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().reshape(-1).contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def compare(expected, actual, bounds) -> tuple[tuple | None, tuple | None, list]:
    """(diff, beyond, reordered): the first byte mismatch (`first_difference`, output
    index in the program) among the outputs without a bound; the first element beyond
    its bound, (output, element, what), or None; and for each bounded output whose
    bytes differ (output, largest |difference|, its bound, largest |difference| / bound).
    NaN and infinities must match bit for bit."""
    if len(expected) != len(actual):
        return first_difference(expected, actual), None, []
    bounded = [bound is not None and e is not None and a is not None and e.dtype == a.dtype and e.shape == a.shape
               for e, a, bound in zip(expected, actual, bounds)]
    bytewise = [i for i, b in enumerate(bounded) if not b]
    diff = first_difference([expected[i] for i in bytewise], [actual[i] for i in bytewise])
    if diff is not None:
        diff = (bytewise[diff[0]], *diff[1:])
    reordered, first = [], None
    for i in (i for i, b in enumerate(bounded) if b):
        e, a, bound = expected[i], actual[i], bounds[i]
        same = _bits(e) == _bits(a)
        if bool(same.all()):
            continue
        delta = (a.detach().reshape(-1).to(torch.float64) - e.detach().reshape(-1).to(torch.float64)).abs()
        bound = bound.reshape(-1)
        within = same | (delta <= bound)
        ratio = torch.where(same | (delta == 0), 0.0, delta / bound)
        worst = int(delta.nan_to_num(float("inf")).argmax())
        reordered.append((i, float(delta[worst]), float(bound[worst]), float(ratio.nan_to_num(float("inf")).max())))
        if first is None and not bool(within.all()):
            k = int((~within).nonzero()[0])
            first = (i, k, f"element {k}: expected {float(e.reshape(-1)[k])!r}, got {float(a.reshape(-1)[k])!r}, "
                           f"|difference| {float(delta[k]):.3g} > bound {float(bound[k]):.3g}; largest difference "
                           f"{float(delta[worst]):.3g} (bound there {float(bound[worst]):.3g})")
    return diff, first, reordered


def rank_neutral_text(graph: fx.Graph, groups: dict) -> str:
    """The graph as text with group names replaced by their roles ("pairs"), so
    ranks in different subgroups of the same role compare equal."""
    alias = {group_name: role for role, (group_name, _, _) in groups.items()}

    def norm(a):
        return alias.get(a, a) if isinstance(a, str) else a

    lines = []
    for node in graph.nodes:
        args = fx.node.map_aggregate(node.args, norm)
        lines.append(f"{node.op} {node.target} {args} {node.kwargs}")
    return "\n".join(lines)


def trace(case: catalog.Case, groups: dict, inputs) -> fx.GraphModule:
    return make_fx(build(case.steps, groups), tracing_mode="fake")(*inputs)


def run_fx_case(ctx, case_id: str, adapter_spec) -> dict:
    """Rank task: the FX-level check of one catalog case."""
    case, world = catalog.get(case_id)
    assert world == ctx.world_size, (case_id, ctx.world_size)
    return check_steps(ctx, case.steps, case.options_for(world), case.name, adapter_spec)


def check_steps(ctx, steps, options: dict, seed_text: str, adapter_spec="project") -> dict:
    """Rank task body: trace `steps`, apply the pass, run both graphs, compare bytes."""
    from .programs import Step

    steps = tuple(s if isinstance(s, Step) else Step(**s) for s in steps)
    adapter = adapters.resolve(adapter_spec)
    inputs = make_inputs(steps, ctx.groups, seed_text, ctx.rank, ctx.device)
    case = catalog.Case(seed_text, steps, None)
    reference = trace(case, ctx.groups, inputs)
    gm = trace(case, ctx.groups, inputs)
    before = count_collectives(gm.graph)
    plan = adapter.apply_fx(gm, **options)
    gm.graph.lint()
    gm.recompile()
    after = count_collectives(gm.graph)
    code = rank_neutral_text(gm.graph, ctx.groups)
    gather_bytes_where_unsupported(reference, ctx.backend)
    gather_bytes_where_unsupported(gm, ctx.backend)
    expected = reference(*inputs)
    actual = gm(*inputs)
    bounds = reordering_bounds(ctx, steps, inputs, adapter.claims_exact_reductions(options))
    diff, beyond, reordered = compare(expected, actual, bounds)
    digest = hashlib.sha256(code.encode()).hexdigest()
    digests = [None] * ctx.world_size
    dist.all_gather_object(digests, digest)
    return {
        "before": before,
        "after": after,
        "diff": diff,
        "beyond_bound": beyond,
        "reordered": reordered,
        "plan": plan_text(plan),
        "same_graph_on_all_ranks": len(set(digests)) == 1,
    }


def plan_text(plan) -> str:
    """What a pass says it did, as it prints itself (this project's `Plan` prints its buckets)."""
    return "" if plan is None else str(plan)


def run_inductor_case(ctx, case_id: str, adapter_spec) -> dict:
    """Rank task: compile the case with and without the pass; compare with eager, bit for bit."""
    from .compiled import compile_and_run

    case, world = catalog.get(case_id)
    adapter = adapters.resolve(adapter_spec)
    program = build(case.steps, ctx.groups)
    inputs = make_inputs(case.steps, ctx.groups, case.name, ctx.rank, ctx.device)
    eager = program(*inputs)
    plain, _ = compile_and_run(program, inputs)
    custom = adapter.inductor_pass(**case.options_for(world)) if adapter.inductor_pass else None
    bucketed, code = compile_and_run(program, inputs, custom, get_code=True)
    return {
        "vs_eager": first_difference(eager, bucketed),
        "vs_compiled": first_difference(plain, bucketed),
        "compiled_vs_eager": first_difference(eager, plain),
        "plan": plan_text(getattr(custom, "last_plan", None)),
        "code": code,
    }
