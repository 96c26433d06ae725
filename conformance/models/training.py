"""Train models compiled, with and without the pass under test.

Rank task `run_model_case`: one model of the family, several variants (no pass,
then the adapter's Inductor pass with each option set), each compiled
forward + backward through `torch.compile` and stepped with AdamW. Returns,
per variant, the collectives of every post-grad graph before and after the
pass, the plan text, the first byte where its losses, gradients or
parameters differ from the unbucketed run's, and the largest difference of each. Rank task `run_fsdp_autograd`:
one forward + backward of the hand-sharded toy model (toy_fsdp.py), the same way.
"""

from __future__ import annotations

import torch
import torch._dynamo
from torch.distributed.device_mesh import DeviceMesh

from .. import adapters
from ..harness import count_collectives, first_difference, largest_difference, plan_text
from . import family, get
from .simple_fsdp import local_tensor
from .toy_fsdp import ShardedMLP, loss_fn


class Recorder:
    """Wraps the pass under test; records collectives of each graph it sees, and the plans."""

    def __init__(self, inner):
        self.inner = inner
        self.before: list[dict] = []
        self.after: list[dict] = []
        self.plans: list[str] = []
        self.explained: list[int] = []  # per graph: buckets + collectives listed as left alone

    def __call__(self, graph):
        self.before.append(count_collectives(graph))
        if self.inner is not None:
            self.inner(graph)
            plan = getattr(self.inner, "last_plan", None)
            self.plans.append(plan_text(plan))
            if plan is not None and hasattr(plan, "skipped"):
                self.explained.append(len(plan.buckets) + len(plan.skipped))
        self.after.append(count_collectives(graph))

    def uuid(self):
        return None  # never cached: every compile must run the recorder


def train(spec: family.ModelSpec, mesh: DeviceMesh, rank: int, device: str, custom_pass, steps: int):
    """(losses, gradients of the first step, parameters after `steps`, recorder)."""
    torch._dynamo.reset()
    model = spec.build(mesh, device)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    inputs, targets = spec.batch_for(mesh, rank, device)
    recorder = Recorder(custom_pass)
    compiled = torch.compile(model)
    losses, first_grads = [], None
    with torch._inductor.config.patch(post_grad_custom_post_pass=recorder, fx_graph_cache=False):
        for _ in range(steps):
            optim.zero_grad(set_to_none=True)
            with spec.autocast(device):
                out = compiled(inputs)
            loss = spec.loss(out, targets)
            loss.backward()
            if first_grads is None:
                # None for a parameter the loss does not reach (BERT's masked-LM head bias).
                first_grads = [None if p.grad is None else local_tensor(p.grad).clone() for p in model.parameters()]
            optim.step()
            losses.append(loss.detach().clone())
    params = [local_tensor(p).detach().clone() for p in model.parameters()]
    return losses, first_grads, params, recorder


def run_model_case(ctx, model_id: str, adapter_spec: str, variants: dict, steps: int = 3) -> dict:
    """Rank task: train `model_id` unbucketed and under each named option set; compare bytes."""
    spec = get(model_id)
    adapter = adapters.load(adapter_spec)
    mesh = spec.mesh(ctx.device, ctx.world_size)
    base_losses, base_grads, base_params, base_rec = train(spec, mesh, ctx.rank, ctx.device, None, steps)
    out = {"unbucketed": {"before": base_rec.before, "after": base_rec.after, "plans": [], "diff": None}}
    for name, options in variants.items():
        custom = adapter.inductor_pass(**options) if adapter.inductor_pass else None
        losses, grads, params, rec = train(spec, mesh, ctx.rank, ctx.device, custom, steps)
        diff, largest = None, {}
        for what, a, b in (("loss", base_losses, losses), ("gradient", base_grads, grads),
                           ("parameter", base_params, params)):
            d = first_difference(a, b)
            if d is not None and diff is None:
                diff = (what, *d)
            largest[what] = largest_difference(a, b)
        out[name] = {"before": rec.before, "after": rec.after, "plans": rec.plans, "diff": diff,
                     "largest": largest, "loss": float(base_losses[-1]), "explained": rec.explained}
    return out


def run_fsdp_autograd(ctx, adapter_spec: str, layers: int = 2, dim: int = 24, options: dict | None = None) -> dict:
    """Rank task: the toy FSDP-style model, forward + backward through torch.compile, with and
    without the pass (built with `options`); loss and every gradient compared byte for byte."""
    adapter = adapters.load(adapter_spec)
    group = ctx.groups["world"][2]
    results = []
    for custom in (None, adapter.inductor_pass(**(options or {})) if adapter.inductor_pass else None):
        torch._dynamo.reset()
        model = ShardedMLP(layers, dim, ctx.world_size, ctx.rank).to(ctx.device)
        x = torch.randn(4, dim, generator=torch.Generator().manual_seed(ctx.rank)).to(ctx.device)
        recorder = Recorder(custom)
        with torch._inductor.config.patch(post_grad_custom_post_pass=recorder, fx_graph_cache=False):
            loss = torch.compile(loss_fn)(model, x, group)
            loss.backward()
        results.append(([loss.detach()] + [p.grad for p in model.parameters()], recorder.after))
    (plain, plain_counts), (bucketed, counts) = results
    return {"diff": first_difference(plain, bucketed), "before": plain_counts, "after": counts}
