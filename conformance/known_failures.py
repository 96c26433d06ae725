"""What passes other than this project's are known to get wrong, as data.

Each reason is written once, with the check ids it explains (globs over
catalog case ids `NAME-wN`, `model:ID-wN`, `codegen:CHECK`, `fuzz`) and the
torch releases where it holds. `manifest()` turns a table into an adapter's
expected failures for the running release; every test family applies them
through one function (conformance/plugin.py `expect_result`), strictly: a
check that passes where failure is expected fails, naming the entry to drop.
Found by running the suite with `--bucketing-pass=torch` on each release.
"""

from __future__ import annotations

import dataclasses
import fnmatch

import torch


@dataclasses.dataclass(frozen=True)
class Known:
    reason: str
    ids: tuple[str, ...]
    releases: tuple[str, ...] = ("*",)  # globs over torch.__version__ without a local suffix ("2.13.0")


def manifest(table: tuple[Known, ...], version: str | None = None) -> dict[str, str]:
    """{check-id glob: reason} for `version` (default: the running torch); reasons of one id joined."""
    version = (version or torch.__version__).split("+")[0]
    out: dict[str, str] = {}
    for known in table:
        if not any(fnmatch.fnmatchcase(version, r) for r in known.releases):
            continue
        for pattern in known.ids:
            out[pattern] = f"{out[pattern]}; {known.reason}" if pattern in out else known.reason
    return out


# torch's built-in bucketing (torch/_inductor/fx_passes/bucketing.py), by reason.
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

TORCH_BUILTIN = (
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
)


# torch's overlap-preserving scheduler with collective bucketing
# (torch/_inductor/fx_passes/overlap_scheduling.py), by reason.
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

TORCH_OVERLAP = (
    Known(OVERLAP_CYCLE, (
        'ag-members-300-w*',
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
)

# Compiled checks (`inductor:` ids, conformance/multiproc/test_inductor.py): a
# pass may fail a case at FX level (a graph that differs per rank) and still
# compile to the same results, so these are listed on their own.
BOOL_AS_INT64 = ("compiled, a gathered bool member comes back as int64 (torch's Inductor does so unbucketed too; "
                 "the suite compares with eager, which returns bool)")
MODEL_DIFFERS_OVERLAP = "changes the Transformer's results (losses differ from the first step)"

TORCH_BUILTIN += (
    Known(UNALIGNED_VIEW, (
        'inductor:ag-pair-bf16-f32-w*', 'inductor:ag-pair-bf16-f64-w*', 'inductor:ag-pair-bf16-i8-w*',
        'inductor:ag-pair-bf16-i32-w*', 'inductor:ag-pair-bf16-i64-w*', 'inductor:ag-pair-bf16-u8-w*',
        'inductor:ag-pair-bf16-bool-w*', 'inductor:ag-bf16-f32-odd-w*', 'inductor:mixed-kinds-w*',
    )),
)
TORCH_OVERLAP += (
    Known(BOOL_AS_INT64, ('inductor:ag-pair-bf16-bool-w*', 'inductor:ag-views-bool-w*', 'inductor:ag-packed-bool-w*')),
    Known(MODEL_DIFFERS_OVERLAP, ('model:transformer-bf16-f32-w*',)),
)
