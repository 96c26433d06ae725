"""The records of a plan: when a collective is needed, what a bucket spans,
the bucket, a collective left alone and why, and the whole plan."""

from __future__ import annotations

import dataclasses

import torch.fx as fx

from ..collectives import Collective, Kind
from .timeline import Timeline


@dataclasses.dataclass(frozen=True)
class When:
    """Where one collective sits and what it holds, in graph positions before the rewrite."""

    position: int  # the collective itself
    ready: int  # the producer of what it reads
    first_use: int  # earliest user of its result
    last_use: int  # latest user of its result
    in_bytes: int
    out_bytes: int
    anchor_flops: float  # all-gathers: compute before the first use; reductions: before the input is ready

    @property
    def moved_bytes(self) -> int:
        """Input and output together: what torch's NCCL model and a copy-in plus copy-out count."""
        return self.in_bytes + self.out_bytes


@dataclasses.dataclass(frozen=True)
class Span:
    """What a bucket's members cover: the anchor range, last input, first use."""

    low: float
    high: float
    ready: int
    first_use: int

    @staticmethod
    def of(w: When) -> Span:
        return Span(w.anchor_flops, w.anchor_flops, w.ready, w.first_use)

    def add(self, w: When) -> Span:
        return Span(min(self.low, w.anchor_flops), max(self.high, w.anchor_flops),
                    max(self.ready, w.ready), min(self.first_use, w.first_use))


@dataclasses.dataclass
class Bucket:
    """Collectives merged into one; `index` counts buckets of one kind in graph order."""

    index: int
    kind: Kind
    key: tuple
    cap_bytes: float
    members: list[Collective] = dataclasses.field(default_factory=list)
    nbytes: int = 0  # payload bytes, the larger side of each member; padding excluded
    span: Span | None = None  # what the locality rules track
    # Why no other collective joined (set while planning; read when it stays alone).
    alone_reason: str = ""
    module: str | None = None  # the module unit it holds (a block or a module_buckets entry)
    explicit: bool = False  # a module_buckets entry: the memory split leaves it whole
    # Members copied out apart, at their own first use, the rest at theirs, so
    # the rest are not held over the compute between (a policy decides which).
    # Never every member (set_apart): there is always a rest.
    apart: frozenset = frozenset()  # of member nodes
    # Issued no earlier than the prefetch depth allows, neither led nor eager
    # (issue.Prefetch): the memory budget cannot afford more (memory.split_to_budget).
    held_back: bool = False

    def part(self, members: list[Collective], alone_reason: str = "") -> Bucket:
        """A bucket of some of these members (a split keeps key, index and cap)."""
        return Bucket(self.index, self.kind, self.key, self.cap_bytes, list(members),
                      sum(m.nbytes for m in members), alone_reason=alone_reason,
                      module=self.module, explicit=self.explicit, held_back=self.held_back).set_apart(self.apart)

    def set_apart(self, nodes) -> Bucket:
        """Copy out the members among `nodes` apart from the rest; none where that is
        every member (nothing would be copied out after them)."""
        apart = frozenset(m.node for m in self.members if m.node in nodes)
        self.apart = apart if len(apart) < len(self.members) else frozenset()
        return self

    def copied_out_at(self, whens: dict) -> int:
        """Where the copy-out of the members not set apart goes (the first use of
        any of them): the merged result of the default copy-out is held until then."""
        return min(whens[m.node].first_use for m in self.members if m.node not in self.apart)

    def copy_out_groups(self) -> list[list[int]]:
        """Member indices per copy-out, in the order the graph needs them: those
        set apart, then the rest."""
        early = [i for i, m in enumerate(self.members) if m.node in self.apart]
        rest = [i for i, m in enumerate(self.members) if m.node not in self.apart]
        return [early, rest] if early else [rest]

    @property
    def group_name(self) -> str:
        return self.members[0].group_name

    @property
    def reduce_op(self) -> str | None:
        return self.members[0].reduce_op


@dataclasses.dataclass(frozen=True)
class Alone:
    """A collective the plan leaves as it was, and why. `bucket`: the bucket of
    its own it is issued as (prefetched like one), or None where it is not
    planned at all."""

    collective: Collective
    reason: str
    bucket: Bucket | None = None
    # It opened a bucket no other collective joined (rather than being kept out of every bucket).
    unjoined: bool = False


@dataclasses.dataclass
class Planned:
    """The plan, complete: what the rewrite emits and where it places it."""

    buckets: list[Bucket]  # merged, in order of their first member
    alone: list[Alone]  # every collective left as it was, in report order
    whens: dict[fx.Node, When]  # per collective node
    timeline: Timeline  # of the graph as planned, before any rewrite
    issue_at: dict[int, int]  # per bucket moved (by id): the position it is issued before
    issue_order: list[list[fx.Node]]  # every collective in issue units, in the order each group issues
    extra_peak_bytes: dict[int, int]  # per merged bucket (by id): the most it adds to live bytes
    # Per reduction bucket (by id), how many of its kind and group are issued before it
    # is waited for (memory.reductions_in_flight); None: at its result's first use.
    reductions_in_flight: dict[int, int | None] | None = None

    def issued(self) -> list[Bucket]:
        """Every bucket the issue order places, those of a collective left alone included."""
        return self.buckets + [a.bucket for a in self.alone if a.bucket is not None]
