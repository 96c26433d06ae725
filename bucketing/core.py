"""Public entry points: `bucket_collectives`, `BucketingPass`, torch-compatible wrappers.

    import torch, bucketing.core as bc
    torch._inductor.config.post_grad_custom_post_pass = bc.BucketingPass(bucket_cap_mb=64.0)
"""

from __future__ import annotations

import itertools
import logging
import os
import time

import torch
import torch.fx as fx
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

from . import ordering, policy, report
from .collectives import find_collectives
from .options import BucketingOptions, make_options
from .planning import alone, plan_buckets
from .report import BucketReport, Plan, explain  # noqa: F401  (re-exported)
from .rewrite import MetaEvaluator, emit_bucket, replace_members

log = logging.getLogger("bucketing")

_SOURCE_FILES = tuple(
    os.path.join(os.path.dirname(__file__), name)
    for name in sorted(os.listdir(os.path.dirname(__file__)))
    if name.endswith(".py")
)


def bucket_collectives(gm: fx.GraphModule | fx.Graph, **options) -> Plan:
    """Merge the collectives of `gm` in place and return the plan that was applied."""
    opts = make_options(**options)
    graph = gm.graph if isinstance(gm, fx.GraphModule) else gm
    plan = _apply(graph, opts)
    if isinstance(gm, fx.GraphModule) and plan.buckets:
        gm.recompile()
    return plan


def _apply(graph: fx.Graph, opts: BucketingOptions) -> Plan:
    start = time.perf_counter()
    collectives, skipped = find_collectives(graph, opts.collectives, opts.fuse_casts)
    if not collectives:
        plan = Plan([], skipped, time.perf_counter() - start)
        report.publish(plan)
        return plan
    buckets, over_cap, whens, timeline = plan_buckets(graph, collectives, opts)
    skipped.extend(over_cap)
    skipped.extend(alone(buckets))
    merged = [b for b in buckets if len(b.members) > 1]
    if not merged:
        plan = Plan([], skipped, time.perf_counter() - start)
        report.publish(plan)
        return plan

    snapshot = ordering.GraphSnapshot(graph)
    meta = MetaEvaluator(graph)
    emitted = []
    for bucket in merged:
        try:
            emitted.append(emit_bucket(graph, bucket, meta, opts.alignment_bytes, opts.copy_out))
        except Exception as exc:  # a bucket we cannot build stays as it was
            log.warning("bucketing: left bucket %s unmerged: %s: %s", bucket.index, type(exc).__name__, exc)
            skipped.extend(report.skipped_members(bucket, f"rewrite failed: {exc}"))

    issue_at = policy.issue_positions([e.bucket for e in emitted], whens)
    issue_priority, issue_segment, fallback = {}, {}, {}
    for e in emitted:
        members = e.bucket.members
        first = issue_at[id(e.bucket)]
        segment = snapshot.segment[members[0].node]
        for k, node in enumerate(e.issue_nodes):
            # After the previous bucket's wait and copy-out placed there (its buffer is
            # freed first), before the original node at that position.
            issue_priority[node] = (first, -1, k)
            issue_segment[node] = segment
        first_wait = min(snapshot.position[m.wait] for m in members)
        for node in e.wait_nodes + [o for o in e.outputs if o is not None]:
            fallback[node] = (first_wait, 0, 0)
    for node in graph.nodes:
        if node not in snapshot.position and node not in issue_priority and node not in fallback:
            fallback[node] = (len(snapshot.position), 0, 0)
    for e in emitted:
        replace_members(graph, e)
    ordering.reorder(graph, snapshot, issue_priority, issue_segment, fallback)
    views = opts.copy_out == "views"
    reports = [report.describe(e, whens, timeline, issue_at[id(e.bucket)], views) for e in emitted]
    plan = Plan(reports, skipped, time.perf_counter() - start)
    if opts.verify_plan_across_ranks:
        _insert_plan_check(graph, plan)
    graph.lint()

    report.publish(plan)
    return plan


_plan_checks_inserted = itertools.count()


def _insert_plan_check(graph: fx.Graph, plan: Plan) -> None:
    """Put the cross-rank plan check before every other non-input node."""
    first = next(n for n in graph.nodes if n.op != "placeholder")
    lines = "\n".join(b.rank_neutral_line() for b in plan.buckets)
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
        except Exception:
            log.exception("bucketing: pass failed; graph left as it was")

    def uuid(self) -> str:
        return get_hash_for_files(_SOURCE_FILES, extra=self.options.fingerprint()).hex()


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
