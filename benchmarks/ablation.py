"""The default policy with one of its rules turned off, for the sweep's ablation.

Each entry names a rule of the estimate policy (bucketing/plan/estimates.py)
or of planning (issue.py, memory.py) and patches it off for the length of a
pass: the rule is then shown needed by the grid cells where turning it off
misses a target the default meets, or worsens the step, exposed communication
or peak (`python -m benchmarks.sweep --ablate`). Patching, not options: these
are the pass's internals, not knobs a user should turn.
"""

from __future__ import annotations

import contextlib
from unittest import mock

from bucketing import plan as plan_module
from bucketing.plan import assign, estimates, issue, memory, policy

# rule -> (what it does, the patches that turn it off: (object, attribute, replacement))
RULES: dict[str, tuple[str, list[tuple[object, str, object]]]] = {
    "blocks-per-bucket": (
        "consecutive blocks share a bucket until their collectives fit their compute; first and last alone",
        [(estimates.BlockEstimate, "blocks_per_bucket", lambda self: 1)]),
    "joins": (
        "collectives outside the blocks join a neighbouring block's unit",
        [(estimates, "join_nearest_blocks", lambda *args, **kwargs: set())]),
    "copies": (
        "a collective whose copies cost more than merging saves stays alone",
        [(estimates, "copy_refusal", lambda *args, **kwargs: None)]),
    "communication-bound": (
        "a communication-bound group merges its first and last blocks and joins outside collectives over compute",
        [(estimates.BlockEstimate, "communication_bound", lambda self: False)]),
    "lead": (
        "a bucket is issued at least twice its estimated time of compute before its first use",
        [(estimates.EstimatePolicy, "lead", lambda self, bucket: None)]),
    "apart": (
        "an all-gather that joins a unit it moves is copied out ahead of the rest",
        [(estimates, "join_nearest_blocks",
          lambda *args, _join=estimates.join_nearest_blocks, **kwargs: (_join(*args, **kwargs), set())[1])]),
    "prefetch-depth": (
        "three buckets in flight, the first issued at once, collectives left alone too",
        [(estimates.EstimatePolicy, "prefetch", issue.Prefetch())]),
    "two-block-budget": (
        "the memory budget is two blocks' gathered parameters where that exceeds a cap",
        [(estimates.EstimatePolicy, "memory_budget_bytes",
          lambda self, buckets: policy.Policy.memory_budget_bytes(self, buckets))]),
    "reduction-depth": (
        "reductions are waited for within the depth the memory budget affords",
        [(policy.Policy, "reductions_in_flight", lambda self, *args: None)]),
    "depth-per-reduction": (
        "each reduction waits as late as the live bytes where it is held allow (else one depth per graph)",
        [(memory, "reductions_in_flight", lambda *args: _one_depth(*args))]),
    "gathers-in-order": (
        "a group's prefetched all-gathers issue in the order they are needed",
        [(issue, "_in_the_order_needed", lambda *args: None)]),
    "full-closes": (
        "a bucket that refuses a collective for its cap takes no later, smaller one",
        [(assign.Assigner, "_full", lambda self, bucket, c: False)]),
    "after-feeder": (
        "a reduction of a bucket's result is issued at its feeder's next bucket",
        [(issue, "_after_next_feeder", lambda *args: None),
         (plan_module, "with_feeders_buckets", lambda alone, buckets, whens: alone)]),
}


def _one_depth(buckets, whens, timeline, budget, copy_out, issue_at) -> dict:
    """One reduction depth for the whole graph: the deepest at which every reduction's
    input, held to its wait, keeps the peak within the limit; the shallowest if none."""
    base = memory.live_bytes(timeline)
    merged = [i for b in buckets if not b.explicit and id(b) in issue_at
              for i in memory.bucket_extra_intervals(b, whens, issue_at[id(b)], copy_out)]
    limit = max(max(base, default=0) + budget, memory._worst(base, merged))
    reductions = [b for b in buckets if b.kind.reduces]
    for depth in memory.REDUCTION_DEPTHS:
        waits = memory.reduction_waits(buckets, whens, issue_at, depth)
        held = [(memory._issued_at(b, whens, issue_at), waits[id(b)], sum(whens[m.node].in_bytes for m in b.members))
                for b in reductions]
        if depth == memory.REDUCTION_DEPTHS[-1] or memory._worst(base, merged + held) <= limit:
            return {id(b): depth for b in reductions}


def pass_name(rule: str) -> str:
    return f"project-no-{rule}"


def rule_of(pass_name_: str) -> str | None:
    prefix = "project-no-"
    return pass_name_[len(prefix):] if pass_name_.startswith(prefix) else None


@contextlib.contextmanager
def turned_off(rule: str):
    """The planning `rule` turned off inside the block."""
    if rule not in RULES:
        raise ValueError(f"rule: expected one of {', '.join(RULES)}, got {rule!r}")
    with contextlib.ExitStack() as stack:
        for target, attribute, replacement in RULES[rule][1]:
            if not hasattr(target, attribute):  # the rule moved: say so rather than measure nothing
                raise AttributeError(f"ablation {rule!r}: {target!r} has no {attribute!r}")
            stack.enter_context(mock.patch.object(target, attribute, replacement))
        yield
