"""SimpleFSDP-style sharding: the client FX bucketing exists for.

Every parameter becomes a `DTensor` sharded along dim 0 on a 1-D mesh. Reading
it through the module redistributes it to `Replicate` (one all-gather per
parameter in the forward graph) and hands back a local tensor whose gradient
is `Partial` (one reduce-scatter per gradient in the backward graph). The
module's class is swapped for a subclass with one property per parameter, so
dynamo traces plain attribute reads.
"""

from __future__ import annotations

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor


def _replicate(param: DTensor) -> torch.Tensor:
    return param.redistribute(placements=(Replicate(),)).to_local(grad_placements=(Partial(),))


def _property(name: str) -> property:
    return property(lambda self: _replicate(self._parameters[name]))


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The rank's shard of a sharded parameter or gradient (a plain tensor as is)."""
    return t.to_local() if isinstance(t, DTensor) else t


def simple_fsdp(model: torch.nn.Module, mesh: DeviceMesh) -> torch.nn.Module:
    """Shard every parameter of `model` in place along dim 0 over `mesh`; returns `model`."""
    for module in list(model.modules()):
        names = [n for n, p in module.named_parameters(recurse=False) if p is not None]
        if not names:
            continue
        for name in names:
            param = module._parameters[name]
            sharded = distribute_tensor(param.detach(), mesh, [Shard(0)])
            module._parameters[name] = torch.nn.Parameter(sharded, requires_grad=param.requires_grad)
        cls = module.__class__
        module.__class__ = type(f"SimpleFSDP{cls.__name__}", (cls,), {n: _property(n) for n in names})
    return model
