"""A small FSDP-style mixed-precision model, sharded by hand along dim 0.

Each layer keeps f32 master shards: a weight (gathered as bf16, the cast fused
into the gather), a bias and a norm weight (gathered as f32). The forward
all-gathers every parameter through `all_gather_tensor_autograd`, so the
backward reduce-scatters every gradient: exactly the collectives a sharded
training step puts in its post-grad graphs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.distributed._functional_collectives import all_gather_tensor_autograd


class ShardedMLP(torch.nn.Module):
    def __init__(self, layers: int, dim: int, world_size: int, rank: int, seed: int = 0):
        super().__init__()
        if dim % world_size:
            raise ValueError(f"dim ({dim}) must be divisible by the world size ({world_size})")
        self.world_size = world_size
        gen = torch.Generator().manual_seed(seed)
        rows = dim // world_size
        mine = slice(rank * rows, (rank + 1) * rows)
        self.weights = torch.nn.ParameterList()
        self.biases = torch.nn.ParameterList()
        self.norms = torch.nn.ParameterList()
        for _ in range(layers):
            # Full tensors drawn identically on every rank; each keeps its own rows.
            w = torch.randn(dim, dim, generator=gen) / dim**0.5
            b = torch.randn(dim, generator=gen) * 0.1
            n = 1 + torch.randn(dim, generator=gen) * 0.1
            self.weights.append(torch.nn.Parameter(w[mine].clone()))
            self.biases.append(torch.nn.Parameter(b[mine].clone()))
            self.norms.append(torch.nn.Parameter(n[mine].clone()))

    def forward(self, x: torch.Tensor, group) -> torch.Tensor:
        for w, b, n in zip(self.weights, self.biases, self.norms):
            weight = all_gather_tensor_autograd(w.to(torch.bfloat16), 0, group)  # bf16 compute weight
            bias = all_gather_tensor_autograd(b, 0, group)  # f32
            norm = all_gather_tensor_autograd(n, 0, group)  # f32
            h = F.layer_norm(x, (x.shape[-1],), norm, None)
            h = (h.to(torch.bfloat16) @ weight.t()).float() + bias
            x = x + F.gelu(h)
        return x


def loss_fn(model: ShardedMLP, x: torch.Tensor, group) -> torch.Tensor:
    return model(x, group).pow(2).mean()
