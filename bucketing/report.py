"""What a bucketing run did: the plan record, its text form, and its log lines."""

from __future__ import annotations

import dataclasses
import json
import logging

import torch

from .collectives import Skipped
from .ops import dtype_name

log = logging.getLogger("bucketing")


@dataclasses.dataclass(frozen=True)
class BucketReport:
    """One merged collective."""

    index: int  # per kind, in graph order
    kind: str  # "all_gather" | "reduce_scatter" | "all_reduce"
    group: str
    reduce_op: str | None
    dtypes: tuple[str, ...]  # distinct member dtypes, in member order
    members: tuple[str, ...]  # names of the member collective nodes
    nbytes: int  # payload: sum of each member's larger side
    padding_bytes: int  # alignment padding moved by the merged collective
    collective: str  # name of the merged collective node
    # When, in node positions of the bucketed graph (0 = its first node):
    issued_at: int = -1  # the merged collective
    first_use: int = -1  # first user of any member's result
    last_use: int = -1  # last user of any member's result
    overlap_nodes: int = 0  # nodes between issue and first use
    overlap_flops: float = 0.0  # estimated compute between issue and first use
    extra_peak_bytes: int = 0  # estimated rise of live bytes this bucket causes at worst
    module: str | None = None  # the module unit it holds: a block, or a module_buckets entry
    apart: tuple[str, ...] = ()  # members copied out apart from the rest, at their own first use

    def rank_neutral_line(self) -> str:
        """What every rank must agree on (group names can differ between subgroups)."""
        return (
            f"{self.kind}[{self.index}] op={self.reduce_op} members={len(self.members)} "
            f"dtypes={','.join(self.dtypes)} bytes={self.nbytes} padding={self.padding_bytes}"
        )

    def line(self) -> str:
        op = f" {self.reduce_op}" if self.reduce_op else ""
        module = f" module={self.module}" if self.module else ""
        apart = f" apart={len(self.apart)}" if self.apart else ""
        return (
            f"{self.kind}[{self.index}] group={self.group}{op}{module} members={len(self.members)} "
            f"dtypes={','.join(self.dtypes)} bytes={self.nbytes} padding={self.padding_bytes}{apart} "
            f"-> {self.collective}"
        )

    def timing_line(self) -> str:
        return (
            f"(positions in the bucketed graph) issued @{self.issued_at}, first use @{self.first_use}, "
            f"last use @{self.last_use}; "
            f"overlap {self.overlap_nodes} nodes, {self.overlap_flops:.3g} FLOPs; "
            f"est. peak +{self.extra_peak_bytes} bytes"
        )


@dataclasses.dataclass
class Plan:
    buckets: list[BucketReport]
    skipped: list[Skipped]  # collectives left as they were, with why
    seconds: float = 0.0

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for b in self.buckets:
            out[b.kind] = out.get(b.kind, 0) + 1
        return out

    def __str__(self) -> str:
        """A readable multi-line report: each bucket, its members and timing, each collective left and why."""
        lines = [f"bucketing plan: {len(self.buckets)} bucket(s), {len(self.skipped)} collective(s) left as they were"]
        for b in self.buckets:
            lines.append("  " + b.line())
            lines.append("    members: " + " ".join(b.members))
            lines.append("    when: " + b.timing_line())
        for s in self.skipped:
            lines.append(f"  left {s.node_name}: {s.reason}")
        return "\n".join(lines)


def describe(emitted, extra_peak_bytes: int) -> BucketReport:
    """What one emitted bucket is; positions are filled in by `locate`."""
    bucket = emitted.bucket
    return BucketReport(
        index=bucket.index,
        kind=bucket.kind.name,
        group=bucket.group_name,
        reduce_op=bucket.reduce_op,
        dtypes=tuple(dict.fromkeys(dtype_name(m.dtype) for m in bucket.members)),
        members=tuple(m.node.name for m in bucket.members),
        nbytes=bucket.nbytes,
        padding_bytes=emitted.padding_bytes,
        collective=emitted.collective.name,
        extra_peak_bytes=extra_peak_bytes,
        module=bucket.module,
        apart=tuple(m.node.name for m in bucket.members if m.node in bucket.apart),
    )


def locate(report: BucketReport, emitted, timeline) -> BucketReport:
    """`report` with its positions in the graph `timeline` was taken of (the bucketed one)."""
    pos = timeline.position
    issued = pos[emitted.collective]
    # Users the timeline skips are replaced members about to be erased.
    uses = [pos[u] for out in emitted.outputs if out is not None for u in out.users if u in pos]
    if not uses:  # no member is read: the wait is the last use
        uses = [pos[n] for n in emitted.wait_nodes]
    first_use = min(uses)
    return dataclasses.replace(
        report,
        issued_at=issued,
        first_use=first_use,
        last_use=max(uses),
        overlap_nodes=max(0, first_use - issued),
        overlap_flops=timeline.flops_between(issued, first_use),
    )


def left_alone(alone: list) -> list[Skipped]:
    """The plan's collectives left as they were (plan.records.Alone), as the report lists them."""
    return [Skipped(a.collective.node.name, a.reason) for a in alone]


def publish(plan: Plan) -> None:
    for b in plan.buckets:
        log.info("bucketing: %s", b.line())
    for s in plan.skipped:
        log.info("bucketing: left %s: %s", s.node_name, s.reason)
    if plan.buckets or plan.skipped:
        torch._logging.trace_structured(
            "artifact",
            metadata_fn=lambda: {"name": "bucketing_plan", "encoding": "json"},
            payload_fn=lambda: json.dumps(
                {
                    "buckets": [dataclasses.asdict(b) for b in plan.buckets],
                    "skipped": [dataclasses.asdict(s) for s in plan.skipped],
                }
            ),
        )
