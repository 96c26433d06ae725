"""Real training clients from the package registry, trained with their own sharding.

`torchtitan-llama3-debug`: torchtitan 0.3.0's llama3 `debugmodel` (6 layers,
dim 256, 45 parameters) sharded by its SimpleFSDP
(`torchtitan.experiments.graph_trainer.simple_fsdp.data_parallel`, mode
"fully_shard"): bf16 weights, f32 RMSNorms. FlexAttention has no backward on
the CPU, so the layers' attention is torchtitan's own SDPA module (causal),
which it keeps for other models. `torchtitan-llama3-debug-hsdp`: the same in
HSDP (mode "hybrid_shard") on a 2x2 mesh. `nox -s clients` installs torchtitan (without
its dependencies, which would replace torch; the few it imports are listed
there) and runs these.
"""

from __future__ import annotations

import torch

from .family import ModelSpec, token_loss

TITAN_VOCAB, TITAN_SEQ = 2048, 64


class TitanLlama(torch.nn.Module):
    """The debug model called the way torchtitan's trainer calls it: tokens and their positions."""

    def __init__(self):
        super().__init__()
        import torchtitan.models.llama3 as llama3
        from torchtitan.models.common.attention import ScaledDotProductAttention

        build_attention = llama3.get_attention_config
        llama3.get_attention_config = lambda backend: ScaledDotProductAttention.Config()
        try:
            self.model = llama3.model_registry("debugmodel").model.build()
        finally:
            llama3.get_attention_config = build_attention
        self.model.init_weights(buffer_device=None)
        for name, param in self.model.named_parameters():
            if "norm" not in name:
                param.data = param.data.to(torch.bfloat16)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device).expand(tokens.shape[0], -1)
        return self.model(tokens, positions)


def _titan_data_parallel(model: torch.nn.Module, mesh, mode: str) -> torch.nn.Module:
    from torchtitan.experiments.graph_trainer import simple_fsdp

    # torchtitan caches the wrapper class per module class, the first call's
    # parametrization (mesh, placements) in its properties' closure: made for
    # one model per process. A rank process here shards the same classes in
    # two modes (fully_shard, then hybrid_shard), so each call starts afresh.
    simple_fsdp._wrap_class_cache.clear()
    return simple_fsdp.data_parallel(model, mesh, mode)


def _titan_shard(model: torch.nn.Module, mesh) -> torch.nn.Module:
    return _titan_data_parallel(model, mesh, "fully_shard")


def _titan_hsdp(model: torch.nn.Module, mesh) -> torch.nn.Module:
    return _titan_data_parallel(model, mesh, "hybrid_shard")


def _titan_tokens(rank: int, device: str) -> tuple:
    gen = torch.Generator().manual_seed(5000 + rank)
    tokens = torch.randint(0, TITAN_VOCAB, (2, TITAN_SEQ), generator=gen)
    targets = torch.randint(0, TITAN_VOCAB, (2, TITAN_SEQ), generator=gen)
    return tokens.to(device), targets.to(device)


CLIENTS = {
    spec.name: spec
    for spec in (
        ModelSpec("torchtitan-llama3-debug", TitanLlama, _titan_tokens, token_loss, None,
                  "torchtitan 0.3.0's llama3 debugmodel under its SimpleFSDP: bf16 weights, f32 RMSNorms, SDPA",
                  # Default: one all-gather per decoder layer (7 members, bf16 and f32),
                  # the final norm with the output projection, the embedding alone (the
                  # locality window: the whole model lies between it and the tail);
                  # reduce-scatters per layer and dtype, the tail's two, the embedding's.
                  # merge_all: one all-gather across attention, one reduce-scatter per dtype.
                  {"unbucketed": (45, 45), "default": (8, 15), "merge_all": (1, 2)},
                  shard=_titan_shard),
        ModelSpec("torchtitan-llama3-debug-hsdp", TitanLlama, _titan_tokens, token_loss, None,
                  "the same under torchtitan's SimpleFSDP in HSDP (mode \"hybrid_shard\") on a 2x2 mesh",
                  # (ag, rs, ar) per graph: each gradient all-reduced over the replicas,
                  # then reduce-scattered over the shards.
                  {"unbucketed": (45, 45, 45), "default": (8, 15, 15), "merge_all": (1, 2, 2)},
                  shard=_titan_hsdp, mesh_shape=(2, 2), world_sizes=(4,)),
    )
}
