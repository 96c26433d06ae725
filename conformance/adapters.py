"""Passes under test. An adapter says how to apply a pass and what to expect of it;
each built-in adapter's expected failures sit beside its definition, as data
(`known_failures.Known` entries).

Select one with `--bucketing-pass=NAME` where NAME is `project` (this
package's pass), `torch` (torch's built-in bucketing, multi-dtype mode for
all-gathers), `torch-manual` (torch's `manual_overlap_bucketing`, given the
`module_buckets` plan of a case; semantics only), `torch-overlap` (torch's
overlap scheduler with its bucketing; semantics only), `identity` (a pass that
changes nothing, semantics-only), or `module:object` naming a `PassAdapter`,
or a callable `fn(gm, **options)` checked in semantics-only mode.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import importlib
import importlib.util
import re
import unittest.mock
from collections.abc import Callable

import torch.fx as fx

from .known_failures import Known, manifest

BUCKETING = "bucketing"  # structure and semantics are checked
SEMANTICS_ONLY = "semantics-only"  # results must stay bit-identical; structure is free


@dataclasses.dataclass
class PassAdapter:
    name: str
    expectations: str
    apply_fx: Callable[..., object]  # apply_fx(gm, **options): rewrite gm in place
    inductor_pass: Callable[..., object] | None = None  # (**options) -> post_grad_custom_post_pass
    # check-id glob -> reason, on the running torch release (known_failures.manifest);
    # matching checks are expected to fail.
    expected_failures: dict[str, str] = dataclasses.field(default_factory=dict)
    spec: str = ""  # how it was named to `load` ("torch", "pkg.mod:obj"); rank tasks load it again by this
    # Catalog options (catalog.OPTIONS) the pass acts on; None: all of them.
    honours: frozenset[str] | None = None
    # Whether the pass claims bit-identical reductions at any group size, for a case's
    # options: a bool or fn(options) -> bool. Claimed: every output is compared byte for
    # byte; else a merged floating sum over more than 2 ranks must stay within the
    # reordering bound (harness.reordering_bound), everything else byte for byte.
    exact_reductions: bool | Callable[[dict], bool] = False

    def claims_exact_reductions(self, options: dict) -> bool:
        exact = self.exact_reductions
        return bool(exact(options) if callable(exact) else exact)

    def unhonoured(self, options: dict) -> str | None:
        """Why a case with `options` cannot hold this pass to its collective counts, or None.
        Only structure is at stake: a pass checked for results alone runs every case."""
        if self.expectations != BUCKETING or self.honours is None:
            return None
        ignored = sorted(set(options) - self.honours)
        return f"needs option(s) {ignored}, which {self.name} does not honour" if ignored else None

    def xfail_reason(self, case_id: str) -> str | None:
        """Why `case_id` is expected to fail under this pass (every matching entry's reason), or None."""
        reasons = [reason for pattern, reason in self.expected_failures.items()
                   if fnmatch.fnmatchcase(case_id, pattern)]
        return "; ".join(dict.fromkeys(reasons)) or None


# This project's pass, imported when first applied: loading an adapter imports no pass.
def _project_apply(gm: fx.GraphModule, **options):
    import bucketing

    return bucketing.bucket_collectives(gm, **options)


def _project_inductor_pass(**options):
    import bucketing

    return bucketing.BucketingPass(**options)


def _project_exact(options: dict) -> bool:
    return options.get("exact_reductions") is True


PROJECT = PassAdapter(name="project", spec="project", expectations=BUCKETING, apply_fx=_project_apply,
                      inductor_pass=_project_inductor_pass, exact_reductions=_project_exact)


# torch's built-in bucketing (torch/_inductor/fx_passes/bucketing.py).
def _torch_apply(gm: fx.GraphModule, **options) -> None:
    from torch._inductor.fx_passes import bucketing as tb

    cap = options.get("bucket_cap_mb", 2000.0)
    cap_fn = cap if callable(cap) else (lambda _i, _c=float(cap): _c)
    kinds = options.get("collectives", ("all_gather", "reduce_scatter", "all_reduce"))
    ag_mode = "custom_ops_multidtype" if options.get("multidtype", True) else "custom_ops"
    if "all_gather" in kinds:
        tb.bucket_all_gather(gm, cap_fn, ag_mode)
    if "reduce_scatter" in kinds:
        tb.bucket_reduce_scatter(gm, cap_fn, "custom_ops")
    if "all_reduce" in kinds:
        tb.bucket_all_reduce(gm, cap_fn)
    gm.recompile()


class TorchInductorPass:
    """An FX pass `apply(gm, **options)` as a `post_grad_custom_post_pass`; by default torch's
    built-in bucketing (`bucket_all_gather` & co.)."""

    def __init__(self, apply: Callable[..., object] | None = None, **options):
        self.apply = apply or _torch_apply
        self.options = options

    def __call__(self, graph: fx.Graph) -> None:
        self.apply(graph.owning_module, **self.options)


# What torch's built-in bucketing gets wrong, by reason (found by running the suite
# with `--bucketing-pass=torch` on each release).
SMALLEST_DTYPE_ON_GLOO = "chooses the smallest member dtype (fp8/int16) as the bucket dtype, which gloo cannot move ('Invalid scalar type')"
NONCONTIGUOUS_RESULT = "returns a non-contiguous view where the collective's result was contiguous, so a later view of it fails"
NO_LOCALITY_LAYERED = "has no locality policy: merges every layer's collectives at once"
ADJACENT_ONLY_GRADIENTS = 'merges only adjacent collectives: interleaved bf16/f32 gradient reduce-scatters stay in 4 buckets, not 2'
LAUNCHES_GROW = "views the bucket through the smallest dtype: ag-members-8 and -64 fail at an odd byte offset ('storage_offset() must be divisible'); at 2 members one Inductor kernel copies each member out"
COMPUTE_CHANGES = "members leave the gathered buffer through Inductor kernels of its own (a copy per member) or as strided views read by the consumers' kernels, so the program's kernels are not the unbucketed ones"
MODELS_DIFFER = 'copy-out fused as strided views into consumers (other kernels, other summation order) and no block-aware policy'
FUZZ = 'random programs hit the failures above (unaligned dtype views, fp8/int16 bucket dtypes on gloo, adjacent-only merging)'
UNALIGNED_VIEW = "views the bucket through the smallest dtype; a member at an odd byte offset fails ('storage_offset() must be divisible')"
RANK_BAKED = "bakes the rank into the graph (this rank's slot offset), so every rank compiles a different graph"
ADJACENT_ONLY = 'merges only adjacent collectives of one key: interleaved dtypes, groups or ops stay unmerged'
USE_BEFORE_DEF = "leaves a node used before it is defined when a member's user sits between members (graph fails lint)"
NO_LOCALITY = 'has no locality policy (merges every collective of one key up to the cap), and merges only adjacent collectives'
SEVERAL_WAITS = ("expects one wait_tensor per collective: a reduce-scatter waited twice stops the pass "
                 "('Expected single user for reduce_scatter_tensor')")

TORCH_BUILTIN_FAILURES = (
    Known(SMALLEST_DTYPE_ON_GLOO, (
        'ag-empty-bytes-only-w*', 'ag-empty-strided-i16-w*', 'ag-single-e4m3-w*', 'ag-single-e5m2-w*',
        'ag-single-i16-w*', 'ag-size-one-last-dim-w*',
    )),
    Known(NONCONTIGUOUS_RESULT, (
        'ag-viewed-after-gather-w*',
    )),
    Known(NO_LOCALITY_LAYERED, (
        'fsdp-autograd-layered-w*',
    )),
    Known(ADJACENT_ONLY_GRADIENTS, (
        'fsdp-autograd-w*',
    )),
    Known(LAUNCHES_GROW, (
        'codegen:launches-per-bucket',
    )),
    Known(COMPUTE_CHANGES, (
        'codegen:compute:*',
    )),
    Known(MODELS_DIFFER, (
        'model:*',
    )),
    Known(FUZZ, (
        'fuzz',
    )),
    Known(UNALIGNED_VIEW, (
        'ag-12way-w*', 'ag-3way-w*', 'ag-8way-w*', 'ag-all-empty-w*', 'ag-bf16-f32-large-w*', 'ag-bf16-f32-odd-w*',
        'ag-bf16-f32-one-w*', 'ag-bf16-f32-prime-w*', 'ag-cast-mixed-w*', 'ag-cast-of-slice-w*',
        'ag-count-cap-1-w*', 'ag-count-cap-2-w*', 'ag-members-17-w*', 'ag-members-8-w*', 'ag-members-300-w*', 'ag-members-64-w*',
        'ag-odd-chunks-w*', 'ag-pair-bf16-bool-w*', 'ag-pair-bf16-e4m3-w*', 'ag-pair-bf16-e5m2-w*',
        'ag-pair-bf16-f32-w*', 'ag-pair-bf16-f64-w*', 'ag-pair-bf16-i32-w*', 'ag-pair-bf16-i64-w*',
        'ag-pair-bf16-i8-w*', 'ag-pair-bf16-u8-w*', 'ag-pair-f64-bf16-w*', 'ag-pair-f64-bool-w*',
        'ag-pair-f64-e4m3-w*', 'ag-pair-f64-e5m2-w*', 'ag-pair-f64-f16-w*', 'ag-pair-f64-f32-w*',
        'ag-pair-f64-i16-w*', 'ag-pair-f64-i32-w*', 'ag-pair-f64-i8-w*', 'ag-pair-f64-u8-w*', 'ag-rank1-w*',
        'ag-rank2-w*', 'ag-rank3-w*', 'ag-rank4-w*', 'ag-slice-input-w*', 'mixed-kinds-w*',
    )),
    Known(RANK_BAKED, (
        'ag-bf16-f32-even-w*', 'ag-bf16-f32-zero-w*', 'ag-cap-callable-w*', 'ag-cap-inclusive-w*',
        'ag-cap-one-over-w*', 'ag-cast-fused-w*', 'ag-members-2-w*', 'ag-outputs-direct-w*', 'ag-pair-bf16-f16-w*',
        'ag-pair-bf16-i16-w*', 'ag-pair-f64-i64-w*', 'ag-single-bf16-w*', 'ag-single-bool-w*', 'ag-single-f16-w*',
        'ag-single-f32-w*', 'ag-single-f64-w*', 'ag-single-i32-w*', 'ag-single-i64-w*', 'ag-single-i8-w*',
        'ag-single-u8-w*',
    )),
    Known(ADJACENT_ONLY, (
        'ag-cap-callable-w*', 'ag-cap-member-over-w*', 'ag-halves-w*', 'ag-perdtype-bf16-bool-w*',
        'ag-perdtype-bf16-e4m3-w*', 'ag-perdtype-bf16-e5m2-w*', 'ag-perdtype-bf16-f16-w*',
        'ag-perdtype-bf16-f32-w*', 'ag-perdtype-bf16-f64-w*', 'ag-perdtype-bf16-i16-w*', 'ag-perdtype-bf16-i32-w*',
        'ag-perdtype-bf16-i64-w*', 'ag-perdtype-bf16-i8-w*', 'ag-perdtype-bf16-u8-w*', 'ag-subgroups-w*',
        'ag-two-groups-w*', 'ar-per-dtype-w*', 'rs-per-dtype-w*', 'rs-per-op-w*', 'rs-strided-w*',
        'rs-two-groups-w*',
    )),
    Known(USE_BEFORE_DEF, (
        'ag-dependent-partial-w*', 'ag-users-between-w*', 'fsdp-like-step-w*',
    )),
    Known(NO_LOCALITY, (
        'policy-*',
    )),
    Known(SEVERAL_WAITS, (
        'real-rs-waits-w*',
    )),
    # Compiled checks (`inductor:` ids, conformance/multiproc/test_inductor.py): a pass may fail a
    # case at FX level (a graph that differs per rank) and still compile to the same results.
    Known(UNALIGNED_VIEW, (
        'inductor:ag-pair-bf16-f32-w*', 'inductor:ag-pair-bf16-f64-w*', 'inductor:ag-pair-bf16-i8-w*',
        'inductor:ag-pair-bf16-i32-w*', 'inductor:ag-pair-bf16-i64-w*', 'inductor:ag-pair-bf16-u8-w*',
        'inductor:ag-pair-bf16-bool-w*', 'inductor:ag-bf16-f32-odd-w*', 'inductor:mixed-kinds-w*',
    )),
)

TORCH_BUILTIN = PassAdapter(
    name="torch",
    spec="torch",
    expectations=BUCKETING,
    apply_fx=_torch_apply,
    inductor_pass=lambda **options: TorchInductorPass(**options),
    honours=frozenset({"bucket_cap_mb", "collectives", "multidtype"}),
    expected_failures=manifest(TORCH_BUILTIN_FAILURES),
)


# torch's `manual_overlap_bucketing`, given a case's `module_buckets` plan.
# Dynamo's root (`L['fn']`, `L['self']`) and `_modules['x']` / `['0']` subscripts.
# The suite keeps its own reading of module paths: it must not depend on the pass it checks.
_DYNAMO_ROOT = re.compile(r"""^L\[['"][^'"]+['"]\]""")
_SUBSCRIPT = re.compile(r"""(?:\._modules)?\[['"]?([^'"\]]+)['"]?\]""")


def module_fqn(path: str) -> str:
    """`L['fn']._modules['layers']['0']` -> `layers.0`."""
    path = _SUBSCRIPT.sub(lambda m: "." + m.group(1), _DYNAMO_ROOT.sub("", path))
    return ".".join(p for p in path.split(".") if p)


def _module_stack(node: fx.Node) -> list:
    # torch's default reading strips only `L['self']`: on `torch.compile(model)`
    # graphs (root `L['fn']`) every node would land in a module named "fn".
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack") or {}
    return [(module_fqn(path), cls) for path, cls in stack.values()]


def _torch_manual_apply(gm: fx.GraphModule, **options) -> None:
    """torch's `manual_overlap_bucketing` with the plan in `module_buckets`; other options do not apply."""
    from torch._inductor.fx_passes.overlap_manual_scheduling import manual_overlap_bucketing

    plan = options.get("module_buckets")
    if plan is None:
        return  # nothing to bucket without a plan
    with _gpu_figures_without_gpu():
        manual_overlap_bucketing(gm, module_bucket_plans=[p if isinstance(p, str) else list(p) for p in plan],
                                 module_stack_fn=_module_stack)


@contextlib.contextmanager
def _gpu_figures_without_gpu():
    """torch's schedulers estimate node runtimes from GPU figures they ask Triton's
    driver for, even on CPU graphs. Without a GPU (no driver, or no triton), answer
    with constants instead of failing the compile: what the estimates steer is
    scheduling, never the values a correct pass computes."""
    import torch

    if torch.cuda.is_available():
        yield
        return
    import torch.utils._runtime_estimation as estimation

    with unittest.mock.patch.multiple(estimation, get_gpu_dram_gbps=lambda *a, **k: 1000.0,
                                      get_device_tflops=lambda *a, **k: 100.0):
        yield


TORCH_MANUAL = PassAdapter(
    name="torch-manual",
    spec="torch-manual",
    expectations=SEMANTICS_ONLY,
    apply_fx=_torch_manual_apply,
    inductor_pass=lambda **options: TorchInductorPass(_torch_manual_apply, **options),
)


# torch's overlap-preserving scheduler with collective bucketing (torch/_inductor/fx_passes/overlap_scheduling.py).
def _torch_overlap_apply(gm: fx.GraphModule, **options) -> None:
    """torch's overlap-preserving scheduler with its bucketing on (`schedule_overlap_bucketing`,
    what `aten_distributed_optimizations.collective_bucketing` runs), analytical estimates (no
    GPU benchmarking). Of the suite's options it honours `bucket_cap_mb` through FSDP pre-bucketing;
    an option named as one of `schedule_overlap_bucketing`'s parameters (`max_in_flight_gb`,
    `max_compute_pre_fetch`, `bucket_exposed_first`, ...) is passed to it, over these settings."""
    import inspect

    import torch
    from torch._inductor.fx_passes.overlap_scheduling import schedule_overlap_bucketing

    cap = options.get("bucket_cap_mb")
    settings = dict(collective_bucketing=True, insert_overlap_deps=False, collective_estimator="analytical",
                    compute_estimator="analytical",
                    pre_bucketing_fsdp_collectives_bucket_cap_mb=None if cap is None or callable(cap) else float(cap))
    # torch 2.11's scheduler has fewer settings (no compute estimator, no FSDP pre-bucketing)
    # and benchmarks or rooflines compute nodes on the GPU: without one, a constant
    # 0.1 ms per compute node (estimates steer its schedule, never the values).
    accepted = inspect.signature(schedule_overlap_bucketing).parameters
    settings.update({k: v for k, v in options.items() if k in accepted and k != "gm"})
    estimates = contextlib.nullcontext()
    if "compute_estimator" not in accepted and not torch.cuda.is_available():
        from torch._inductor.fx_passes import overlap_scheduling

        settings["custom_runtime_estimation"] = lambda node, size: (
            None if "_c10d_functional" in str(node.target) else 0.1)
        estimates = unittest.mock.patch.object(overlap_scheduling, "estimate_runtime_analytical", lambda node: 0.1)
    with _gpu_figures_without_gpu(), estimates:
        out = schedule_overlap_bucketing(gm, **{k: v for k, v in settings.items() if k in accepted})
    if out is not gm:
        gm.graph = out.graph
    gm.recompile()


# What torch's overlap scheduler gets wrong, by reason.
OVERLAP_RANK_BAKED = ("bakes the rank into the graph (this rank's slice of the bucket as constant offsets), so "
                      "every rank compiles a different graph")
OVERLAP_GLOO_DTYPE = ("gathers fp8/int16 members in their own dtype inside its bucket, which gloo cannot move "
                      "('Invalid scalar type')")
OVERLAP_UNALIGNED_VIEW = ("views a bucket of mixed dtypes through one dtype; a member at an offset or stride that "
                          "dtype does not divide fails ('must be divisible')")
OVERLAP_NONCONTIGUOUS = ("returns a non-contiguous view where the collective's result was contiguous, so a later "
                         "view of it fails")
OVERLAP_CYCLE = ("its bucketing makes a cycle in the graph at 300 members and stops (torch asks for "
                 "aten_distributed_optimizations.overlap_scheduling_autofix_cycles)")
BOOL_AS_INT64 = ("compiled, a gathered bool member comes back as int64 (torch's Inductor does so unbucketed too; "
                 "the suite compares with eager, which returns bool)")
MODEL_DIFFERS_OVERLAP = "changes the Transformer's results (losses differ from the first step)"

TORCH_OVERLAP_FAILURES = (
    Known(OVERLAP_CYCLE, (
        'ag-members-300-w*',
    ),),
    Known(SEVERAL_WAITS, (
        'real-rs-waits-w*',
    ),),
    Known(OVERLAP_GLOO_DTYPE, (
        'ag-3way-w*', 'ag-pair-bf16-e4m3-w*', 'ag-pair-bf16-e5m2-w*', 'ag-pair-f64-e4m3-w*', 'ag-pair-f64-e5m2-w*',
        'ag-pair-f64-i16-w*', 'ag-perdtype-bf16-e4m3-w*', 'ag-perdtype-bf16-e5m2-w*', 'ag-single-e4m3-w*',
        'ag-single-e5m2-w*', 'ag-single-i16-w*',
    ),),
    Known(OVERLAP_GLOO_DTYPE, (
        'ag-empty-bytes-only-w*',
    ), releases=('2.11.*',)),
    Known(OVERLAP_GLOO_DTYPE, (
        'ag-empty-strided-i16-w*', 'ag-pair-bf16-i16-w*', 'ag-perdtype-bf16-i16-w*',
    ), releases=('2.13.*',)),
    Known(OVERLAP_NONCONTIGUOUS, (
        'ag-viewed-after-gather-w*',
    ), releases=('2.11.*',)),
    Known(OVERLAP_RANK_BAKED, (
        'ag-bf16-f32-even-w*', 'ag-bf16-f32-zero-w*', 'ag-cap-callable-w*', 'ag-cap-inclusive-w*',
        'ag-cap-member-over-w*', 'ag-cap-one-over-w*', 'ag-cast-fused-w*', 'ag-outputs-direct-w*',
        'ag-pair-bf16-f16-w*', 'ag-pair-f64-i64-w*', 'ag-perdtype-bf16-f16-w*', 'ag-single-bf16-w*',
        'ag-single-bool-w*', 'ag-single-f16-w*', 'ag-single-f32-w*', 'ag-single-f64-w*', 'ag-single-i32-w*',
        'ag-single-i64-w*', 'ag-single-i8-w*', 'ag-single-u8-w*', 'ag-subgroups-w*', 'ag-two-groups-w*',
        'ag-users-between-w*', 'policy-layers-merge-all-w*', 'policy-layers-one-per-layer-w*',
        'policy-layers-tiny-compute-w*', 'policy-layers-two-per-bucket-w*',
    ),),
    Known(OVERLAP_RANK_BAKED, (
        'ag-empty-strided-i16-w*', 'ag-members-2-w*', 'ag-pair-bf16-i16-w*', 'ag-perdtype-bf16-i16-w*',
        'fsdp-like-step-w*',
    ), releases=('2.11.*',)),
    Known(OVERLAP_RANK_BAKED, (
        'ag-bf16-f32-large-w*', 'ag-bf16-f32-odd-w*', 'ag-bf16-f32-one-w*', 'ag-bf16-f32-prime-w*',
        'ag-count-cap-1-w*', 'ag-count-cap-2-w*', 'ag-dependent-partial-w*', 'ag-kind-filter-w*',
        'ag-members-17-w*', 'ag-members-64-w*', 'ag-members-8-w*', 'ag-pair-bf16-bool-w*', 'ag-pair-bf16-f32-w*',
        'ag-pair-bf16-f64-w*', 'ag-pair-bf16-i32-w*', 'ag-pair-bf16-i64-w*', 'ag-pair-bf16-i8-w*',
        'ag-pair-bf16-u8-w*', 'ag-pair-f64-bf16-w*', 'ag-pair-f64-bool-w*', 'ag-pair-f64-f16-w*',
        'ag-pair-f64-f32-w*', 'ag-pair-f64-i32-w*', 'ag-pair-f64-i8-w*', 'ag-pair-f64-u8-w*',
        'ag-perdtype-bf16-bool-w*', 'ag-perdtype-bf16-f32-w*', 'ag-perdtype-bf16-f64-w*', 'ag-perdtype-bf16-i32-w*',
        'ag-perdtype-bf16-i64-w*', 'ag-perdtype-bf16-i8-w*', 'ag-perdtype-bf16-u8-w*', 'ag-views-bool-w*', 'ag-packed-bool-w*',
    ), releases=('2.13.*',)),
    Known(OVERLAP_UNALIGNED_VIEW, (
        'ag-12way-w*', 'ag-8way-w*', 'ag-8way-perdtype-w*', 'ag-all-empty-w*', 'ag-bf16-f32-large-w*',
        'ag-bf16-f32-odd-w*', 'ag-bf16-f32-one-w*', 'ag-bf16-f32-prime-w*', 'ag-cast-mixed-w*', 'ag-count-cap-1-w*',
        'ag-count-cap-2-w*', 'ag-halves-w*', 'ag-kind-filter-w*', 'ag-members-17-w*', 'ag-members-64-w*',
        'ag-members-8-w*', 'ag-odd-chunks-w*', 'ag-pair-bf16-bool-w*', 'ag-pair-bf16-f32-w*', 'ag-pair-bf16-f64-w*',
        'ag-pair-bf16-i32-w*', 'ag-pair-bf16-i64-w*', 'ag-pair-bf16-i8-w*', 'ag-pair-bf16-u8-w*',
        'ag-pair-f64-bf16-w*', 'ag-pair-f64-bool-w*', 'ag-pair-f64-f16-w*', 'ag-pair-f64-f32-w*',
        'ag-pair-f64-i32-w*', 'ag-pair-f64-i8-w*', 'ag-pair-f64-u8-w*', 'ag-perdtype-bf16-bool-w*',
        'ag-perdtype-bf16-f32-w*', 'ag-perdtype-bf16-f64-w*', 'ag-perdtype-bf16-i32-w*', 'ag-perdtype-bf16-i64-w*',
        'ag-perdtype-bf16-i8-w*', 'ag-perdtype-bf16-u8-w*', 'ag-rank1-w*', 'ag-rank2-w*', 'ag-rank3-w*',
        'ag-rank4-w*', 'ag-size-one-last-dim-w*', 'ag-slice-input-w*', 'ag-views-bool-w*', 'ag-packed-bool-w*', 'mixed-kinds-w*',
    ), releases=('2.11.*',)),
    # Compiled checks (`inductor:` and `model:` ids).
    Known(BOOL_AS_INT64, ('inductor:ag-pair-bf16-bool-w*', 'inductor:ag-views-bool-w*', 'inductor:ag-packed-bool-w*')),
    Known(MODEL_DIFFERS_OVERLAP, ('model:transformer-bf16-f32-w*',)),
)

TORCH_OVERLAP = PassAdapter(
    name="torch-overlap",
    spec="torch-overlap",
    expectations=SEMANTICS_ONLY,
    apply_fx=_torch_overlap_apply,
    inductor_pass=lambda **options: TorchInductorPass(_torch_overlap_apply, **options),
    expected_failures=manifest(TORCH_OVERLAP_FAILURES),
)

# A pass that changes nothing: what the suite's checks hold for an unbucketed graph.
IDENTITY = PassAdapter(name="identity", spec="identity", expectations=SEMANTICS_ONLY,
                       apply_fx=lambda gm, **options: None, exact_reductions=True)

BUILTIN = {adapter.name: adapter for adapter in (PROJECT, TORCH_BUILTIN, TORCH_MANUAL, TORCH_OVERLAP, IDENTITY)}


def load(spec: str) -> PassAdapter:
    if spec in BUILTIN:
        return dataclasses.replace(BUILTIN[spec])  # a copy: callers may replace its fields
    if ":" not in spec:
        raise ValueError(f"--bucketing-pass must be one of {sorted(BUILTIN)} or module:object, got {spec!r}")
    module, name = spec.split(":", 1)
    obj = getattr(importlib.import_module(module), name)
    if isinstance(obj, PassAdapter) or callable(obj):
        return dataclasses.replace(resolve(obj), spec=spec)
    raise ValueError(f"--bucketing-pass {spec!r} is neither a PassAdapter nor callable")


def resolve(adapter) -> PassAdapter:
    """A PassAdapter from a name or "module:object" (see `load`), a PassAdapter, or a
    callable `fn(gm, **options)` (checked for results only)."""
    if isinstance(adapter, PassAdapter):
        return adapter
    if isinstance(adapter, str):
        return load(adapter)
    if callable(adapter):
        name = f"{getattr(adapter, '__module__', '?')}:{getattr(adapter, '__qualname__', repr(adapter))}"
        return PassAdapter(name=name, expectations=SEMANTICS_ONLY, apply_fx=adapter)
    raise ValueError(f"adapter must be a name, 'module:object', a PassAdapter or a callable, got {adapter!r}")

