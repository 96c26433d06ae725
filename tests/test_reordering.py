"""Reductions on real-valued data: the reordering bound the suite holds merged sums to,
what gloo does when sums are merged, and that the catalog's real-valued cases see it."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from conformance import adapters, catalog, verdict
from conformance.harness import UNIT_ROUNDOFF, compare, reordering_bound, reordering_bounds
from conformance.pool import raise_on_failure
from conformance.programs import Step, build, make_inputs, output_steps

f32 = torch.float32


# -- the bound ------------------------------------------------------------------------------

def test_bound_is_2_n_minus_1_u_sum_abs():
    assert UNIT_ROUNDOFF == {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, f32: 2.0**-24, torch.float64: 2.0**-53}
    got = reordering_bound(torch.tensor([1.0, 3.0]), 4, f32)
    assert got.dtype == torch.float64 and got.tolist() == [6 * 2.0**-24, 18 * 2.0**-24]
    assert reordering_bound(torch.tensor([1.0]), 3, torch.bfloat16).item() == 4 * 2.0**-8


def test_compare_takes_a_difference_within_the_bound_and_catches_one_beyond():
    expected = torch.ones(5, dtype=f32)
    bound = reordering_bound(torch.full((5,), 3.0), 4, f32)  # 18 * 2^-24 = 9 ulps of 1.0
    within = expected.clone()
    within[2] += 4 * 2.0**-23
    diff, beyond, reordered = compare([expected], [within], [bound])
    assert diff is None and beyond is None
    assert reordered == [(0, 4 * 2.0**-23, 18 * 2.0**-24, pytest.approx(8 / 18))]

    perturbed = within.clone()
    perturbed[3] += 10 * 2.0**-23  # 20 * 2^-24 > 18 * 2^-24
    diff, beyond, reordered = compare([expected], [perturbed], [bound])
    assert diff is None
    assert beyond[:2] == (0, 3) and "> bound" in beyond[2] and "largest difference" in beyond[2]
    assert reordered[0][3] == pytest.approx(20 / 18)


def test_compare_keeps_bytes_where_there_is_no_bound():
    exact, reduced = torch.tensor([1.0, -0.0]), torch.tensor([2.0])
    flipped = torch.tensor([1.0, 0.0])
    bound = torch.ones(1, dtype=torch.float64)
    diff, beyond, _ = compare([reduced, exact], [reduced.clone(), flipped], [bound, None])
    assert diff == (1, 7, "byte 7: expected 128, got 0") and beyond is None  # the output's index in the program
    nan = torch.tensor([float("nan")])
    _, beyond, _ = compare([torch.tensor([1.0])], [nan], [bound])
    assert beyond is not None and beyond[:2] == (0, 0)  # NaN is never within a bound
    assert compare([nan], [nan.clone()], [bound])[1] is None


class _Ctx:
    def __init__(self, groups):
        self.groups = groups


def test_bounds_only_where_a_merge_may_reorder(group_name):
    world = dist.group.WORLD
    ctx = _Ctx({"world": (group_name, 4, world), "pairs": (group_name, 2, world)})
    steps = (
        Step("all_reduce", f32, (3,), data="normal"),  # bounded
        Step("all_reduce", f32, (3,), reduce_op="max", data="normal"),  # max: order-free
        Step("all_gather", f32, (3,), data="normal"),  # data movement
        Step("all_reduce", torch.int32, (3,)),  # integers: exact in any order
        Step("all_reduce", f32, (3,), group="pairs", data="normal"),  # 2 values: a + b = b + a
        Step("reduce_scatter", f32, (2,), data="mixed", waits=2),  # bounded, twice
        Step("all_reduce", f32, (3,), data="normal", use_now=True),  # consume doubles: bound doubles
        Step("all_reduce", f32, (2, 2), data="normal", matmul_now=True),  # no bound through a matmul
    )
    groups = {"world": (group_name, 4, world), "pairs": (group_name, 2, world)}
    inputs = make_inputs(steps, groups, "bounds", 0)
    bounds = reordering_bounds(ctx, steps, inputs, exact=False)
    assert output_steps(steps) == [0, 1, 2, 3, 4, 5, 5, 6, 7]
    assert [b is not None for b in bounds] == [True, False, False, False, False, True, True, True, False]
    # The fake group sums nothing: sum |x_i| is this rank's |x|.
    assert torch.equal(bounds[0], reordering_bound(inputs[0].abs(), 4, f32))
    assert torch.equal(bounds[5], reordering_bound(inputs[5][:2].abs(), 4, f32)) and torch.equal(bounds[5], bounds[6])
    assert torch.equal(bounds[7], 2 * reordering_bound(inputs[6].abs(), 4, f32))
    assert len(build(steps, groups)(*inputs)) == len(bounds)
    assert reordering_bounds(ctx, steps, inputs, exact=True) == [None] * len(bounds)


def test_verdict_names_the_bound_and_the_largest_difference():
    result = {"diff": None, "beyond_bound": (2, 7, "element 7: ... |difference| 3e-06 > bound 1e-06; largest "
                                                   "difference 3e-06 (bound there 1e-06)"),
              "same_graph_on_all_ranks": True, "before": {}, "after": {}, "plan": ""}
    failure = verdict.fx("real-ar-normal-f32-w4", [result] * 4, adapters.load("project"))
    assert "rank 0: output 2 is beyond the reordering bound" in failure and "largest difference 3e-06" in failure


def test_which_adapters_claim_exact_reductions():
    assert adapters.load("identity").claims_exact_reductions({})
    project = adapters.load("project")
    assert project.claims_exact_reductions({"exact_reductions": True})
    assert not project.claims_exact_reductions({}) and not project.claims_exact_reductions({"exact_reductions": False})
    for name in ("torch", "torch-manual", "torch-overlap"):
        assert not adapters.load(name).claims_exact_reductions({"exact_reductions": True}), name
    assert not adapters.resolve(lambda gm, **options: None).claims_exact_reductions({})
    assert "exact_reductions" in catalog.OPTIONS


# -- the data ---------------------------------------------------------------------------------

def test_real_valued_data_differs_per_rank_and_is_deterministic():
    groups = {"world": ("g", 4, None)}
    steps = (Step("all_reduce", f32, (4096,), data="normal"), Step("reduce_scatter", torch.bfloat16, (4096,), data="mixed"),
             Step("all_reduce", f32, (16,)))
    r0, r1, again = (make_inputs(steps, groups, "seed", r) for r in (0, 1, 0))
    assert all(torch.equal(a, b) for a, b in zip(r0, again))
    assert not torch.equal(r0[0], r1[0]) and not torch.equal(r0[1], r1[1])
    assert r0[0].dtype == f32 and r0[1].dtype == torch.bfloat16 and r0[1].shape == (4 * 4096,)
    assert r0[0].frac().ne(0).any()  # real values, not integers
    magnitudes = r0[1].float().abs().log10()
    assert magnitudes.min() < -3 and magnitudes.max() > 3  # mixed: 10^-4 to 10^4
    assert r0[2].frac().eq(0).all() and r0[2].abs().max() <= 3  # the default: small integers


def test_steps_refuse_real_data_they_cannot_hold():
    for bad in (dict(dtype=torch.int32, data="normal"), dict(dtype=torch.float8_e4m3fn, data="mixed"),
                dict(dtype=f32, data="uniform"), dict(dtype=f32, waits=0)):
        with pytest.raises(ValueError):
            Step("all_reduce", shape=(3,), **bad)


def test_exact_variants_expect_merging_only_on_groups_of_2():
    for name in ("real-ar-normal-f32", "real-rs-many-bf16"):
        plain, exact = catalog.BY_NAME[name], catalog.BY_NAME[f"{name}-exact"]
        assert exact.options_for(4) == {"exact_reductions": True} and plain.options_for(4) == {}
        for w in (2, 3, 4):
            assert plain.expect_for(w) is not None
            assert exact.expect_for(w) == (plain.expect_for(w) if w == 2 else None)


# -- on real gloo ranks -------------------------------------------------------------------------

def test_a_real_case_at_4_ranks_differs_byte_for_byte_yet_stays_within_the_bound(rank_pools):
    """What the bound lets through is really there: compared as bytes, the default-options
    case would fail; and a pass that claims exact reductions is held to bytes (and fails)."""
    pool = rank_pools.get(4)
    case_id = "real-ar-normal-f32-w4"
    results = raise_on_failure(pool.run("conformance.harness:run_fx_case", timeout_s=120, case_id=case_id,
                                        adapter_spec="project"), case_id)
    assert verdict.fx(case_id, results, adapters.load("project")) is None
    assert results[0]["after"]["all_reduce"] == 1
    reordered = [entry for r in results for entry in r["reordered"]]
    assert reordered and all(0 < largest <= bound for _, largest, bound, _ in reordered)

    spec = "tests.reordering_ranks:CLAIMS_EXACT"
    results = raise_on_failure(pool.run("conformance.harness:run_fx_case", timeout_s=120, case_id=case_id,
                                        adapter_spec=spec), case_id)
    failure = verdict.fx(case_id, results, adapters.load(spec))
    assert failure and "differs at byte offset" in failure


@pytest.mark.parametrize("kind", ["all_reduce", "reduce_scatter"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_gloo_merged_sums_at_3_ranks(kind, dtype, rank_pools):
    """gloo at 3 ranks, each rank its own normal data: a sum of one buffer holding every
    member differs from the members' separate sums (all-reduce: on every rank; reduce-scatter
    of 40 small members and one large: on ranks 1 and 2, rank 0's part matched), the same
    bytes run after run, within the reordering bound."""
    pool = rank_pools.get(3)
    runs = [raise_on_failure(pool.run("tests.reordering_ranks:merged_vs_separate", timeout_s=120, kind=kind,
                                      dtype=dtype, seed=0), kind) for _ in range(2)]
    assert [r["digest"] for r in runs[0]] == [r["digest"] for r in runs[1]], "gloo's sums changed between runs"
    first = runs[0]
    assert not all(r["identical"] for r in first), f"{kind} {dtype}: merged sums matched at 3 ranks"
    assert all(r["ratio"] <= 1 for r in first), [(r["largest"], r["bound"]) for r in first]
