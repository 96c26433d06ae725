"""Rank task for the core smoke test (runs inside conformance.pool ranks)."""

import torch
from torch.fx.experimental.proxy_tensor import make_fx

import bucketing.core as bc
from conformance.harness import count_collectives, first_difference, gather_bytes_where_unsupported

c10d = torch.ops._c10d_functional


def mixed_program(ctx):
    group, world = ctx.groups["world"][0], ctx.world_size

    def program(w_bf16, n_f32, s_fp8, w2_bf16, g_f32, g2_f32, r_bf16):
        gathered = [
            c10d.wait_tensor(c10d.all_gather_into_tensor(x, world, group))
            for x in (w_bf16, n_f32, s_fp8, w2_bf16)
        ]
        scattered = [c10d.wait_tensor(c10d.reduce_scatter_tensor(g, "sum", world, group)) for g in (g_f32, g2_f32)]
        reduced = c10d.wait_tensor(c10d.all_reduce(r_bf16, "sum", group))
        return (*gathered, *scattered, reduced)

    gen = torch.Generator().manual_seed(1234 + ctx.rank)
    inputs = [
        torch.randn(5, generator=gen).to(torch.bfloat16),  # odd bf16 before f32
        torch.randn(3, generator=gen),
        torch.randn(7, generator=gen).to(torch.float8_e4m3fn),  # odd fp8 before bf16
        torch.randn(3, 3, generator=gen).to(torch.bfloat16),
        # integer-valued so sums over 3+ ranks are exact in any order
        torch.randint(-3, 4, (world * 3,), generator=gen).float(),
        torch.randint(-3, 4, (world * 5, 2), generator=gen).float(),
        torch.randint(-3, 4, (7,), generator=gen).to(torch.bfloat16),
    ]
    return program, inputs


def run_smoke(ctx):
    program, inputs = mixed_program(ctx)
    reference = make_fx(program, tracing_mode="fake")(*inputs)
    gm = make_fx(program, tracing_mode="fake")(*inputs)
    plan = bc.bucket_collectives(gm, bucket_cap_mb=64.0)
    gm.graph.lint()
    after = count_collectives(gm.graph)
    gather_bytes_where_unsupported(reference, ctx.backend)
    gather_bytes_where_unsupported(gm, ctx.backend)
    return {"diff": first_difference(reference(*inputs), gm(*inputs)), "after": after, "plan": bc.explain(plan)}


def fail_on_rank0(ctx):
    """Rank 0 raises; the others block in a collective that rank 0 never joins."""
    import torch.distributed as dist

    if ctx.rank == 0:
        raise RuntimeError("rank 0 fails on purpose")
    t = torch.ones(4)
    dist.all_reduce(t)
    return t.sum().item()


def echo_rank(ctx):
    return ctx.rank


def crash_on_rank1(ctx):
    """Rank 1 dies of a fatal signal, as a crash in a backend's own thread would kill it."""
    import os
    import signal

    if ctx.rank == 1:
        os.kill(os.getpid(), signal.SIGSEGV)
    import torch.distributed as dist

    dist.all_reduce(torch.ones(4))  # rank 0 waits for a peer that is gone


def diverging_plans(ctx, diverge: bool):
    """Rank 1 builds a different graph when `diverge`; the plan check must catch it."""
    group, world = ctx.groups["world"][0], ctx.world_size
    dtypes = [torch.float32, torch.bfloat16, torch.float32]
    if diverge and ctx.rank == 1:
        dtypes = [torch.float32, torch.float32, torch.float32, torch.float32]

    def program(*xs):
        return tuple(c10d.wait_tensor(c10d.all_gather_into_tensor(x, world, group)) for x in xs)

    inputs = [torch.ones(3, dtype=d) for d in dtypes]
    gm = make_fx(program, tracing_mode="fake")(*inputs)
    bc.bucket_collectives(gm, verify_plan_across_ranks=True)
    out = gm(*inputs)
    return len(out)


def dynamic_sizes(ctx):
    """A symbolic-sized all-gather beside static ones, run at two sizes without recompiling wrongly."""
    import torch._dynamo

    group, world = ctx.groups["world"][0], ctx.world_size

    def program(dyn, a, b):
        gathered = [c10d.wait_tensor(c10d.all_gather_into_tensor(x, world, group)) for x in (dyn, a, b)]
        return tuple(g * 2 for g in gathered)

    the_pass = bc.BucketingPass()
    torch._dynamo.reset()
    compiled = torch.compile(program, fullgraph=True)
    out = {}
    with torch._inductor.config.patch(post_grad_custom_post_pass=the_pass, fx_graph_cache=False):
        for n in (5, 9):
            gen = torch.Generator().manual_seed(n * 10 + ctx.rank)
            dyn = torch.randn(n, 3, generator=gen)
            torch._dynamo.mark_dynamic(dyn, 0)
            a = torch.randn(4, generator=gen).to(torch.bfloat16)
            b = torch.randn(3, generator=gen)
            got = compiled(dyn, a, b)
            want = program(dyn, a, b)
            same = all(torch.equal(g.reshape(-1).view(torch.uint8), w.reshape(-1).view(torch.uint8))
                       for g, w in zip(got, want))
            out[n] = same
    plan = the_pass.last_plan
    return {
        "identical": out,
        "buckets": [len(b.members) for b in plan.buckets],
        "skipped": [s.reason for s in plan.skipped],
    }


def tied_sharding(ctx):
    """simple_fsdp on torch's Transformer with its output tied to the token
    embedding: whether the two modules still share one parameter, the parameter
    counts before and after, and the tied weight's gradient after one eager step."""
    from torch.testing._internal.distributed._tensor.common_dtensor import Transformer

    from conformance.models import family

    spec = family.MODELS["transformer-tied-f32"]
    plain = Transformer(family.TIED_TRANSFORMER_ARGS)
    model = spec.build(spec.mesh(ctx.device, ctx.world_size), ctx.device)
    tokens, targets = spec.batch(ctx.rank, ctx.device)
    spec.loss(model(tokens), targets).backward()
    tied = model.tok_embeddings._parameters["weight"]
    return {
        "tied": model.output._parameters["weight"] is tied,
        "parameters": (len(list(plain.parameters())), len(list(model.parameters()))),
        "gradient": tied.grad is not None,
    }


def parametrize_sharding(ctx):
    """The Transformer sharded through torch.nn.utils.parametrize and through
    properties, one eager step each: whether losses and every gradient shard
    are bitwise equal, and the parameter counts."""
    import torch

    from conformance.harness import first_difference
    from conformance.models import family
    from conformance.models.simple_fsdp import local_tensor

    mesh = family.MODELS["transformer-bf16-f32"].mesh(ctx.device, ctx.world_size)
    runs = []
    for name in ("transformer-bf16-f32", "transformer-parametrize-bf16-f32"):
        spec = family.MODELS[name]
        model = spec.build(mesh, ctx.device)
        tokens, targets = spec.batch_for(mesh, ctx.rank, ctx.device)
        with spec.autocast(ctx.device):
            out = model(tokens)
        loss = spec.loss(out, targets)
        loss.backward()
        runs.append([loss.detach()] + [local_tensor(p.grad) for p in model.parameters()])
    plain, parametrized = runs
    return {"parameters": (len(plain) - 1, len(parametrized) - 1), "diff": first_difference(plain, parametrized),
            "grad_type": type(parametrized[1]).__name__ if isinstance(parametrized[1], torch.Tensor) else None}
