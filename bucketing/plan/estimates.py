"""The estimate policy: the locality policy planning with time, from torch's estimates of the device.

Where torch estimates the graph's device (costs.py; CUDA only), the rules plan
with milliseconds instead of counts:

- consecutive blocks share a bucket until their collectives fit within their
  compute, the first and the last unit one block (`BlockEstimate`);
- collectives outside the blocks join a neighbouring unit where that saves
  more than it costs, an all-gather that moves the unit copied out ahead of
  it (`join_nearest_blocks`);
- a collective whose copies cost more than merging it saves stays as it
  was (`copy_refusal`), in a communication-bound group too: the copies run on
  the compute stream, where a backward's gradients wait behind them and the
  reductions then issue late;
- the memory budget is two blocks' gathered parameters, if more than a cap;
- three buckets are prefetched, the first at once, collectives left alone
  too (`WITH_ESTIMATES`), each early enough for its estimated time (`lead_position`).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections import defaultdict

import torch
import torch.fx as fx

from ..collectives import Collective
from ..options import BucketingOptions
from .costs import DeviceCosts, device_costs
from .issue import Prefetch
from .policy import Policy, bucket_key, merge_runs
from .records import Bucket, When
from .timeline import Timeline

# Planning for a network that is the bottleneck: three buckets in flight and
# nothing issued later than it could be, under the memory budget (memory.py
# counts every bucket in flight).
WITH_ESTIMATES = Prefetch(depth=3, eager=True)

# How many times its estimated duration of compute a collective is issued
# ahead of its first use, at least: room for the collectives queued before it.
LEAD_FACTOR = 2.0


def anchor(c: Collective, whens: dict[fx.Node, When]) -> int:
    """Where the graph needs a block's collective: an all-gather's first use, a reduction's ready input."""
    w = whens[c.node]
    return w.first_use if c.kind.needed_at_first_use else w.ready


def copy_refusal(c: Collective, w: When, costs: DeviceCosts) -> str | None:
    """Why `c` stays as it was by the device's estimates, or None if it may merge:
    the collective time merging it with another of its size saves (a latency,
    more across nodes) must exceed its copy-in and copy-out. On 8 GPUs of a
    node a large weight's gather saves less than its copy-out costs; across
    nodes it saves more."""
    copies = costs.copy_ms(w.moved_bytes)
    saves = costs.merge_saves_ms(c.kind, w.moved_bytes, w.moved_bytes, c.group_size)
    if saves < copies:
        return (f"merging saves an estimated {saves * 1e3:.3g} us of {c.kind}, "
                f"less than its copy-in and copy-out cost ({copies * 1e3:.3g} us)")
    return None


def lead_position(b: Bucket, whens: dict[fx.Node, When], compute_ms_before: list[float],
                  costs: DeviceCosts) -> int:
    """The latest position from which `LEAD_FACTOR` times the bucket's estimated
    collective time of compute lies before its first use."""
    ws = [whens[m.node] for m in b.members]
    first_use = min(w.first_use for w in ws)
    duration = costs.collective_ms(b.kind, sum(w.moved_bytes for w in ws), b.members[0].group_size)
    target = compute_ms_before[first_use] - LEAD_FACTOR * duration
    return max(0, bisect.bisect_right(compute_ms_before, target) - 1)


@dataclasses.dataclass(frozen=True)
class BlockEstimate:
    """A typical block of one process group by the device's estimates: the median
    compute between consecutive blocks' anchors, and each key's mean bytes
    (moved: input and output, as torch's model counts them; and the bytes the
    bucket cap counts)."""

    blocks: int
    block_ms: float
    key_bytes: dict  # key -> (moved bytes, capped bytes) per block
    group_size: int
    costs: DeviceCosts
    cap_bytes: float = float("inf")

    @classmethod
    def of(cls, blocks: list[list[Collective]], whens: dict[fx.Node, When], compute_ms_before: list[float],
           costs: DeviceCosts, multidtype: bool = True, cap_bytes: float = float("inf")) -> BlockEstimate:
        anchors = [min(anchor(c, whens) for c in members) for members in blocks]
        gaps = sorted(abs(compute_ms_before[b] - compute_ms_before[a]) for a, b in zip(anchors, anchors[1:]))
        block_ms = gaps[len(gaps) // 2] if gaps else 0.0
        key_bytes: dict[tuple, tuple[float, float]] = defaultdict(lambda: (0.0, 0.0))
        for members in blocks:
            for c in members:
                moved, capped = key_bytes[bucket_key(c, multidtype)]
                key_bytes[bucket_key(c, multidtype)] = (moved + whens[c.node].moved_bytes / len(blocks),
                                                        capped + c.nbytes / len(blocks))
        return cls(len(blocks), block_ms, dict(key_bytes), blocks[0][0].group_size, costs, cap_bytes)

    def comm_ms(self, k: int) -> float:
        """k blocks' collectives, merged per key into as many buckets as the cap needs."""
        total = 0.0
        for key, (moved, capped) in self.key_bytes.items():
            pieces = max(1, math.ceil(k * capped / self.cap_bytes))
            total += pieces * self.costs.collective_ms(key[0], k * moved / pieces, self.group_size)
        return total

    def blocks_per_bucket(self) -> int:
        """The fewest consecutive blocks whose collectives, merged per key, take no
        longer than the blocks' compute: the next bucket's prefetch then hides
        behind this one's compute. Every block where none do (the collectives
        outweigh the compute at any size): the caps and the memory budget split them."""
        for k in range(1, self.blocks):
            if self.comm_ms(k) <= k * self.block_ms:
                return k
        return self.blocks

    def communication_bound(self) -> bool:
        """Whether all blocks' collectives, merged, outlast their compute: then the
        compute stream waits anyway, and every collective saved shortens the step."""
        return self.blocks >= 2 and self.comm_ms(self.blocks) > self.blocks * self.block_ms


def _unit_spans(collectives: list[Collective], units: dict, whens: dict) -> dict[tuple, tuple[int, int]]:
    """Per (kind, unit), the first and last anchor of its collectives."""
    spans: dict[tuple, tuple[int, int]] = {}
    for c in collectives:
        unit = units[c.node][0]
        if unit is not None:
            a = anchor(c, whens)
            first, last = spans.get((c.kind, unit), (a, a))
            spans[(c.kind, unit)] = (min(first, a), max(last, a))
    return spans


def join_nearest_blocks(collectives: list[Collective], units: dict, whens: dict[fx.Node, When],
                        costs: DeviceCosts, compute_ms_before: list[float], communication_bound: bool) -> set:
    """A collective outside the blocks of one group (embeddings, a final norm,
    an output projection) whose merging saves more than its copies cost joins a
    block unit of its kind next to it, where that costs no more than it saves:

    - a unit it leaves in place: an all-gather joins the unit the graph needs
      last before it (the unit's first use stays), a reduction the unit whose
      inputs are last ready soonest after its own (the unit's issue stays). Its
      own result or input is then held over the compute in between, which
      only a communication-bound group has time for (every collective saved
      shortens its step), or where that compute is shorter than the saving;
    - else a unit it moves by less compute than merging saves: the embeddings'
      all-gather joins the first block's unit, their reduce-scatter the last;
      an all-gather also where the group is communication-bound (a final
      norm's, needed before the last block's, joins it in the backward).

    Returns the all-gathers that joined a unit they move: the bucket copies
    them out ahead of the rest, so the unit's own parameters are not gathered
    out earlier than before."""
    spans = _unit_spans(collectives, units, whens)
    ahead = set()
    for c in collectives:
        w = whens[c.node]
        if units[c.node][0] is not None or c.group_size < 2 or copy_refusal(c, w, costs):
            continue
        a = anchor(c, whens)
        saves = costs.merge_saves_ms(c.kind, w.moved_bytes, w.moved_bytes, c.group_size)
        ours = [(unit, first, last) for (kind, unit), (first, last) in spans.items() if kind is c.kind]
        gathers = c.kind.needed_at_first_use
        # (the unit's edge it keeps, unit) and (the unit's edge it moves, unit)
        keeps = [(first, unit) for unit, first, _ in ours if first <= a] if gathers else \
            [(last, unit) for unit, _, last in ours if last >= a]
        moves = [(first, unit) for unit, first, _ in ours if first > a] if gathers else \
            [(last, unit) for unit, _, last in ours if last < a]
        kept = (max if gathers else min)(keeps, default=None)
        moved = (min if gathers else max)(moves, default=None)
        if kept is not None and (communication_bound or abs(compute_ms_before[kept[0]] - compute_ms_before[a]) < saves):
            units[c.node] = (kept[1], False)
        elif moved is not None and (abs(compute_ms_before[moved[0]] - compute_ms_before[a]) < saves
                                    or gathers and communication_bound):
            units[c.node] = (moved[1], False)
            if gathers:
                ahead.add(c.node)
    return ahead


class EstimatePolicy(Policy):
    """The locality policy with time from torch's estimates (the module docstring)."""

    prefetch = WITH_ESTIMATES

    def __init__(self, options: BucketingOptions, device: torch.device, costs: DeviceCosts):
        super().__init__(options, device)
        self.costs = costs
        self.compute_ms_before: list[float] = []
        self.whens: dict[fx.Node, When] = {}
        self.largest_block_gather_bytes = 0  # one block's gathered parameters, the largest
        self.apart = frozenset()  # all-gathers copied out ahead: they joined a unit they move

    def survey(self, collectives: list[Collective], whens: dict[fx.Node, When], timeline: Timeline) -> None:
        self.compute_ms_before = self.costs.compute_ms_before(timeline)
        self.whens = whens
        super().survey(collectives, whens, timeline)

    def group_blocks(self, group_name: str, blocks: dict[str, list[Collective]], collectives: list[Collective],
                     whens: dict[fx.Node, When]) -> None:
        self.largest_block_gather_bytes = max(
            self.largest_block_gather_bytes,
            max(sum(c.nbytes for c in members if c.kind.needed_at_first_use) for members in blocks.values()))
        estimate = BlockEstimate.of(list(blocks.values()), whens, self.compute_ms_before, self.costs,
                                    self.options.multidtype, self.options.cap_bytes(0))
        bound = estimate.communication_bound()
        k = self.options.blocks_per_bucket
        merge_runs(self.units, blocks, estimate.blocks_per_bucket() if k is None else k,
                   ends=k is None and not bound and len(blocks) > 2)
        mine = [c for c in collectives if c.group_name == group_name]
        self.apart = self.apart | join_nearest_blocks(mine, self.units, whens, self.costs, self.compute_ms_before,
                                                      bound)

    def keep_alone(self, c: Collective, w: When) -> str | None:
        """Copies against latency: not asked inside the user's own entries, under
        merge_all, or where the group's size is unknown."""
        explicit = self.units[c.node][1]
        if not self.windowed or explicit or c.group_size < 2:
            return None
        return copy_refusal(c, w, self.costs)

    def memory_budget_bytes(self, buckets: list[Bucket]) -> float:
        budget = super().memory_budget_bytes(buckets)
        if self.options.memory_budget_mb is None:  # what FSDP2's prefetch holds: two blocks' gathered parameters
            budget = max(budget, 2 * self.largest_block_gather_bytes)
        return budget

    def lead(self, bucket: Bucket) -> int:
        return lead_position(bucket, self.whens, self.compute_ms_before, self.costs)


def estimate_policy(options: BucketingOptions, device: torch.device) -> EstimatePolicy | None:
    """The estimate policy for `device`, or None where torch has no estimates of it."""
    costs = device_costs(device)
    return None if costs is None else EstimatePolicy(options, device, costs)
