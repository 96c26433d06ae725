"""Random collective programs (hypothesis) for the pass under test.

A program is 1-64 steps of random kinds, dtypes, sizes (0, 1, odd, primes,
larger), groups, compute between collectives (pointwise, or a matmul that
the locality policy may split buckets at) and dependencies on earlier
results; the pass options (policy, windows and budgets included) are random too. Every example runs on real gloo
ranks: the rewritten graph must lint (so it is topologically sorted and no
bucket waits on itself), every rank must build the same graph, and the results
must be bit-identical to the unbucketed program.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from .catalog import ALL_DTYPES, GLOO_REDUCE_OPS, REDUCTION_DTYPES
from .programs import Step

SIZES = (0, 1, 2, 3, 5, 7, 8, 13, 16, 31, 64, 97)
MATMUL_DTYPES = (torch.float32, torch.bfloat16, torch.float64)  # heavy compute between collectives


@st.composite
def steps_strategy(draw, max_steps: int = 64, groups=("world", "alt")):
    n = draw(st.integers(1, max_steps))
    steps = []
    for i in range(n):
        kind = draw(st.sampled_from(("all_gather", "all_gather", "reduce_scatter", "all_reduce")))
        rank_ = draw(st.integers(1, 3))
        shape = tuple(draw(st.sampled_from(SIZES)) for _ in range(rank_))
        if kind == "all_gather":
            dtype = draw(st.sampled_from(ALL_DTYPES))
            op = "sum"
        else:
            dtype = draw(st.sampled_from(REDUCTION_DTYPES))
            op = draw(st.sampled_from(GLOO_REDUCE_OPS))
        cast_from = None
        if kind == "all_gather" and dtype.is_floating_point and draw(st.integers(0, 4)) == 0:
            cast_from = draw(st.sampled_from([d for d in ALL_DTYPES if d.is_floating_point and d != dtype]))
        depends_on = draw(st.one_of(st.none(), st.integers(0, i - 1))) if i else None
        steps.append(Step(
            kind=kind, dtype=dtype, shape=shape, group=draw(st.sampled_from(groups)), reduce_op=op,
            cast_from=cast_from, slice_input=draw(st.integers(0, 5)) == 0 and bool(shape),
            depends_on=depends_on, use_now=draw(st.booleans()),
            matmul_now=dtype in MATMUL_DTYPES and draw(st.integers(0, 3)) == 0,
        ))
    return tuple(steps)


@st.composite
def options_strategy(draw):
    options = {"multidtype": draw(st.booleans())}
    cap = draw(st.sampled_from([None, 0.0005, 0.002, 0.05]))
    if cap is not None:
        options["bucket_cap_mb"] = cap
    count = draw(st.sampled_from([None, None, 1, 2, 3, 7]))
    if count is not None:
        options["max_bucket_count"] = count
    kinds = draw(st.sampled_from([None, ("all_gather",), ("reduce_scatter", "all_reduce")]))
    if kinds is not None:
        options["collectives"] = kinds
    policy = draw(st.sampled_from([None, None, "merge_all"]))
    if policy is not None:
        options["policy"] = policy
    flops = draw(st.sampled_from([None, None, 0, 1e4]))
    if flops is not None:
        options["locality_flops"] = flops
    budget = draw(st.sampled_from([None, None, 0, 0.001]))
    if budget is not None:
        options["memory_budget_mb"] = budget
    return options
