"""Public entry points: `bucket_collectives`, `BucketingPass`, torch-compatible wrappers.

    import torch, bucketing.core as bc
    torch._inductor.config.post_grad_custom_post_pass = bc.BucketingPass(bucket_cap_mb=64.0)
"""

from __future__ import annotations

import copy
import itertools
import logging
import pathlib
import time

import torch
import torch.fx as fx
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files
from torch._subclasses.fake_tensor import unset_fake_temporarily

from . import lowering, memory, ordering, report
from .checkpoint import GraphCheckpoint, RestoreFailed
from .collectives import find_collectives, ranks_here, resolved_rank
from .options import BucketingOptions, make_options
from .planning import PlannedBuckets, plan_buckets
from .report import BucketReport, Plan  # noqa: F401  (re-exported)
from .rewrite import MetaEvaluator, emit_bucket, erase_replaced, replace_members
from .timeline import Timeline

log = logging.getLogger("bucketing")

# The pass's cache key (with the options) hashes every source file of the
# package: the package holds the pass and nothing else.
SOURCE_FILES = tuple(sorted(str(p) for p in pathlib.Path(__file__).parent.glob("*.py")))


def bucket_collectives(gm: fx.GraphModule | fx.Graph, **options) -> Plan:
    """Merge the collectives of `gm` in place and return the plan that was applied."""
    opts = make_options(**options)
    graph = gm.graph if isinstance(gm, fx.GraphModule) else gm
    plan = _apply(graph, opts)
    if isinstance(gm, fx.GraphModule) and plan.buckets:
        gm.recompile()
    return plan


def explain(plan_or_gm, **options) -> str:
    """A readable multi-line report of a plan, or of the plan `options` give a
    graph module (planned on a copy: `plan_or_gm` is left as it was)."""
    if not isinstance(plan_or_gm, Plan):
        plan_or_gm = bucket_collectives(copy.deepcopy(plan_or_gm), **options)
    return str(plan_or_gm)


def _apply(graph: fx.Graph, opts: BucketingOptions) -> Plan:
    lowering.install()
    # Metadata of new nodes comes from the graph's own fake mode; a mode the
    # caller has active would route every meta computation through its dispatch.
    with unset_fake_temporarily():
        plan = _plan_and_rewrite(graph, opts)
    report.publish(plan)
    return plan


def _plan_and_rewrite(graph: fx.Graph, opts: BucketingOptions) -> Plan:
    start = time.perf_counter()
    collectives, skipped = find_collectives(graph, opts.collectives, opts.fuse_casts)
    if not collectives:
        return Plan([], skipped, time.perf_counter() - start)
    planned = plan_buckets(graph, collectives, opts)
    skipped += planned.kept_out + planned.alone()
    if not planned.merged:
        return Plan([], skipped, time.perf_counter() - start)
    checkpoint = GraphCheckpoint(graph)
    try:
        reports = _rewrite(graph, planned, opts, skipped)
    except Exception:
        checkpoint.restore(graph)
        raise
    return Plan(reports, skipped, time.perf_counter() - start)


def _rewrite(graph: fx.Graph, planned: PlannedBuckets, opts: BucketingOptions, skipped: list) -> list:
    """Rewrite the planned buckets and return their reports. Until the last
    step nothing is erased, so a failure anywhere can be undone (checkpoint).
    Positions are planning's timeline, taken before any new node."""
    units = ordering.units_in_order(planned.timeline, planned.issued, planned.issue_at)
    emitted = _emit(graph, planned.merged, opts, skipped)
    if not emitted:
        return []
    replaced = replace_members(emitted)
    merged = {m.node: e.collective for e in emitted for m in e.bucket.members}
    ordering.place(graph, planned.timeline, emitted, planned.issue_at, ordering.chains(units, merged),
                   planned.issued)
    reports = _describe(graph, emitted, planned, opts, set(replaced))
    graph.lint()
    erase_replaced(graph, replaced)
    return reports


def _emit(graph: fx.Graph, buckets: list, opts: BucketingOptions, skipped: list) -> list:
    """Emit each bucket's nodes; a bucket that cannot be built stays as it was, with why."""
    meta = MetaEvaluator(graph)
    # How members leave a bucket, decided once for the graph's device.
    device = buckets[0].members[0].node.meta["val"].device
    copy_out = lowering.copy_out_mode(device, opts.copy_out, opts.lower_copy_out)
    in_place = opts.gathers_in_place()
    emitted = []
    for bucket in buckets:
        try:
            rank = _gather_rank(bucket) if in_place and bucket.kind == "all_gather" else None
            emitted.append(emit_bucket(graph, bucket, meta, opts.alignment_bytes, copy_out, rank))
        except Exception as exc:
            log.warning("bucketing: left bucket %s unmerged: %s: %s", bucket.index, type(exc).__name__, exc)
            skipped.extend(report.skipped_members(bucket, f"rewrite failed: {exc}"))
    lowering.mark([n for e in emitted for n in e.wait_nodes + e.later_nodes], opts.lower_copy_out)
    return emitted


def _gather_rank(bucket) -> int | None:
    """This rank in the bucket's group, for an in-place gather; None (a staging chunk) where
    the group does not resolve here."""
    rank = resolved_rank(bucket.group_name)
    if rank is None:
        log.info("bucketing: gather_in_place: group %s does not resolve here; bucket %s gathers through "
                 "a staging chunk", bucket.group_name, bucket.index)
    return rank


def _describe(graph: fx.Graph, emitted: list, planned: PlannedBuckets, opts: BucketingOptions,
              replaced: set) -> list:
    """The bucket reports; the cross-rank plan check goes in before positions
    are taken, which skip the `replaced` nodes about to be erased."""
    reports = [report.describe(e, memory.extra_peak_bytes(e.bucket, planned.whens, planned.issue_at[id(e.bucket)],
                                                          opts.copy_out))
               for e in emitted]
    if opts.verify_plan_across_ranks:
        _insert_plan_check(graph, reports)
    bucketed = Timeline(graph, skip=replaced)
    return [report.locate(r, e, bucketed) for r, e in zip(reports, emitted)]


_plan_checks_inserted = itertools.count()


def _insert_plan_check(graph: fx.Graph, reports: list[BucketReport]) -> None:
    """Put the cross-rank plan check before every other non-input node."""
    first = next(n for n in graph.nodes if n.op != "placeholder")
    lines = "\n".join(b.rank_neutral_line() for b in reports)
    with graph.inserting_before(first):
        check = graph.call_function(
            torch.ops.bucketing_ops.verify_plan.default, (next(_plan_checks_inserted), lines)
        )
    check.meta["val"] = None


class BucketingPass(CustomGraphPass):
    """Inductor `post_grad_custom_post_pass` that buckets collectives.

    Options are validated here, at construction. A failure inside the pass is
    logged and leaves the graph unbucketed rather than failing the compile.
    """

    def __init__(self, **options):
        self.options = make_options(**options)
        self.last_plan: Plan | None = None

    def __call__(self, graph: fx.Graph) -> None:
        try:
            self.last_plan = _apply(graph, self.options)
        except RestoreFailed:
            log.exception("bucketing: pass failed and the graph could not be put back")
            raise  # the compile would fail later on a half-rewritten graph, less clearly
        except Exception:
            log.exception("bucketing: pass failed; graph left as it was")

    def uuid(self) -> str:
        # An in-place gather writes this rank's slot, a constant of the code: ranks
        # sharing an FX graph cache must not share that code (Inductor's key has no rank).
        ranks = f"|ranks {ranks_here()}" if self.options.gathers_in_place() else ""
        return get_hash_for_files(SOURCE_FILES, extra=self.options.fingerprint() + ranks).hex()


# Drop-in replacements for torch._inductor.fx_passes.bucketing's entry points.
def _torch_style(gm, kind: str, cap, mode: str | None) -> Plan:
    options = {"collectives": (kind,)}
    if cap is not None:
        options["bucket_cap_mb"] = cap
    options["multidtype"] = mode is not None and "multidtype" in mode
    return bucket_collectives(gm, **options)


def bucket_all_gather(gm, bucket_cap_mb_by_bucket_idx=None, mode: str | None = None) -> Plan:
    return _torch_style(gm, "all_gather", bucket_cap_mb_by_bucket_idx, mode)


def bucket_reduce_scatter(gm, bucket_cap_mb_by_bucket_idx=None, mode: str | None = None) -> Plan:
    return _torch_style(gm, "reduce_scatter", bucket_cap_mb_by_bucket_idx, mode)


def bucket_all_reduce(gm, bucket_cap_mb_by_bucket_idx=None, mode: str | None = None) -> Plan:
    return _torch_style(gm, "all_reduce", bucket_cap_mb_by_bucket_idx, mode)


__all__ = [
    "BucketingOptions",
    "BucketingPass",
    "Plan",
    "BucketReport",
    "bucket_collectives",
    "bucket_all_gather",
    "bucket_reduce_scatter",
    "bucket_all_reduce",
    "explain",
]
