"""Byte layout of one rank's chunk in a multi-dtype all-gather bucket.

Pure arithmetic, no torch graph involved. Each rank contributes one chunk of
`chunk_bytes`; the gathered buffer is the ranks' chunks back to back:

    rank 0 chunk                          rank 1 chunk
    | m0 bytes |pad| m1 bytes      |pad| | m0 bytes |pad| m1 bytes      |pad|
    ^0         ^align(m0 end)            ^chunk_bytes

Members of one dtype sit together (so one call fills each dtype's span).
Every member starts at an offset that is a multiple of max(alignment, itemsize)
and the chunk is padded to the largest alignment used, so every member of every
rank's chunk can be viewed in its own dtype without a copy.
"""

from __future__ import annotations

import dataclasses


def align_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


@dataclasses.dataclass(frozen=True)
class MemberSlot:
    offset: int  # byte offset of the member inside each rank's chunk
    nbytes: int  # bytes of the member's per-rank shard


@dataclasses.dataclass(frozen=True)
class ChunkLayout:
    slots: tuple[MemberSlot, ...]
    chunk_bytes: int  # bytes per rank, padding included
    alignment: int  # alignment of the chunk size (and so of every rank's chunk start)

    @property
    def payload_bytes(self) -> int:
        return sum(s.nbytes for s in self.slots)

    @property
    def padding_bytes(self) -> int:
        """Padding per rank chunk; the gathered buffer holds world_size times this."""
        return self.chunk_bytes - self.payload_bytes


def plan_chunk(
    member_nbytes_and_itemsize: list[tuple[int, int]], alignment: int, groups: list | None = None
) -> ChunkLayout:
    """Lay members out; `alignment` must be a power of two.

    With `groups` (one key per member, e.g. its dtype), members of one group
    sit together, groups in order of first appearance, members in order within
    each; so the copy-in fills each group's span with one call. Slots are
    returned in member order either way.
    """
    if alignment < 1 or alignment & (alignment - 1):
        raise ValueError(f"alignment must be a power of two >= 1, got {alignment}")
    order = list(range(len(member_nbytes_and_itemsize)))
    if groups is not None:
        first_seen: dict = {}
        for i, g in enumerate(groups):
            first_seen.setdefault(g, i)
        order.sort(key=lambda i: first_seen[groups[i]])  # stable: member order within a group
    offset = 0
    chunk_alignment = alignment
    slots: list[MemberSlot | None] = [None] * len(order)
    for i in order:
        nbytes, itemsize = member_nbytes_and_itemsize[i]
        if nbytes % itemsize:
            raise ValueError(f"member of {nbytes} bytes is not a whole number of {itemsize}-byte items")
        member_alignment = max(alignment, itemsize)
        chunk_alignment = max(chunk_alignment, member_alignment)
        offset = align_up(offset, member_alignment)
        slots[i] = MemberSlot(offset, nbytes)
        offset += nbytes
    # Never an empty chunk: a [world, 0] byte grid cannot be viewed as wider dtypes.
    chunk_bytes = max(align_up(offset, chunk_alignment), chunk_alignment)
    return ChunkLayout(tuple(slots), chunk_bytes, chunk_alignment)
