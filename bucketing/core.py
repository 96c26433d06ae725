"""Public entry points: `bucket_collectives`, `BucketingPass`, torch-compatible wrappers.

    import torch, bucketing.core as bc
    torch._inductor.config.post_grad_custom_post_pass = bc.BucketingPass(bucket_cap_mb=64.0)
"""

from __future__ import annotations

import copy
import gc
import logging
import pathlib
import time

import torch.fx as fx
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files
from torch._subclasses.fake_tensor import unset_fake_temporarily

from . import apply, lowering, report
from .apply.checkpoint import RestoreFailed
from .collectives import find_collectives, ranks_here
from .options import BucketingOptions, make_options
from .plan import make_policy, plan
from .report import BucketReport, Plan  # noqa: F401  (re-exported)

log = logging.getLogger("bucketing")

# The pass's cache key (with the options) hashes every source file of the
# package: the package holds the pass and nothing else.
SOURCE_FILES = tuple(sorted(str(p) for p in pathlib.Path(__file__).parent.rglob("*.py")))


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
    # The pass makes objects per node and drops few: the collector's passes
    # over the caller's heap (a whole compile's) would find nothing to free,
    # and their cost grows with the graph.
    collecting = gc.isenabled()
    gc.disable()
    # Metadata of new nodes comes from the graph's own fake mode; a mode the
    # caller has active would route every meta computation through its dispatch.
    try:
        with unset_fake_temporarily():
            plan = _plan_and_rewrite(graph, opts)
    finally:
        if collecting:
            gc.enable()
    report.publish(plan)
    return plan


def _plan_and_rewrite(graph: fx.Graph, opts: BucketingOptions) -> Plan:
    """Find, choose the policy, plan, apply, report."""
    start = time.perf_counter()
    collectives, skipped = find_collectives(graph, opts.collectives, opts.fuse_casts)
    if not collectives:
        return Plan([], skipped, time.perf_counter() - start)
    policy = make_policy(opts, collectives[0].node.meta["val"].device)
    planned = plan(graph, collectives, policy)
    skipped += report.left_alone(planned.alone)
    if not planned.buckets:
        return Plan([], skipped, time.perf_counter() - start)
    reports, failed = apply.rewrite(graph, planned, opts)
    return Plan(reports, skipped + failed, time.perf_counter() - start)


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
