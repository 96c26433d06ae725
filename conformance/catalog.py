"""The conformance catalog: declarative cases, each checked by every generic test.

A `Case` is a collective program (steps), the pass options to use, and the
collective counts expected after bucketing (`None`: the graph keeps its
collectives). Adding a case here gives it the FX-level bitwise check on every
world size it lists, the structure check, and the cross-rank plan check.

Outputs are compared byte for byte, except where a merged reduction may add in
another order: a sum over more than 2 ranks, by a pass that does not claim exact
reductions for the case's options (PassAdapter.exact_reductions). Each element of
those must stay within the reordering bound (harness.reordering_bound). Cases
named `real-*` give every rank its own real-valued data (`Step.data`) and check
exactly that. Integer data (`data="int"`, small integers, exact in any order)
tests data movement only: the other reduction cases use it to check every dtype,
op, shape and structure bit for bit, whatever the summation order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from .programs import Step

bf16, f16, f32, f64 = torch.bfloat16, torch.float16, torch.float32, torch.float64
e4m3, e5m2 = torch.float8_e4m3fn, torch.float8_e5m2
i8, i16, i32, i64, u8, b = torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool

ALL_DTYPES = (bf16, f16, f32, f64, e4m3, e5m2, i8, i16, i32, i64, u8, b)
REDUCTION_DTYPES = (bf16, f32, f16, i32)
GLOO_REDUCE_OPS = ("sum", "min", "max")  # gloo has no avg
WORLD_SIZES = (2, 3, 4)

Options = dict | Callable[[int], dict]

# The options a case may set: one vocabulary for every pass. An adapter lists
# the ones it honours (PassAdapter.honours); a case whose expected collective
# counts rely on an option the adapter ignores is skipped for it, saying which.
OPTIONS = {
    "bucket_cap_mb": "largest bucket in MiB (an all-gather counts its gathered output), or fn(bucket index) -> MiB",
    "max_bucket_count": "most collectives in one bucket",
    "collectives": "kinds to bucket: a subset of ('all_gather', 'reduce_scatter', 'all_reduce')",
    "multidtype": "all-gathers of different dtypes may share a bucket (False: one bucket per dtype)",
    "policy": "how buckets are drawn: 'module' (blocks), 'locality' (compute windows), 'merge_all'",
    "locality_flops": "compute (FLOPs) a bucket may span before it is closed, under the locality rule",
    "copy_out": "how members leave a merged buffer: 'copy' (dense, bit-identical), 'packed' or 'views'",
    "module_buckets": "explicit plan: entries of module FQNs whose collectives share a bucket",
    "exact_reductions": "True: reductions merge only where the result stays bit-identical (groups of at most 2)",
}


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    steps: tuple[Step, ...]
    # Collectives of each kind after bucketing (None: unchanged), or fn(world size) -> that.
    expect: dict[str, int] | None | Callable[[int], dict[str, int] | None]
    options: Options = dataclasses.field(default_factory=dict)
    world_sizes: tuple[int, ...] = WORLD_SIZES
    note: str = ""

    def __post_init__(self):
        if not callable(self.options):
            check_options(self.options, f"case {self.name}")

    def options_for(self, world_size: int) -> dict:
        options = self.options(world_size) if callable(self.options) else dict(self.options)
        return check_options(options, f"case {self.name}")

    def expect_for(self, world_size: int) -> dict[str, int] | None:
        return self.expect(world_size) if callable(self.expect) else self.expect

    def ids(self) -> list[str]:
        return [f"{self.name}-w{w}" for w in self.world_sizes]


def check_options(options: dict, where: str) -> dict:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"{where}: options {unknown} are not in the catalog's vocabulary ({sorted(OPTIONS)})")
    return options


def dname(dtype: torch.dtype) -> str:
    return {
        bf16: "bf16", f16: "f16", f32: "f32", f64: "f64", e4m3: "e4m3", e5m2: "e5m2",
        i8: "i8", i16: "i16", i32: "i32", i64: "i64", u8: "u8", b: "bool",
    }[dtype]


def ag(dtype, *shape, **kw) -> Step:
    return Step("all_gather", dtype, tuple(shape), **kw)


def rs(dtype, *shape, **kw) -> Step:
    return Step("reduce_scatter", dtype, tuple(shape), **kw)


def ar(dtype, *shape, **kw) -> Step:
    return Step("all_reduce", dtype, tuple(shape), **kw)


def _ag_bytes(steps, world: int) -> int:
    total = 0
    for s in steps:
        n = 1
        for d in s.shape:
            n *= d
        total += n * s.dtype.itemsize * world
    return total


def _cases() -> list[Case]:
    cases: list[Case] = []
    add = cases.append

    # Every dtype alone: odd, even and prime numels, 1-D and 2-D.
    for d in ALL_DTYPES:
        add(Case(f"ag-single-{dname(d)}", (ag(d, 7), ag(d, 8), ag(d, 13, 3)), {"all_gather": 1}))

    # Every dtype beside bf16 and beside f64, alternating, odd sizes: one bucket
    # in multi-dtype mode, one per dtype (merged across the interleaving) otherwise.
    for partner in (bf16, f64):
        for d in ALL_DTYPES:
            if d == partner:
                continue
            steps = (ag(partner, 5), ag(d, 3), ag(partner, 7, 2), ag(d, 11))
            add(Case(f"ag-pair-{dname(partner)}-{dname(d)}", steps, {"all_gather": 1}))
            if partner == bf16:
                add(Case(f"ag-perdtype-bf16-{dname(d)}", steps, {"all_gather": 2}, {"multidtype": False}))

    # The headline mix, bf16 weights beside f32 norms, over numel classes.
    numels = {"odd": (5, 9), "even": (6, 8), "prime": (13, 17), "zero": (0, 4), "one": (1, 1), "large": (300_001, 262_147)}
    for label, (n_bf, n_f) in numels.items():
        steps = (ag(bf16, n_bf), ag(f32, n_f), ag(bf16, n_f), ag(f32, n_bf))
        add(Case(f"ag-bf16-f32-{label}", steps, {"all_gather": 1}))

    add(Case("ag-all-empty", (ag(bf16, 0), ag(f32, 0, 3), ag(i8, 0)), {"all_gather": 1}))
    add(Case("ag-empty-bytes-only", (ag(i16, 2, 0), ag(e5m2, 0, 3), ag(f32, 3)), {"all_gather": 1},
             note="fuzz counterexample: empty int16/fp8 members (gathered as bytes on gloo)"))
    add(Case("ag-empty-strided-i16", (ag(i16, 0, 3, slice_input=True), ag(bf16, 3), ag(i16, 2, slice_input=True)),
             {"all_gather": 1}, note="fuzz counterexample: empty strided int16 slice gathered as bytes"))
    add(Case("ag-viewed-after-gather", (ag(f64, 1, 3, 5), ag(f32, 1, 8), ag(b, 2, depends_on=0)), {"all_gather": 2},
             note="fuzz counterexample: a later input views an earlier (multi-dim) result as 1-D"))
    add(Case("ag-size-one-last-dim", (ag(i16, 3, 1, slice_input=True), ag(e4m3, 2, 1, slice_input=True), ag(f32, 3)),
             {"all_gather": 1}, note="fuzz counterexample: size-1 last dim with stride 2, gathered as bytes"))
    add(Case("ag-3way", (ag(bf16, 5), ag(f32, 3), ag(e4m3, 7), ag(bf16, 1), ag(e4m3, 2)), {"all_gather": 1}))
    eight = (bf16, f16, f32, f64, e4m3, i8, i32, b)
    add(Case("ag-8way", tuple(ag(d, 3 + i) for i, d in enumerate(eight)), {"all_gather": 1}))
    add(Case("ag-8way-perdtype", tuple(ag(d, 3 + i) for i, d in enumerate(eight)), {"all_gather": 8}, {"multidtype": False}))
    add(Case("ag-12way", tuple(ag(d, 2 * i + 1) for i, d in enumerate(ALL_DTYPES)), {"all_gather": 1}))
    add(Case("ag-odd-chunks", (ag(i8, 3), ag(bf16, 3), ag(e5m2, 1), ag(f32, 1), ag(i16, 5)), {"all_gather": 1},
             note="per-rank chunks of odd byte sizes before wider dtypes"))

    # Shapes 1-D to 4-D, gathered along dim 0.
    shapes = {1: (5,), 2: (3, 5), 3: (3, 2, 5), 4: (1, 3, 2, 3)}
    for rank_, shape in shapes.items():
        add(Case(f"ag-rank{rank_}", (ag(bf16, *shape), ag(f32, *shape), ag(i8, *shape)), {"all_gather": 1}))

    # Member counts, alternating bf16/f32.
    for n in (1, 2, 8, 17, 64, 300):
        steps = tuple(ag(bf16 if i % 2 else f32, 3 + i % 5) for i in range(n))
        add(Case(f"ag-members-{n}", steps, {"all_gather": 1} if n > 1 else None))

    # Inputs that are casts (FSDP mixed precision) and views of other tensors.
    add(Case("ag-cast-fused", tuple(ag(bf16, 5 + i, cast_from=f32) for i in range(4)), {"all_gather": 1}))
    add(Case("ag-cast-mixed", (ag(bf16, 5, cast_from=f32), ag(f32, 3), ag(bf16, 4, cast_from=f16), ag(e4m3, 3, cast_from=f32)),
             {"all_gather": 1}))
    add(Case("ag-slice-input", (ag(bf16, 5, slice_input=True), ag(f32, 3, 2, slice_input=True), ag(i16, 7, slice_input=True)),
             {"all_gather": 1}))
    # Members as fused views (copy_out="views"): a bool member comes back from its bytes.
    add(Case("ag-views-bool", (ag(bf16, 5), ag(b, 3), ag(f32, 7, 2), ag(b, 11)), {"all_gather": 1},
             {"copy_out": "views"}))
    # Members as contiguous slices of one packed run per dtype (copy_out="packed").
    add(Case("ag-packed-bool", (ag(bf16, 5), ag(b, 3), ag(f32, 7, 2), ag(b, 11)), {"all_gather": 1},
             {"copy_out": "packed"}))
    add(Case("ag-cast-of-slice", (ag(bf16, 5, cast_from=f32, slice_input=True), ag(f32, 6)), {"all_gather": 1}))

    # Reductions: every op gloo supports, every reduction dtype.
    for op in GLOO_REDUCE_OPS:
        for d in REDUCTION_DTYPES:
            add(Case(f"rs-{op}-{dname(d)}", (rs(d, 5, reduce_op=op), rs(d, 3, 2, reduce_op=op), rs(d, 1, reduce_op=op)),
                     {"reduce_scatter": 1}))
            add(Case(f"ar-{op}-{dname(d)}", (ar(d, 5, reduce_op=op), ar(d, 3, 2, reduce_op=op), ar(d, 7, reduce_op=op)),
                     {"all_reduce": 1}))
    add(Case("rs-per-dtype", (rs(bf16, 5), rs(f32, 3), rs(bf16, 2), rs(f32, 7), rs(f16, 1)), {"reduce_scatter": 3}))
    add(Case("ar-per-dtype", (ar(bf16, 5), ar(f32, 3), ar(bf16, 2), ar(f32, 7), ar(i32, 4)), {"all_reduce": 3}))
    add(Case("rs-per-op", (rs(f32, 5), rs(f32, 3, reduce_op="max"), rs(f32, 2), rs(f32, 4, reduce_op="max")),
             {"reduce_scatter": 2}))
    add(Case("rs-zero-size", (rs(f32, 0), rs(f32, 3), rs(f32, 0, 2)), {"reduce_scatter": 1}))

    # Structure.
    add(Case("ag-dependent-chain", (ag(f32, 4), ag(f32, 4, depends_on=0), ag(f32, 4, depends_on=1)), None,
             note="each input depends on the previous result: nothing may merge"))
    add(Case("ag-dependent-partial", (ag(f32, 4), ag(bf16, 3, depends_on=0), ag(f32, 5)), {"all_gather": 2}))
    add(Case("ag-users-between", tuple(ag(bf16 if i % 2 else f32, 3 + i, use_now=True) for i in range(6)),
             {"all_gather": 1}, note="each result is used before the next member is issued"))
    add(Case("ag-outputs-direct", tuple(ag(bf16 if i % 2 else f32, 3 + i) for i in range(6)), {"all_gather": 1}))
    add(Case("ag-two-groups", tuple(ag(bf16, 3 + i, group="world" if i % 2 else "alt") for i in range(6)),
             {"all_gather": 2}, note="interleaved across two process groups"))
    add(Case("ag-subgroups", tuple(ag(f32, 3 + i, group="world" if i % 2 else "pairs") for i in range(6)),
             {"all_gather": 2}, world_sizes=(4,), note="interleaved with dist.new_subgroups(2) groups"))
    add(Case("ag-halves", tuple(ag(bf16 if i % 3 else f32, 3 + i, group="world" if i % 2 else "halves")
                                for i in range(6)),
             {"all_gather": 2}, world_sizes=(4,), note="interleaved with groups of half the ranks"))
    add(Case("rs-strided", tuple(rs(f32, 3 + i, group="world" if i % 2 else "strided") for i in range(6)),
             {"reduce_scatter": 2}, world_sizes=(4,),
             note="interleaved with strided groups (even ranks, odd ranks): rank offsets inside a group"))
    add(Case("hsdp-grads", tuple(step for i in range(4) for step in (
                 ar(bf16 if i % 2 else f32, 2 * (3 + i), group="strided"),
                 rs(bf16 if i % 2 else f32, 3 + i, group="halves", depends_on=2 * i))),
             {"all_reduce": 2, "reduce_scatter": 2}, {"policy": "merge_all"}, world_sizes=(4,),
             note="HSDP's gradients on a 2x2 mesh: each all-reduce over replicas feeds a reduce-scatter over "
                  "shards; one bucket of each per dtype, the reduce-scatters' reading the all-reduces'"))
    add(Case("rs-two-groups", tuple(rs(f32, 3 + i, group="world" if i % 2 else "alt") for i in range(4)),
             {"reduce_scatter": 2}))
    add(Case("mixed-kinds", (ag(bf16, 5), rs(f32, 3), ar(f32, 4), ag(f32, 3), rs(f32, 2), ar(f32, 1), ag(i8, 7)),
             {"all_gather": 1, "reduce_scatter": 1, "all_reduce": 1}, note="kinds interleaved"))
    add(Case("fsdp-like-step",
             (ag(bf16, 8, 4, cast_from=f32, use_now=True), ag(f32, 4, use_now=True),
              ag(bf16, 8, 4, cast_from=f32, use_now=True), ag(f32, 4, use_now=True),
              rs(f32, 8, 4), rs(f32, 4), rs(f32, 8, 4), rs(f32, 4)),
             {"all_gather": 1, "reduce_scatter": 1}))

    # Policy: six FSDP-style layers, each gathering an f32 norm (used by a
    # pointwise op) and a bf16 weight (used by a matmul, the heavy compute that
    # separates layers). Each layer's matmul costs 2 * 4w * 8 * 4w = 256 w^2 FLOPs.
    layers = tuple(st for _ in range(6) for st in (ag(f32, 4, use_now=True), ag(bf16, 4, 8, matmul_now=True)))
    add(Case("policy-layers-one-per-layer", layers, {"all_gather": 6}, {"locality_flops": 0},
             note="no compute inside a bucket: buckets follow layers, not the whole model"))
    add(Case("policy-layers-two-per-bucket", layers, {"all_gather": 3}, lambda w: {"locality_flops": 256 * w * w},
             note="a window of exactly one layer's matmul: layers pair up (inclusive)"))
    add(Case("policy-layers-tiny-compute", layers, {"all_gather": 1},
             note="default window: compute this small cannot hide a collective, so all layers merge"))
    add(Case("policy-layers-merge-all", layers, {"all_gather": 1}, {"policy": "merge_all", "locality_flops": 0},
             note="merge_all ignores locality"))

    # Caps. Sizes are the larger side: an all-gather counts its gathered output.
    four = (ag(f32, 16), ag(f32, 16), ag(f32, 16), ag(f32, 16))
    add(Case("ag-cap-inclusive", four, {"all_gather": 1},
             lambda w: {"bucket_cap_mb": _ag_bytes(four, w) / 2**20}, note="cap equals the sum: one bucket"))
    add(Case("ag-cap-one-over", four, {"all_gather": 2},
             lambda w: {"bucket_cap_mb": (_ag_bytes(four, w) - 1) / 2**20}, note="one byte short: last member alone"))
    add(Case("ag-cap-callable", four + four, {"all_gather": 2},
             lambda w: {"bucket_cap_mb": lambda i, _w=w: (_ag_bytes(four[:2], _w) if i == 0 else 10**6) / 2**20},
             note="bucket 0 holds two members, bucket 1 the other six"))
    big_alone = (ag(f32, 4), ag(f32, 4096), ag(f32, 4))
    add(Case("ag-cap-member-over", big_alone, {"all_gather": 2},
             lambda w: {"bucket_cap_mb": 1024 * w / 2**20}, note="a member alone over the cap stays as it was"))
    rs_four = (rs(f32, 16), rs(f32, 16), rs(f32, 16), rs(f32, 16))
    add(Case("rs-cap-one-over", rs_four, {"reduce_scatter": 2},
             lambda w: {"bucket_cap_mb": (4 * 16 * 4 * w - 1) / 2**20}))
    five = tuple(ag(bf16 if i % 2 else f32, 3) for i in range(5))
    add(Case("ag-count-cap-2", five, {"all_gather": 3}, {"max_bucket_count": 2}))
    add(Case("ag-count-cap-1", five, None, {"max_bucket_count": 1}))
    add(Case("ag-kind-filter", five + (rs(f32, 3), rs(f32, 2)), {"all_gather": 5, "reduce_scatter": 1},
             {"collectives": ("reduce_scatter",)}))

    # Real-valued data, different on every rank: a merged sum over more than 2
    # ranks may add in another order. Default options: bit-identical at 2 ranks,
    # within the reordering bound above. exact_reductions=True: merged at 2 ranks,
    # left as they were above, bit-identical everywhere.
    def exact_variant(name, steps, merged, note):
        add(Case(name, steps, merged, note=note))
        add(Case(f"{name}-exact", steps, lambda w, _m=merged: _m if w <= 2 else None, {"exact_reductions": True},
                 note=note + "; exact_reductions: merged only on groups of 2"))

    for data in ("normal", "mixed"):
        for d in (f32, bf16):
            sizes = ((5,), (3, 7), (1000,), (1,), (17, 3), (4096,), (2,))
            exact_variant(f"real-ar-{data}-{dname(d)}", tuple(ar(d, *s, data=data) for s in sizes),
                          {"all_reduce": 1}, f"merged all-reduces of {data} data")
    for d in (f32, bf16):
        many = [rs(d, 1 + i % 7, data="mixed") for i in range(40)]
        many.insert(20, rs(d, 300_000, data="mixed"))
        exact_variant(f"real-rs-many-{dname(d)}", tuple(many), {"reduce_scatter": 1},
                      "40 small reduce-scatters and one of 300000 elements per rank, mixed magnitudes")
    add(Case("real-rs-waits", (rs(f32, 5, data="normal", waits=2), rs(f32, 3, 2, data="normal"),
                               rs(f32, 7, data="normal", waits=2, use_now=True)),
             {"reduce_scatter": 1}, note="results waited twice, each wait's result used"))
    return cases


CASES: list[Case] = _cases()
BY_NAME = {c.name: c for c in CASES}
EXTRA_CASES_ENV = "CONFORMANCE_CASES"
_loaded_modules: set[str] = set()


def register(*cases: Case) -> None:
    """Add your own cases to the catalog; they get every check the catalog's cases get.

    Call it in a module named in CONFORMANCE_CASES (comma-separated module paths;
    pytest: `--conformance-cases=mypkg.cases`), which every process imports with
    the catalog, rank processes included.
    """
    for case in cases:
        if not isinstance(case, Case):
            raise ValueError(f"case: expected a conformance.catalog.Case, got {type(case).__name__}")
        if case.name in BY_NAME:
            raise ValueError(f"case: {case.name!r} is already in the catalog")
        if "-w" in case.name:
            raise ValueError(f"case: {case.name!r} must not contain '-w' (case ids end in -w<world size>)")
        CASES.append(case)
        BY_NAME[case.name] = case


def load_extra_cases() -> None:
    """Import the modules named in CONFORMANCE_CASES (each once per process)."""
    import importlib
    import os

    for module in filter(None, (m.strip() for m in os.environ.get(EXTRA_CASES_ENV, "").split(","))):
        if module not in _loaded_modules:
            _loaded_modules.add(module)
            importlib.import_module(module)


load_extra_cases()


def all_case_ids() -> list[str]:
    return [cid for c in CASES for cid in c.ids()]


def get(case_id: str) -> tuple[Case, int]:
    """The case and world size of an id like "ag-3way-w4" (any world size is accepted)."""
    name, _, world = case_id.rpartition("-w")
    return BY_NAME[name], int(world)
