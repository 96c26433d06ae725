"""The copy-in and copy-out ops on their own: every member lands at its offset and
comes back out byte for byte, for grouped and interleaved layouts."""

import pytest
import torch

import bucketing  # noqa: F401  (registers ops)
from bucketing import ops
from bucketing.apply.layout import plan_chunk


@pytest.mark.parametrize("grouped", [True, False], ids=["grouped", "interleaved"])
def test_copy_in_places_every_member_bytewise(grouped):
    gen = torch.Generator().manual_seed(0)
    dtypes = [torch.float32, torch.bfloat16, torch.int8, torch.float32, torch.bfloat16, torch.bool]
    xs = [torch.randint(0, 2, (5 + i,), generator=gen).to(d) if d is torch.bool
          else torch.randn(5 + i, generator=gen).mul(50).to(d) for i, d in enumerate(dtypes)]
    layout = plan_chunk([(x.numel() * x.element_size(), x.element_size()) for x in xs], 16,
                        groups=dtypes if grouped else None)
    names = ops.dtype_names(dtypes)
    chunk = torch.ops.bucketing_ops.all_gather_copy_in(
        xs, [s.offset for s in layout.slots], [x.numel() for x in xs], names, layout.chunk_bytes
    )
    assert chunk.numel() == layout.chunk_bytes
    for x, slot in zip(xs, layout.slots):
        assert torch.equal(chunk[slot.offset:slot.offset + slot.nbytes], x.view(torch.uint8)), slot


@pytest.mark.parametrize("rank", [0, 2])
def test_copy_in_slot_fills_the_ranks_slot_of_the_gathered_buffer(rank):
    """gather_in_place's copy-in: each member's bytes at its offset in rank's slot of a world-sized buffer."""
    gen = torch.Generator().manual_seed(2)
    xs = [torch.randn(5, generator=gen).to(torch.bfloat16), torch.randn(7, generator=gen)]
    layout = plan_chunk([(10, 2), (28, 4)], 16, groups=[x.dtype for x in xs])
    args = (xs, [s.offset for s in layout.slots], [5, 7], ops.dtype_names([x.dtype for x in xs]), layout.chunk_bytes)
    chunk = torch.ops.bucketing_ops.all_gather_copy_in(*args)
    buffer = torch.ops.bucketing_ops.all_gather_copy_in_slot(*args, 3, rank)
    assert buffer.dtype == torch.uint8 and buffer.numel() == 3 * layout.chunk_bytes
    base = rank * layout.chunk_bytes
    for slot in layout.slots:
        start = slot.offset
        assert torch.equal(buffer[base + start:base + start + slot.nbytes], chunk[start:start + slot.nbytes])


def test_copy_in_casts_like_to():
    x = torch.randn(37, generator=torch.Generator().manual_seed(1)) * 1000
    layout = plan_chunk([(37 * 2, 2)], 16)
    chunk = torch.ops.bucketing_ops.all_gather_copy_in([x], [0], [37], "bfloat16", layout.chunk_bytes)
    assert torch.equal(chunk[:74], x.to(torch.bfloat16).view(torch.uint8))


def test_copy_in_falls_back_to_copies_where_cat_fails(monkeypatch):
    xs = [torch.randn(5), torch.randn(3).to(torch.bfloat16), torch.randn(4)]
    layout = plan_chunk([(20, 4), (6, 2), (16, 4)], 16, groups=[x.dtype for x in xs])
    names = ops.dtype_names([x.dtype for x in xs])
    args = (xs, [s.offset for s in layout.slots], [x.numel() for x in xs], names, layout.chunk_bytes)
    expected = torch.ops.bucketing_ops.all_gather_copy_in(*args)

    def no_cat(*a, **k):
        raise RuntimeError("cat not implemented for this dtype")

    monkeypatch.setattr(torch, "cat", no_cat)
    chunk = ops._copy_in_impl(*args)
    for slot in layout.slots:
        assert torch.equal(chunk[slot.offset:slot.offset + slot.nbytes], expected[slot.offset:slot.offset + slot.nbytes])


def _gathered_bytes(dtypes, sizes, grouped: bool, rows: int, seed: int):
    """A chunk layout for members of `dtypes` and `sizes`, and `rows` rows of random bytes laid out by it."""
    layout = plan_chunk([(n * d.itemsize, d.itemsize) for n, d in zip(sizes, dtypes)], 16,
                        groups=dtypes if grouped else None)
    gen = torch.Generator().manual_seed(seed)
    return layout, torch.randint(0, 256, (rows * layout.chunk_bytes,), generator=gen, dtype=torch.uint8)


# Runs of one dtype, gaps inside and between runs, an empty and a one-element member.
MIXED_DTYPES = [torch.float32, torch.float32, torch.bfloat16, torch.bool, torch.int8, torch.bfloat16,
                torch.float64, torch.float32, torch.bfloat16]
MIXED_SIZES = [3, 5, 7, 4, 9, 0, 2, 1, 6]


@pytest.mark.parametrize("grouped", [True, False], ids=["grouped", "interleaved"])
@pytest.mark.parametrize("rows", [1, 3])
def test_copy_out_returns_every_member_dense_and_bytewise(grouped, rows):
    dtypes, sizes = MIXED_DTYPES, MIXED_SIZES
    layout, buffer = _gathered_bytes(dtypes, sizes, grouped, rows, seed=2)
    shapes = [[rows * n] if k != 7 or rows > 1 else [] for k, n in enumerate(sizes)]  # member 7: 0-d when rows=1
    outs = torch.ops.bucketing_ops.copy_out(
        buffer, rows, [s.offset for s in layout.slots], [s.nbytes for s in layout.slots], ops.dtype_names(dtypes),
        [d for shape in shapes for d in shape], [len(shape) for shape in shapes],
    )
    _assert_members_copied_out(outs, buffer, layout, dtypes, shapes, rows)


def _assert_members_copied_out(outs, buffer, layout, dtypes, shapes, rows):
    grid = buffer.view(rows, -1)
    for out, d, shape, slot in zip(outs, dtypes, shapes, layout.slots):
        assert out.dtype == d and list(out.shape) == shape and out.is_contiguous()
        assert torch.equal(out.reshape(-1).view(torch.uint8), grid[:, slot.offset:slot.offset + slot.nbytes].reshape(-1))
    # Dense, 16-byte aligned (Inductor asserts it of op outputs), and no output
    # overlaps another or the buffer.
    spans = sorted((t.data_ptr(), t.data_ptr() + t.nbytes) for t in [*outs, buffer] if t.nbytes)
    assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:]))
    assert all(t.data_ptr() % 16 == 0 for t in outs if t.nbytes)


@pytest.mark.parametrize("grouped", [True, False], ids=["grouped", "interleaved"])
@pytest.mark.parametrize("rows", [1, 3])
def test_copy_out_into_fills_every_member_bytewise(grouped, rows):
    # The CPU form: the graph allocates each member [rows, width]; one call fills them.
    dtypes, sizes = MIXED_DTYPES, MIXED_SIZES
    layout, buffer = _gathered_bytes(dtypes, sizes, grouped, rows, seed=5)
    outs = [torch.full((rows, n), 7, dtype=d) for d, n in zip(dtypes, sizes)]
    result = torch.ops.bucketing_ops.copy_out_into(
        buffer, rows, [s.offset for s in layout.slots], [s.nbytes for s in layout.slots], ops.dtype_names(dtypes), outs)
    assert result is None
    _assert_members_copied_out(outs, buffer, layout, dtypes, [[rows, n] for n in sizes], rows)


@pytest.mark.parametrize("rows", [1, 2, 4])
def test_copy_out_returns_long_runs_member_by_member(rows):
    # Ten equal f32 members, three wider ones, odd bf16 ones between, 2-D shapes:
    # one split copy per run, every member its own tensor.
    dtypes = [torch.float32] * 13 + [torch.bfloat16] * 4 + [torch.float32] * 3
    sizes = [4] * 10 + [6] * 3 + [3, 3, 5, 3] + [1, 1, 2]
    layout, buffer = _gathered_bytes(dtypes, sizes, True, rows, seed=4)
    offsets, row_bytes = [s.offset for s in layout.slots], [s.nbytes for s in layout.slots]
    shapes = [[rows, n] for n in sizes]
    args = (rows, offsets, row_bytes, ops.dtype_names(dtypes), [d for s in shapes for d in s], [2] * len(shapes))
    outs = torch.ops.bucketing_ops.copy_out(buffer, *args)
    _assert_members_copied_out(outs, buffer, layout, dtypes, shapes, rows)
    assert len({t.untyped_storage().data_ptr() for t in outs}) == len(outs)


@pytest.mark.parametrize("grouped", [True, False], ids=["grouped", "interleaved"])
@pytest.mark.parametrize("rows", [1, 3])
def test_packed_copy_out_holds_every_member_dense_in_its_run(grouped, rows):
    # Runs of one dtype (bool apart from int8/uint8), gaps inside runs, an empty member.
    dtypes = [torch.float32, torch.float32, torch.bfloat16, torch.bool, torch.uint8, torch.bfloat16,
              torch.float64, torch.float32, torch.bool]
    layout, buffer = _gathered_bytes(dtypes, [3, 5, 7, 4, 9, 0, 2, 1, 6], grouped, rows, seed=3)
    offsets, row_bytes = [s.offset for s in layout.slots], [s.nbytes for s in layout.slots]
    names = ops.dtype_names(dtypes)
    runs = torch.ops.bucketing_ops.copy_out_packed(buffer, rows, offsets, row_bytes, names)
    stretches = ops.packed_stretches(tuple(offsets), tuple(row_bytes), names)
    assert len(runs) == len(stretches)
    grid = buffer.view(rows, -1)
    seen = set()
    for run, (name, start, end, pieces) in zip(runs, stretches):
        assert run.dtype == ops.dtype_from_name(name) and run.is_contiguous() and run.dim() == 1
        assert run.numel() * run.element_size() == rows * (end - start)
        column = 0
        for i, width in pieces:
            if i >= 0:
                assert dtypes[i] == run.dtype
                member = run[rows * column:rows * (column + width)]
                expected = grid[:, offsets[i]:offsets[i] + row_bytes[i]].reshape(-1)
                assert torch.equal(member.view(torch.uint8), expected), i
                seen.add(i)
            column += width
    assert seen == set(range(len(dtypes)))
    # The outputs never alias the buffer: the op's schema promises fresh tensors.
    assert all(run.untyped_storage().data_ptr() != buffer.untyped_storage().data_ptr() for run in runs)
