"""The policy: which collectives may share a bucket, beyond what the graph allows.

The assigner (assign.py) keeps the merged graph legal; a policy answers the
rest. This one plans by counts and FLOPs, the same on every device:

- **Units.** Each collective may belong to a module unit (modules.py): an
  entry of the user's `module_buckets`, or under `policy="module"` a block (a
  repeated module such as a transformer layer), the unit sharded training
  gathers and frees. A bucket holds one unit, whatever compute lies inside
  it; collectives outside any unit follow the locality rules, or under
  `merge_all` the caps alone.
- **Locality.** A byte cap alone can gather every layer's parameters at the
  start of a forward pass: peak memory jumps to the unsharded model and the
  prefetch of layer i+1 no longer overlaps layer i's compute. So a member
  joins a bucket only while the bucket spans at most a window of compute
  (`locality_flops`; by default what one collective's latency is worth on
  the graph's device): splitting a bucket where less compute separates its
  members cannot hide the extra collective, so merging gives nothing up
  there. A member is also refused if it would shrink the bucket's overlap
  window (compute between its inputs being ready and its first use) below
  that same amount.
- **Memory.** Buckets that raise the estimated peak beyond the budget (one
  bucket cap, or `memory_budget_mb`) are halved where the peak is (memory.py).
- **Issue.** Each bucket prefetched while the one before it is used (issue.py).
- `exact_reductions` leaves out every reduction over more than 2 ranks.

`plan.make_policy` picks the policy once per graph: with torch's estimates of
the graph's device, the estimate policy (estimates.py), which plans with time.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from .. import modules
from ..collectives import Collective
from ..options import MB, BucketingOptions
from . import memory
from .issue import Prefetch
from .records import Bucket, Span, When
from .timeline import Timeline

# How many buckets of one key the locality policy keeps open at once.
MAX_OPEN_PER_KEY = 4

# Rough device figures: a small collective's fixed latency and sustained matmul
# throughput. Their product is the compute one collective's latency is worth.
_LATENCY_S = {"cpu": 500e-6, "cuda": 30e-6}
_FLOPS_PER_S = {"cpu": 3e10, "cuda": 2e14}


def default_locality_flops(device_type: str) -> float:
    kind = "cpu" if device_type == "cpu" else "cuda"
    return _LATENCY_S[kind] * _FLOPS_PER_S[kind]


def bucket_key(c: Collective, multidtype: bool) -> tuple:
    """(kind, group name, reduce op, dtype); dtype is None where the kind may mix dtypes."""
    dtype = None if (c.kind.mixes_dtypes and multidtype) else c.dtype
    return (c.kind, c.group_name, c.reduce_op, dtype)


def module_unit(c: Collective, options: BucketingOptions) -> tuple[str | None, bool]:
    """(the module unit `c` belongs to or None, whether the user's module_buckets named it)."""
    plan = options.module_buckets
    if plan:
        entry = modules.plan_entry(c.module_stack, plan)
        if entry is not None:
            return modules.entry_label(plan[entry]), True
    if options.policy != "module":
        return None, False
    if options.block_classes:
        return modules.class_block(c.module_stack, options.block_classes), False
    return modules.auto_block(c.module_stack), False


def locality_refusal(span: Span, w: When, timeline: Timeline, window_flops: float) -> str | None:
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


def blocks_by_group(collectives: list[Collective], units: dict) -> dict[str, dict[str, list[Collective]]]:
    """Per process group, its blocks (units the user did not name) and their
    collectives, in the order the graph first has them."""
    blocks_of: dict[str, dict[str, list[Collective]]] = {}
    for c in collectives:
        unit, explicit = units[c.node]
        if unit is not None and not explicit:
            blocks_of.setdefault(c.group_name, {}).setdefault(unit, []).append(c)
    return blocks_of


def merge_runs(units: dict, blocks: dict[str, list[Collective]], k: int | None, ends: bool) -> None:
    """Make every run of `k` consecutive blocks one unit; with `ends`, the first
    and the last block one each (nothing hides the graph's first wait, nor a
    backward's last gradients), the rest `k`."""
    if k is None or k <= 1:
        return
    names = list(blocks)
    middle = names[1:-1] if ends else names
    runs = [middle[start:start + k] for start in range(0, len(middle), k)]
    if ends:
        runs = [names[:1], *runs, names[-1:]]
    for run in runs:
        label = "+".join(run)
        for name in run:
            for c in blocks[name]:
                units[c.node] = (label, False)


class Policy:
    """The FLOPs-window, module and merge_all policy (the module docstring)."""

    prefetch = Prefetch()
    # Members copied out apart from the rest of their bucket (Bucket.apart).
    apart: frozenset = frozenset()

    def __init__(self, options: BucketingOptions, device: torch.device):
        self.options = options
        self.windowed = options.policy != "merge_all"  # the compute window applies outside module units
        # Open buckets per key, newest last. merge_all keeps one; locality keeps a
        # few, so interleaved stretches (a layer's bias used after its matmul,
        # beside the next layer's weights) each find their own bucket.
        self.max_open = MAX_OPEN_PER_KEY if self.windowed else 1
        self.max_members = options.max_bucket_count
        window = options.locality_flops
        self.window_flops = default_locality_flops(device.type) if window is None else window
        self.units: dict[fx.Node, tuple[str | None, bool]] = {}
        self.timeline: Timeline | None = None

    def survey(self, collectives: list[Collective], whens: dict[fx.Node, When], timeline: Timeline) -> None:
        """Learn the graph before assignment: each collective's module unit, blocks grouped."""
        self.timeline = timeline
        self.units = {c.node: module_unit(c, self.options) for c in collectives}
        if self.options.policy == "module":
            for group_name, blocks in blocks_by_group(collectives, self.units).items():
                self.group_blocks(group_name, blocks, collectives, whens)

    def group_blocks(self, group_name: str, blocks: dict[str, list[Collective]], collectives: list[Collective],
                     whens: dict[fx.Node, When]) -> None:
        """Make every run of `blocks_per_bucket` consecutive blocks of one group one unit."""
        merge_runs(self.units, blocks, self.options.blocks_per_bucket, ends=False)

    def key(self, c: Collective) -> tuple:
        """Collectives of one key may share a bucket: kind, group, op, dtype, module unit."""
        return (*bucket_key(c, self.options.multidtype), *self.units[c.node])

    def cap_bytes(self, index: int) -> float:
        return self.options.cap_bytes(index)

    def left_out(self, c: Collective) -> str | None:
        """Why `c` is left out of planning altogether, or None."""
        if self.options.exact_reductions and c.kind.reduces and not 0 < c.group_size <= 2:
            group = f"group of {c.group_size}" if c.group_size else "group size unknown"
            return (f"exact_reductions, {group}: a merged sum over more than 2 ranks may add in another order "
                    f"(docs/design.md, What stays the same)")
        return None

    def keep_alone(self, c: Collective, w: When) -> str | None:
        """Why `c` stays as it was, issued as a bucket of its own, or None if it may merge."""
        return None

    def refusal(self, bucket: Bucket, w: When) -> str | None:
        """Why a collective with `w` may not join `bucket` (which the graph allows), or None."""
        if self.windowed and bucket.module is None:
            return locality_refusal(bucket.span, w, self.timeline, self.window_flops)
        return None

    def memory_budget_bytes(self, buckets: list[Bucket]) -> float:
        budget = self.options.memory_budget_mb
        return max(b.cap_bytes for b in buckets) if budget is None else budget * MB

    def fit_memory(self, buckets: list[Bucket], whens: dict, issue_positions: memory.IssuePositions) -> list[Bucket]:
        """The buckets, split where they would raise the estimated peak beyond the budget."""
        if not self.windowed or not any(len(b.members) > 1 and not b.explicit for b in buckets):
            return buckets
        return memory.split_to_budget(list(buckets), whens, self.timeline, self.memory_budget_bytes(buckets),
                                      self.options.copy_out, issue_positions)

    def reductions_in_flight(self, buckets: list[Bucket], whens: dict,
                             issue_at: dict[int, int]) -> dict[int, int | None] | None:
        """Per reduction bucket, how many of its kind and group may be issued before it is
        waited for (memory.py); None (each waits for its result's first use) under
        merge_all, the caps alone."""
        if not self.windowed or not any(b.kind.reduces for b in buckets):
            return None
        return memory.reductions_in_flight(buckets, whens, self.timeline, self.memory_budget_bytes(buckets),
                                           self.options.copy_out, issue_at)

    def lead(self, bucket: Bucket) -> int | None:
        """The position the bucket should be issued by at the latest, or None."""
        return None

