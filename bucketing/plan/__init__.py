"""Plan the buckets of one graph. Reads the graph, never changes it.

The plan is complete when planning ends (`Planned`): the merged buckets, each
collective left alone with why, where each bucket is issued, the order each
process group issues in, what each bucket adds to live bytes. The steps: each
collective's place on the timeline (`when`), the policy's survey, the generic
assignment (assign.py), the policy's memory split (memory.py) with indices
renumbered within the caps, issue positions and order (issue.py).
"""

from __future__ import annotations

from collections import defaultdict

import torch
import torch.fx as fx

from ..collectives import Collective
from ..options import BucketingOptions
from . import memory
from .assign import Assigner
from .estimates import estimate_policy
from .issue import issue_positions, units_in_order, with_feeders_buckets
from .policy import Policy
from .records import Alone, Bucket, Planned, When
from .timeline import Timeline


def make_policy(options: BucketingOptions, device: torch.device) -> Policy:
    """The policy for a graph on `device`, chosen once: the estimate policy where
    torch has estimates of the device, else the FLOPs-window policy."""
    return estimate_policy(options, device) or Policy(options, device)


def when(c: Collective, timeline: Timeline) -> When:
    """Where collective `c` sits, what it reads and returns, and its anchor:
    the first use of an all-gather's result, or where a reduction's input is
    produced (gradients become ready layer by layer)."""
    pos = timeline.position
    source = c.cast_source if c.cast_source is not None else c.input
    users = [pos[u] for u in c.readers()]
    first_use = min(users, default=pos[c.wait])
    in_bytes = c.numel * c.dtype.itemsize
    anchor = first_use if c.kind.needed_at_first_use else pos[source]
    return When(pos[c.node], pos[source], first_use, max(users, default=pos[c.wait]),
                in_bytes, c.kind.output_bytes(in_bytes, c.group_size), timeline.flops_before[anchor])


def plan(graph: fx.Graph, collectives: list[Collective], policy: Policy) -> Planned:
    """The plan `policy` makes of `collectives` (found in `graph`, in graph order)."""
    timeline = Timeline(graph)
    whens = {c.node: when(c, timeline) for c in collectives}
    policy.survey(collectives, whens, timeline)
    assigned = Assigner(timeline, whens, policy).run(collectives)
    buckets = assigned.buckets
    for b in buckets:
        b.set_apart(policy.apart)

    def positions(bs: list[Bucket]) -> dict[int, int]:
        return issue_positions(bs, whens, policy.prefetch, policy.lead)

    split = policy.fit_memory(buckets, whens, positions)
    if len(split) != len(buckets):
        buckets = _renumber_within_caps(split, whens, policy)
    alone = with_feeders_buckets(assigned.alone, buckets, whens)
    kept = [a.bucket for a in alone if a.bucket is not None]
    issue_at = positions(buckets + kept)
    merged = [b for b in buckets if len(b.members) > 1]
    return Planned(
        buckets=merged,
        alone=alone + [_alone(b) for b in buckets if len(b.members) == 1],
        whens=whens,
        timeline=timeline,
        issue_at=issue_at,
        issue_order=units_in_order(timeline, buckets + kept, issue_at),
        extra_peak_bytes={id(b): memory.extra_peak_bytes(b, whens, issue_at[id(b)], policy.options.copy_out)
                          for b in merged},
        reductions_in_flight=policy.reductions_in_flight(buckets + kept, whens, issue_at),
    )


def _alone(b: Bucket) -> Alone:
    """A bucket no other collective joined, as its collective left alone."""
    block = f" in module {b.module}" if b.module else ""
    c = b.members[0]
    why = b.alone_reason or f"no other collective of its key ({c.kind}, group, op, dtype){block} came to join it"
    return Alone(c, why, b, unjoined=True)


def _renumber_within_caps(buckets: list[Bucket], whens: dict, policy: Policy) -> list[Bucket]:
    """Per-kind indices in graph order again after splits.

    A callable cap is asked again for each new index; a bucket over the cap of
    its new index is halved, until every bucket fits its own cap.
    """
    while True:
        buckets.sort(key=lambda b: whens[b.members[0].node].position)
        counts: dict[str, int] = defaultdict(int)
        over = None
        for b in buckets:
            b.index = counts[b.kind.name]
            counts[b.kind.name] += 1
            b.cap_bytes = policy.cap_bytes(b.index)
            if over is None and len(b.members) > 1 and b.nbytes > b.cap_bytes:
                over = b
        if over is None:
            return buckets
        i = next(k for k, b in enumerate(buckets) if b is over)
        buckets[i:i + 1] = memory.halve(over, f"split: over the cap of bucket index {over.index}")
