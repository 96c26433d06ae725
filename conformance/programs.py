"""Collective programs as data, and the interpreter that turns them into functions.

A program is a list of `Step`s. Each step issues one functional collective on
an input tensor (optionally cast, sliced, or made to depend on an earlier
result first) and either returns the result directly or feeds it to a little
compute right away (a user sitting between collectives).

Each step says what data its input holds (`Step.data`): "int", small integers
for reductions (exact in any order: tests data movement only) and random values
for all-gathers; "normal" (randn) or "mixed" (randn times magnitudes from
10^-4 to 10^4, 10^3 in f16) in floating dtypes, different on every rank.
"""

from __future__ import annotations

import dataclasses
import zlib

import torch

from .releases import COLLECTIVES_TAKE_STRIDED_INPUTS

c10d = torch.ops._c10d_functional

FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
# gloo has no collectives for these; the harness gathers their bytes instead.
GLOO_UNSUPPORTED = (*FP8, torch.int16)
DATA = ("int", "normal", "mixed")


@dataclasses.dataclass(frozen=True)
class Step:
    kind: str  # "all_gather" | "reduce_scatter" | "all_reduce"
    dtype: torch.dtype
    shape: tuple[int, ...]  # per-rank input shape (reduce-scatter: dim 0 is per-rank, times world)
    group: str = "world"
    reduce_op: str = "sum"
    cast_from: torch.dtype | None = None  # input arrives in this dtype and is cast first
    slice_input: bool = False  # input is a strided slice of a larger tensor
    depends_on: int | None = None  # input is mixed with the result of this earlier step
    use_now: bool = False  # consume the result right after the collective
    matmul_now: bool = False  # feed the (floating) result to a matmul right after: heavy compute
    data: str = "int"  # what the input holds (DATA, see the module docstring)
    waits: int = 1  # wait_tensor calls on the result; each one's result is used (an output each)

    def __post_init__(self):
        if self.data not in DATA:
            raise ValueError(f"Step.data must be one of {DATA}, got {self.data!r}")
        if self.data != "int" and not (self.cast_from or self.dtype).is_floating_point:
            raise ValueError(f"Step.data={self.data!r} needs a floating dtype, got {self.cast_from or self.dtype}")
        if self.data != "int" and (self.cast_from or self.dtype) in FP8:
            raise ValueError(f"Step.data={self.data!r} is for bf16/f16/f32/f64 inputs")
        if self.waits < 1:
            raise ValueError(f"Step.waits must be at least 1, got {self.waits}")

    def input_shape(self, group_size: int) -> tuple[int, ...]:
        if self.kind == "reduce_scatter":
            return (self.shape[0] * group_size, *self.shape[1:])
        return self.shape


def consume(t: torch.Tensor) -> torch.Tensor:
    """Exact, dtype-safe compute on a result."""
    if t.dtype == torch.bool:
        return torch.logical_not(t)
    if t.dtype in FP8:
        return t.to(torch.float32) * 2
    if t.dtype.is_floating_point:
        return t * 2
    return t + 1


def matmul(t: torch.Tensor) -> torch.Tensor:
    """Heavy compute on a result: its rows times their transpose, in its own dtype."""
    if t.numel() == 0:
        return t.clone()
    rows = t.reshape(t.shape[0], -1)
    return rows @ rows.t()


def mix(x: torch.Tensor, earlier: torch.Tensor) -> torch.Tensor:
    """Make `x` depend on `earlier` without changing its value in any dtype.

    Adds `(e != e)`, which is 0 for every non-NaN element; compilers cannot
    fold it away (NaN), so the data dependency survives into the graph.
    """
    if earlier.numel() == 0:
        return x
    first = earlier.reshape(-1)[0]
    if first.dtype in FP8:
        first = first.to(torch.float32)
    is_nan = first != first
    if x.dtype == torch.bool:
        return torch.logical_or(x, is_nan)
    if x.dtype in FP8:
        return (x.to(torch.float32) + is_nan.to(torch.float32)).to(x.dtype)
    return x + is_nan.to(x.dtype)


def collective_input(step: Step, x: torch.Tensor) -> torch.Tensor:
    """What the step's collective receives, from its rank-local input (before `mix`,
    which changes no value)."""
    if step.slice_input:
        x = x[::2]
        if not COLLECTIVES_TAKE_STRIDED_INPUTS:
            x = x.contiguous()
    if step.cast_from is not None:
        x = x.to(step.dtype)
    return x


def output_steps(steps: tuple[Step, ...]) -> list[int]:
    """The step each output of `build`'s program comes from, in output order (one per wait)."""
    return [i for i, step in enumerate(steps) for _ in range(step.waits)]


def group_info(groups: dict, name: str) -> tuple[str, int]:
    group_name, size, _ = groups[name]
    return group_name, size


def build(steps: tuple[Step, ...], groups: dict):
    """The program as a function of the rank-local input tensors."""

    def program(*inputs):
        results = []
        outputs = []
        for step, x in zip(steps, inputs):
            group_name, size = group_info(groups, step.group)
            x = collective_input(step, x)
            if step.depends_on is not None:
                x = mix(x, results[step.depends_on])
            if step.kind == "all_gather":
                r = c10d.all_gather_into_tensor(x, size, group_name)
            elif step.kind == "reduce_scatter":
                r = c10d.reduce_scatter_tensor(x, step.reduce_op, size, group_name)
            else:
                r = c10d.all_reduce(x, step.reduce_op, group_name)
            waited = [c10d.wait_tensor(r) for _ in range(step.waits)]
            results.append(waited[0])
            for r in waited:
                if step.matmul_now:
                    outputs.append(matmul(r))
                else:
                    outputs.append(consume(r) if step.use_now else r)
        return tuple(outputs)

    return program


def make_inputs(steps: tuple[Step, ...], groups: dict, seed_text: str, rank: int, device: str = "cpu"):
    """Rank-local inputs, deterministic per (seed_text, rank). With `data="int"` reductions
    get small integers (sums exact in any order) and all-gathers random values;
    "normal" and "mixed" give real values (see the module docstring)."""
    gen = torch.Generator().manual_seed(zlib.crc32(seed_text.encode()) * 31 + rank)
    inputs = []
    for step in steps:
        _, size = group_info(groups, step.group)
        shape = step.input_shape(size)
        if step.slice_input:
            shape = (shape[0] * 2, *shape[1:])
        dtype = step.cast_from or step.dtype
        if step.data == "normal":
            t = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
        elif step.data == "mixed":
            top = 3 if dtype == torch.float16 else 4  # f16 ends at 65504: sums of 4 ranks stay finite
            exponent = torch.rand(shape, generator=gen, dtype=torch.float64) * (top + 4) - 4
            t = (torch.randn(shape, generator=gen, dtype=torch.float64) * 10**exponent).to(dtype)
        elif step.kind != "all_gather":
            t = torch.randint(-3, 4, shape, generator=gen).to(dtype)
        elif dtype == torch.bool:
            t = torch.randint(0, 2, shape, generator=gen).to(torch.bool)
        elif dtype.is_floating_point:
            t = torch.randn(shape, generator=gen).to(dtype)
        else:
            info = torch.iinfo(dtype)
            t = torch.randint(max(info.min, -(2**31)), min(info.max, 2**31 - 1), shape, generator=gen).to(dtype)
        inputs.append(t.to(device))
    return inputs
