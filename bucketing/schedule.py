"""When each merged bucket is issued: as early as its inputs allow, one prefetch ahead."""

from __future__ import annotations

from .records import Bucket, When


def issue_positions(buckets: list[Bucket], whens: dict) -> dict[int, int]:
    """Per merged bucket (by id): the position, before the rewrite, it is issued before.

    As early as its inputs allow, but not before the previous bucket of its
    kind and group is waited on: each bucket is prefetched while the one before
    it is used (FSDP's forward prefetch), and at most two are in flight.
    """
    out: dict[int, int] = {}
    previous_use: dict[tuple, int] = {}
    merged = sorted((b for b in buckets if len(b.members) > 1),
                    key=lambda b: whens[b.members[0].node].position)
    for b in merged:
        ws: list[When] = [whens[m.node] for m in b.members]
        first = min(w.position for w in ws)
        ready = max(w.ready for w in ws) + 1
        stream = (b.kind, b.group_name)
        out[id(b)] = max(ready, min(first, previous_use.get(stream, first)))
        previous_use[stream] = min(w.first_use for w in ws)
    return out
