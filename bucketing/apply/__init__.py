"""Apply a plan: emit each merged bucket's nodes, point its members' users at them, place them.

Each collective kind has its emitter (all_gather.py, reduce_scatter.py,
all_reduce.py) over the shared copy-out (copy_out.py) and metadata
(nodes.py). Until the last step nothing is erased, so a failure anywhere can
be undone (checkpoint.py); a bucket that cannot be built stays as it was.
"""

from __future__ import annotations

import itertools
import logging

import torch
import torch.fx as fx

from .. import lowering, report
from ..collectives import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER, Skipped
from ..options import BucketingOptions
from ..plan.records import Bucket, Planned
from ..plan.timeline import Timeline
from . import all_gather, all_reduce, reduce_scatter
from .checkpoint import GraphCheckpoint
from .nodes import EmitSettings, EmittedBucket, MetaEvaluator, copy_provenance
from .placement import chains, place

log = logging.getLogger("bucketing")

EMITTERS = {ALL_GATHER: all_gather.emit, REDUCE_SCATTER: reduce_scatter.emit, ALL_REDUCE: all_reduce.emit}


def _depths_by_collective(planned: Planned, merged: dict[fx.Node, fx.Node]) -> dict[fx.Node, int | None] | None:
    """The plan's reductions in flight per issued collective (a merged bucket's, or one
    left as it was)."""
    if planned.reductions_in_flight is None:
        return None
    return {merged.get(b.members[0].node, b.members[0].node): planned.reductions_in_flight[id(b)]
            for b in planned.issued() if id(b) in planned.reductions_in_flight}


def rewrite(graph: fx.Graph, planned: Planned, opts: BucketingOptions) -> tuple[list[report.BucketReport],
                                                                               list[Skipped]]:
    """Apply `planned` to `graph` in place: the reports of the buckets merged, and the
    members of buckets that could not be built, with why. Positions are
    planning's timeline, taken before any new node."""
    checkpoint = GraphCheckpoint(graph)
    try:
        failed: list[Skipped] = []
        emitted = _emit(graph, planned.buckets, opts, failed)
        if not emitted:
            return [], failed
        replaced = replace_members(emitted)
        merged = {m.node: e.collective for e in emitted for m in e.bucket.members}
        place(graph, planned.timeline, emitted, planned.issue_at, chains(planned.issue_order, merged),
              planned.issued(), replaced, _depths_by_collective(planned, merged))
        reports = _describe(graph, emitted, planned, opts, set(replaced))
        graph.lint()
        erase_replaced(graph, replaced)
    except Exception:
        checkpoint.restore(graph)
        raise
    return reports, failed


def _emit(graph: fx.Graph, buckets: list[Bucket], opts: BucketingOptions, failed: list[Skipped]) -> list:
    """Emit each bucket's nodes; a bucket that cannot be built stays as it was, with why."""
    meta = MetaEvaluator(graph)
    # How members leave a bucket, decided once for the graph's device.
    device = buckets[0].members[0].node.meta["val"].device
    settings = EmitSettings(opts.alignment_bytes, lowering.copy_out_mode(device, opts.copy_out, opts.lower_copy_out),
                            opts.gathers_in_place())
    emitted = []
    for bucket in buckets:
        try:
            emitted.append(emit_bucket(graph, bucket, meta, settings))
        except Exception as exc:
            log.warning("bucketing: left bucket %s unmerged: %s: %s", bucket.index, type(exc).__name__, exc)
            failed.extend(Skipped(m.node.name, f"rewrite failed: {exc}") for m in bucket.members)
    lowering.mark([n for e in emitted for n in e.wait_nodes + e.later_nodes], opts.lower_copy_out)
    return emitted


def emit_bucket(graph: fx.Graph, bucket: Bucket, meta: MetaEvaluator, settings: EmitSettings) -> EmittedBucket:
    """The nodes of one bucket, by its kind's emitter; none left behind if it fails."""
    created: list[fx.Node] = []
    try:
        emitted = EMITTERS[bucket.kind](graph, bucket, meta, settings, created)
        # The bucket's nodes point at its first member's code; each member's own
        # output at that member's wait.
        copy_provenance(bucket.members[0].node, created)
        for m, out in zip(bucket.members, emitted.outputs):
            if out is not None:
                copy_provenance(m.wait, [out])
    except Exception:
        # A bucket left unmerged leaves no node behind (a dangling wait would
        # still run its collective).
        for node in reversed(created):
            graph.erase_node(node)
        raise
    return emitted


def _describe(graph: fx.Graph, emitted: list[EmittedBucket], planned: Planned, opts: BucketingOptions,
              replaced: set) -> list[report.BucketReport]:
    """The bucket reports; the cross-rank plan check goes in before positions
    are taken, which skip the `replaced` nodes about to be erased."""
    reports = [report.describe(e, planned.extra_peak_bytes[id(e.bucket)]) for e in emitted]
    if opts.verify_plan_across_ranks:
        _insert_plan_check(graph, reports)
    bucketed = Timeline(graph, skip=replaced)
    return [report.locate(r, e, bucketed) for r, e in zip(reports, emitted)]


_plan_checks_inserted = itertools.count()


def _insert_plan_check(graph: fx.Graph, reports: list[report.BucketReport]) -> None:
    """Put the cross-rank plan check before every other non-input node."""
    first = next(n for n in graph.nodes if n.op != "placeholder")
    lines = "\n".join(b.rank_neutral_line() for b in reports)
    with graph.inserting_before(first):
        check = graph.call_function(
            torch.ops.bucketing_ops.verify_plan.default, (next(_plan_checks_inserted), lines)
        )
    check.meta["val"] = None


def replace_members(emitted: list[EmittedBucket]) -> list[fx.Node]:
    """Point every user of a member's wait at its copy-out; return the nodes
    that are then dead, in an order to erase them (erase_replaced). They stay
    in the graph until then, so a failure up to that point can still put the
    graph back as it was (checkpoint)."""
    replaced = []
    for e in emitted:
        for m, out in zip(e.bucket.members, e.outputs):
            if out is not None:
                for wait in m.waits:
                    wait.replace_all_uses_with(out)
                for reader in m.direct_readers:
                    reader.replace_input_with(m.node, out)
            replaced += [*m.waits, m.node]
            if m.cast_source is not None and set(m.input.users) <= {m.node}:
                replaced.append(m.input)  # a fused cast nothing else reads
    return replaced


def erase_replaced(graph: fx.Graph, replaced: list[fx.Node]) -> None:
    for node in replaced:
        graph.erase_node(node)
