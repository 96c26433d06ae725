"""Rank tasks for tests/test_reordering.py (run inside conformance.pool ranks): gloo's
sums, merged into one buffer or issued one by one, on real-valued data per rank."""

from __future__ import annotations

import hashlib

import torch
import torch.distributed as dist

from conformance.adapters import SEMANTICS_ONLY, PassAdapter
from conformance.harness import reordering_bound

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
# Per-rank element counts of the members: all-reduces of assorted sizes; reduce-scatters,
# 40 small members and a large one (what the issue found reordered on gloo at 4 ranks).
SIZES = {
    "all_reduce": (5, 21, 1000, 1, 51, 4096, 2),
    "reduce_scatter": tuple(1 + i % 7 for i in range(20)) + (300_000,) + tuple(1 + i % 7 for i in range(20)),
}


def merged_vs_separate(ctx, kind: str, dtype: str, seed: int) -> dict:
    """Each member's sum issued alone, and all members in one buffer laid out as a bucket
    (reduce-scatter: every rank's chunk holds each member's chunk in turn): are the
    bytes the same, and how far apart are they against the reordering bound?"""
    world, dt = ctx.world_size, DTYPES[dtype]
    gen = torch.Generator().manual_seed(seed * 31 + ctx.rank)
    n_in = [s * world if kind == "reduce_scatter" else s for s in SIZES[kind]]
    xs = [torch.randn(n, generator=gen, dtype=torch.float64).to(dt) for n in n_in]
    if kind == "all_reduce":
        separate = []
        for x in xs:
            y = x.clone()
            dist.all_reduce(y)
            separate.append(y)
        buffer = torch.cat(xs)
        dist.all_reduce(buffer)
        merged = list(buffer.split(n_in))
        abs_sum = torch.cat(xs).abs().to(torch.float64)
        dist.all_reduce(abs_sum)
        abs_sums = list(abs_sum.split(n_in))
    else:
        separate = []
        for x, s in zip(xs, SIZES[kind]):
            y = x.new_empty(s)
            dist.reduce_scatter_tensor(y, x)
            separate.append(y)
        buffer = torch.cat([c for r in range(world) for x in xs for c in (x.chunk(world)[r],)])
        out = buffer.new_empty(sum(SIZES[kind]))
        dist.reduce_scatter_tensor(out, buffer)
        merged = list(out.split(SIZES[kind]))
        abs_sum = torch.cat([x.abs().to(torch.float64) for x in xs])
        dist.all_reduce(abs_sum)
        abs_sums = [a.chunk(world)[ctx.rank] for a in abs_sum.split(n_in)]
    identical = all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(separate, merged))
    ratio, largest, bound_there = 0.0, 0.0, 0.0
    for a, b, s in zip(separate, merged, abs_sums):
        delta = (a.to(torch.float64) - b.to(torch.float64)).abs()
        bound = reordering_bound(s, world, dt)
        r = torch.where(delta == 0, 0.0, delta / bound)
        if float(r.max()) > ratio:
            k = int(r.argmax())
            ratio, largest, bound_there = float(r[k]), float(delta[k]), float(bound[k])
    digest = hashlib.sha256(b"".join(t.view(torch.uint8).numpy().tobytes() for t in separate + merged)).hexdigest()
    return {"identical": identical, "ratio": ratio, "largest": largest, "bound": bound_there, "digest": digest}


def _merge_everything(gm, **options):
    import bucketing

    return bucketing.bucket_collectives(gm, **options)


# The project's pass under an adapter that claims bit-identical reductions at any group size:
# at 3+ ranks its merged sums are held to bytes, which real-valued data breaks.
CLAIMS_EXACT = PassAdapter(name="claims-exact", expectations=SEMANTICS_ONLY, apply_fx=_merge_everything,
                           exact_reductions=True)
