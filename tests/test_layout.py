import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bucketing.apply.layout import plan_chunk

DTYPES = [
    torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.float8_e4m3fn, torch.float8_e5m2,
    torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool,
]


def test_bf16_odd_then_f32():
    layout = plan_chunk([(5 * 2, 2), (3 * 4, 4)], alignment=16)
    assert [s.offset for s in layout.slots] == [0, 16]
    assert layout.chunk_bytes == 32
    assert layout.padding_bytes == 32 - 22


def test_alignment_one_still_aligns_to_itemsize():
    layout = plan_chunk([(3, 1), (2 * 8, 8), (1, 1), (2, 2)], alignment=1)
    assert [s.offset for s in layout.slots] == [0, 8, 24, 26]
    assert layout.chunk_bytes == 32  # padded to the widest member's alignment


def test_zero_sized_members_take_no_bytes():
    layout = plan_chunk([(0, 4), (4, 4), (0, 2)], alignment=16)
    assert layout.payload_bytes == 4
    assert layout.chunk_bytes == 16


def test_rejects_partial_items_and_bad_alignment():
    with pytest.raises(ValueError):
        plan_chunk([(3, 2)], alignment=16)
    with pytest.raises(ValueError):
        plan_chunk([(4, 4)], alignment=24)


@settings(max_examples=300, deadline=None)
@given(
    members=st.lists(st.tuples(st.sampled_from(DTYPES), st.integers(0, 70)), min_size=1, max_size=12),
    alignment=st.sampled_from([1, 2, 4, 8, 16, 64]),
)
def test_every_dtype_mix_is_viewable_in_place(members, alignment):
    sizes = [(n * d.itemsize, d.itemsize) for d, n in members]
    layout = plan_chunk(sizes, alignment)
    end = 0
    for (dtype, n), slot in zip(members, layout.slots):
        assert slot.offset % max(alignment, dtype.itemsize) == 0
        assert slot.offset >= end  # no overlap, members in order
        end = slot.offset + n * dtype.itemsize
    assert layout.chunk_bytes >= end
    assert layout.chunk_bytes % layout.alignment == 0
    # Every rank's chunk start is aligned, so each member views in its dtype on any rank.
    world = 3
    buf = torch.zeros(world * layout.chunk_bytes, dtype=torch.uint8)
    grid = buf.view(world, layout.chunk_bytes)
    for (dtype, n), slot in zip(members, layout.slots):
        part = grid[:, slot.offset : slot.offset + n * dtype.itemsize].view(dtype)
        assert part.shape == (world, n)


def test_groups_sit_together_in_first_appearance_order():
    # bf16, f32, bf16, f32: grouped as [bf16 0, bf16 2 | f32 1, f32 3], slots still in member order.
    sizes = [(3 * 2, 2), (5 * 4, 4), (7 * 2, 2), (1 * 4, 4)]
    layout = plan_chunk(sizes, alignment=16, groups=["bf16", "f32", "bf16", "f32"])
    assert [s.offset for s in layout.slots] == [0, 32, 16, 64]
    assert [s.nbytes for s in layout.slots] == [6, 20, 14, 4]
    assert layout.chunk_bytes == 80
    assert plan_chunk(sizes, alignment=16).slots[1].offset == 16  # ungrouped: member order
