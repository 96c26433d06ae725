"""SimpleFSDP-style sharding: the client FX bucketing exists for.

Every parameter becomes a `DTensor` sharded along dim 0 on a 1-D mesh. Reading
it through the module redistributes it to `Replicate` (one all-gather per
parameter in the forward graph) and hands back a local tensor whose gradient
is `Partial` (one reduce-scatter per gradient in the backward graph). The
module's class is swapped for a subclass with one property per parameter, so
dynamo traces plain attribute reads. On a 2-D `(replicate, shard)` mesh the
sharding is HSDP: parameters sharded over the shard dim and replicated over
the other; each gradient is all-reduced over the replicas, then
reduce-scattered over the shards. A parameter that is already a
tensor-parallel `DTensor` is sharded by its local part (FSDP over dp of a
model tensor-parallel over tp); the gathered part is handed to the module as
the TP `DTensor` it was.

`simple_fsdp_closure` shards the same way as torchtitan's SimpleFSDP
(`experiments/graph_trainer/simple_fsdp.py`): the property calls a
parametrization *module* held in its closure, and the subclass is cached per
(class, parameter names), so every module of a class calls the first one's
parametrization. Dynamo then names that module by its route through the
closure, not by a module FQN; a pass placing collectives by module must still
find the layer around it.
"""

from __future__ import annotations

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor


def _replicate(param: DTensor) -> torch.Tensor:
    # Replicated on every mesh dim; the gradient Partial on every dim: a
    # reduce-scatter over the shard dim and, on a 2-D (HSDP) mesh, an
    # all-reduce over the replicate dim.
    ndim = param.device_mesh.ndim
    return param.redistribute(placements=(Replicate(),) * ndim).to_local(grad_placements=(Partial(),) * ndim)


def _placements(mesh: DeviceMesh) -> list:
    """Shard(0) on a 1-D mesh; on a 2-D mesh (replicate, shard), HSDP: replicated over dim 0, sharded over dim 1."""
    if mesh.ndim == 1:
        return [Shard(0)]
    if mesh.ndim == 2:
        return [Replicate(), Shard(0)]
    raise ValueError(f"mesh must be 1-D (FSDP) or 2-D (HSDP: replicate, shard), got {mesh.ndim} dims")


def _property(name: str, tp_layout: tuple | None) -> property:
    if tp_layout is None:
        return property(lambda self: _replicate(self._parameters[name]))
    tp_mesh, placements = tp_layout
    # A tensor-parallel parameter: FSDP gathers this rank's TP shard over the
    # data-parallel ranks, and the module computes on it as the TP DTensor it was.
    return property(lambda self: DTensor.from_local(_replicate(self._parameters[name]), tp_mesh, placements,
                                                    run_check=False))


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The rank's shard of a sharded parameter or gradient (a plain tensor as is)."""
    return t.to_local() if isinstance(t, DTensor) else t


def _shard_parameters(module: torch.nn.Module, mesh: DeviceMesh, sharded: dict[int, tuple]) -> dict[str, tuple | None]:
    """Shard `module`'s own parameters; `sharded` maps a parameter already seen
    (by identity) to its sharded one and TP layout, so a tied parameter stays
    one parameter. Returns each name's TP layout (mesh, placements), or None
    for a plain parameter."""
    names = [n for n, p in module.named_parameters(recurse=False) if p is not None]
    layouts = {}
    for name in names:
        param = module._parameters[name]
        if id(param) not in sharded:
            tp_layout = None
            full = param.detach()
            if isinstance(full, DTensor):  # already tensor-parallel: shard its local part
                tp_layout = (full.device_mesh, full.placements)
                full = full.to_local()
            dtensor = distribute_tensor(full, mesh, _placements(mesh))
            sharded[id(param)] = (torch.nn.Parameter(dtensor, requires_grad=param.requires_grad), tp_layout)
        module._parameters[name], layouts[name] = sharded[id(param)]
    return layouts


def simple_fsdp(model: torch.nn.Module, mesh: DeviceMesh) -> torch.nn.Module:
    """Shard every parameter of `model` in place along dim 0 over `mesh`; returns `model`.

    A parameter shared by several modules (tied embeddings) stays one sharded
    parameter: each use all-gathers it, and its gradient sums every use's.
    """
    sharded: dict[int, tuple] = {}
    for module in list(model.modules()):
        layouts = _shard_parameters(module, mesh, sharded)
        if layouts:
            cls = module.__class__
            module.__class__ = type(f"SimpleFSDP{cls.__name__}", (cls,),
                                    {n: _property(n, tp) for n, tp in layouts.items()})
    return model


class ReplicateParameter(torch.nn.Module):
    """The parametrization: a sharded parameter in, the replicated local tensor out."""

    def forward(self, param: DTensor) -> torch.Tensor:
        return _replicate(param)


_CLOSURE_CLASSES: dict[tuple, type] = {}


def _closure_property(replicate: ReplicateParameter, name: str) -> property:
    return property(lambda self: replicate(self._parameters[name]))


def simple_fsdp_closure(model: torch.nn.Module, mesh: DeviceMesh) -> torch.nn.Module:
    """`simple_fsdp` through a parametrization module in each property's closure (torchtitan's way)."""
    sharded: dict[int, tuple] = {}
    for module in list(model.modules()):
        layouts = _shard_parameters(module, mesh, sharded)
        if not layouts:
            continue
        if any(tp is not None for tp in layouts.values()):
            raise ValueError("simple_fsdp_closure: model holds tensor-parallel parameters; use simple_fsdp")
        names = list(layouts)
        key = (module.__class__, frozenset(names))
        if key not in _CLOSURE_CLASSES:
            replicate = ReplicateParameter()
            properties = {n: _closure_property(replicate, n) for n in names}
            _CLOSURE_CLASSES[key] = type(f"SimpleFSDP{module.__class__.__name__}", (module.__class__,), properties)
        module.__class__ = _CLOSURE_CLASSES[key]
    return model


def simple_fsdp_parametrize(model: torch.nn.Module, mesh: DeviceMesh) -> torch.nn.Module:
    """`simple_fsdp` through `torch.nn.utils.parametrize`: each sharded parameter
    is the `original` of a `ReplicateParameter` parametrization, so Dynamo names
    its gather `<module>.parametrizations.<name>[0]`. Tied parameters are not
    supported (parametrize gives each use its own original)."""
    from torch.nn.utils import parametrize

    sharded: dict[int, tuple] = {}
    for module in list(model.modules()):  # taken before any parametrization is registered
        layouts = _shard_parameters(module, mesh, sharded)
        if any(tp is not None for tp in layouts.values()):
            raise ValueError("simple_fsdp_parametrize: model holds tensor-parallel parameters; use simple_fsdp")
        for name in layouts:
            # unsafe: the check would call the parametrization (a collective) at registration.
            parametrize.register_parametrization(module, name, ReplicateParameter(), unsafe=True)
    return model
