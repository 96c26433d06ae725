"""The records planning hands the later phases: when a collective is needed,
what a bucket spans, and the bucket itself."""

from __future__ import annotations

import dataclasses

from .collectives import Collective


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
    kind: str
    key: tuple
    cap_bytes: float
    members: list[Collective] = dataclasses.field(default_factory=list)
    nbytes: int = 0  # payload bytes, the larger side of each member; padding excluded
    span: Span | None = None  # what the locality rules track
    # Why no other collective joined (set while planning; read when it stays alone).
    alone_reason: str = ""
    module: str | None = None  # the module unit it holds (a block or a module_buckets entry)
    explicit: bool = False  # a module_buckets entry: the memory split leaves it whole
    # All-gather members the graph needs well before the rest (one outside the
    # blocks that joined the next block's unit): copied out at their own first
    # use, the rest at theirs, so the rest are not held over the compute between.
    # Never every member (mark_ahead): there is always a rest.
    ahead: frozenset = frozenset()  # of member nodes

    def part(self, members: list[Collective], alone_reason: str = "") -> Bucket:
        """A bucket of some of these members (a split keeps key, index and cap)."""
        return Bucket(self.index, self.kind, self.key, self.cap_bytes, list(members),
                      sum(m.nbytes for m in members), alone_reason=alone_reason,
                      module=self.module, explicit=self.explicit).mark_ahead(self.ahead)

    def mark_ahead(self, nodes) -> Bucket:
        """Copy out the members among `nodes` ahead of the rest; none where that is
        every member (nothing would be copied out after them)."""
        ahead = frozenset(m.node for m in self.members if m.node in nodes)
        self.ahead = ahead if len(ahead) < len(self.members) else frozenset()
        return self

    def copied_out_at(self, whens: dict) -> int:
        """Where the copy-out of the members not needed ahead goes (the first use of
        any of them): the merged result of the default copy-out is held until then."""
        return min(whens[m.node].first_use for m in self.members if m.node not in self.ahead)

    def copy_out_groups(self) -> list[list[int]]:
        """Member indices per copy-out, in the order the graph needs them: those
        `ahead`, then the rest."""
        early = [i for i, m in enumerate(self.members) if m.node in self.ahead]
        rest = [i for i, m in enumerate(self.members) if m.node not in self.ahead]
        return [early, rest] if early else [rest]

    @property
    def group_name(self) -> str:
        return self.members[0].group_name

    @property
    def reduce_op(self) -> str | None:
        return self.members[0].reduce_op
