"""Compiled-step benchmark on gloo ranks: unbucketed, torch's pass, ours, and the limit.

The limit is one pre-packed all-gather (or reduce-scatter) of the same bytes
followed by the same doubling of every member: what a perfect bucketing could
cost. All variants are compiled in the same rank processes, then timed in
turns (one step of each per round), so drift on a busy machine hits them alike.
"""

from __future__ import annotations

import functools
import statistics
import time

import torch
import torch.distributed as dist

from bucketing.apply.layout import plan_chunk
from bucketing.ops import dtype_names
from conformance.timing import fresh_copy, time_in_turns

c10d = torch.ops._c10d_functional
DTYPES = (torch.bfloat16, torch.float32)


def _inputs(kind: str, n: int, world: int, rank: int):
    gen = torch.Generator().manual_seed(7 + rank)
    if kind == "all_gather":
        return [torch.randn(256, generator=gen).to(DTYPES[i % 2]) for i in range(n)]
    # Gradients to reduce-scatter: integer-valued so every variant sums exactly.
    return [torch.randint(-3, 4, (256 * world,), generator=gen).float() for _ in range(n)]


def _program(kind: str, group: str, world: int):
    if kind == "all_gather":
        def step(*xs):
            return [c10d.wait_tensor(c10d.all_gather_into_tensor(x, world, group)) * 2 for x in xs]
    else:
        def step(*xs):
            return [c10d.wait_tensor(c10d.reduce_scatter_tensor(x, "sum", world, group)) * 2 for x in xs]
    return step


def _limit(kind: str, xs, group: str, world: int):
    """(program, inputs): one collective over pre-packed bytes, then the same doubling."""
    if kind == "all_gather":
        layout = plan_chunk([(x.numel() * x.element_size(), x.element_size()) for x in xs], 16,
                            groups=[x.dtype for x in xs])
        packed = torch.ops.bucketing_ops.all_gather_copy_in(
            xs, [s.offset for s in layout.slots], [x.numel() for x in xs], dtype_names(x.dtype for x in xs),
            layout.chunk_bytes,
        )
        meta = [(x.dtype, s.offset // x.element_size(), x.numel()) for x, s in zip(xs, layout.slots)]
        chunk = layout.chunk_bytes

        def step(buf):
            out = c10d.wait_tensor(c10d.all_gather_into_tensor(buf, world, group))
            grids = {d: out.view(d).view(world, chunk // d.itemsize) for d in DTYPES}
            return [grids[d][:, o : o + m].reshape(-1) * 2 for d, o, m in meta]

        return step, [packed]
    rows = [x.view(world, -1) for x in xs]
    packed = torch.cat(rows, dim=1).reshape(-1)
    sizes = [r.shape[1] for r in rows]

    def step(buf):
        out = c10d.wait_tensor(c10d.reduce_scatter_tensor(buf, "sum", world, group))
        return [p * 2 for p in out.split(sizes)]

    return step, [packed]


def _peak_bytes(fn, inputs) -> int:
    """Peak live CPU bytes during one call, from the profiler's memory records.

    Allocations made inside a compiled graph are only visible as that graph's
    total, counted when it starts: an upper bound of its true peak, measured
    the same way for every variant. Other threads (gloo's) can add to one
    call's records, so callers take the least of a few calls.
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn(*inputs)
    live = peak = 0
    for e in sorted(prof.events(), key=lambda e: e.time_range.start):
        delta = e.cpu_memory_usage if e.name == "[memory]" else e.self_cpu_memory_usage
        live += delta
        peak = max(peak, live)
    return peak


def bench_step(ctx, kind: str, n: int, steps: int = 30, copy_out: str = "copy",
               time_unbucketed: bool = True) -> list[dict]:
    """Rank task: every variant for one (kind, n); returns rows (rank 0's are reported).

    `copy_out` is our pass's option: "copy" (default) or "views" (fused views).
    Without `time_unbucketed` the unbucketed program runs twice (its compile,
    which gives the reference bytes, and its peak memory) and its step time is
    NaN: its N collectives in flight are what sometimes crash gloo (README).
    """
    import bucketing.core as bc
    from conformance.adapters import TorchInductorPass

    group = ctx.groups["world"][0]
    world = ctx.world_size
    xs = _inputs(kind, n, world, ctx.rank)
    program = _program(kind, group, world)
    limit_prog, limit_inputs = _limit(kind, xs, group, world)
    variants = [
        ("unbucketed", program, xs, None),
        ("torch", program, xs, TorchInductorPass(multidtype=True, collectives=(kind,))),
        ("ours", program, xs, bc.BucketingPass(copy_out=copy_out)),
        ("limit", limit_prog, limit_inputs, None),
    ]
    compiled_variants = []
    reference = None
    for name, prog, inputs, custom in variants:
        compiled = torch.compile(fresh_copy(prog, name), fullgraph=True)
        with torch._inductor.config.patch(post_grad_custom_post_pass=custom, fx_graph_cache=False):
            dist.barrier()
            start = time.perf_counter()
            out = compiled(*inputs)
            compile_s = time.perf_counter() - start
        if name != "limit":
            flat = torch.cat([o.reshape(-1).view(torch.uint8) for o in out])
            reference = flat if reference is None else reference
            identical = torch.equal(flat, reference)
        else:
            identical = None
        compiled_variants.append((name, compiled, inputs, compile_s, identical))
    timed = [v for v in compiled_variants if time_unbucketed or v[0] != "unbucketed"]
    times = time_in_turns(
        {name: functools.partial(compiled, *inputs) for name, compiled, inputs, _, _ in timed}, steps, "cpu",
    )
    rows = []
    for name, compiled, inputs, compile_s, identical in compiled_variants:
        rows.append({
            "kind": kind, "n": n, "world": world, "variant": name,
            "median_ms": statistics.median(times[name]) * 1e3 if name in times else float("nan"),
            "compile_s": compile_s,
            "peak_bytes": min(_peak_bytes(compiled, inputs) for _ in range(3 if name in times else 1)),
            "identical": identical,
        })
    return rows
