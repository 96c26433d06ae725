"""The locality and overlap rules: may a collective join a bucket outside any module unit?

A byte cap alone can gather every layer's parameters at the start of a forward
pass: peak memory jumps to the unsharded model and the prefetch of layer i+1
no longer overlaps layer i's compute. So a member joins a bucket only while
the bucket spans at most a window of compute (`locality_flops`; by default
what one collective's latency is worth on the graph's device, cost.py):
splitting a bucket where less compute separates its members cannot hide the
extra collective, so merging gives nothing up there. A member is also refused
if it would shrink the bucket's overlap window (compute between its inputs
being ready and its first use) below that same amount. The memory budget is
enforced after planning (memory.py).
"""

from __future__ import annotations

from .cost import Timeline
from .records import Span, When


def refusal(span: Span, w: When, timeline: Timeline, window_flops: float) -> str | None:
    """Why a collective with `w` may not join a bucket covering `span`, or None if it may."""
    grown = span.add(w)
    if grown.high - grown.low > window_flops:
        return (f"{grown.high - grown.low:.3g} FLOPs of compute would lie inside the bucket, "
                f"over the locality window of {window_flops:.3g}")

    # Compute between issue and wait is what hides the collective: a bucket
    # whose window could hide one keeps it.
    def hides(s: Span) -> bool:
        return timeline.flops_between(s.ready + 1, s.first_use) > window_flops

    if hides(span) and not hides(grown):
        return "joining would shrink the bucket's overlap window below what hides a collective"
    return None
