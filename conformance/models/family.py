"""The model family: real models shipped with torch, sharded SimpleFSDP-style.

Each entry says how to build the model (identical initial weights on every
rank), a batch per rank, the loss, and the autocast it runs under. Models come
from `torch.testing._internal.distributed._tensor.common_dtensor`, the models
torch's own distributed tests train, and from `transformers` (its Llama, the
architecture sharded training runs most: RMSNorm, rotary embeddings,
grouped-query attention through SDPA, SwiGLU).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.testing._internal.distributed._tensor.common_dtensor import MLPStacked, ModelArgs, Transformer

from .simple_fsdp import simple_fsdp, simple_fsdp_closure, simple_fsdp_parametrize


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    name: str
    make: Callable[[], torch.nn.Module]
    batch: Callable[[int, str], tuple]
    loss: Callable
    autocast_dtype: torch.dtype | None = None
    description: str = ""
    # Collectives a user expects per graph (forward all-gathers, backward
    # reduce-scatters): unbucketed, then per named variant.
    expect: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    # A module_buckets plan for this model (torch's module_bucket_plans format),
    # run as the variant "module_buckets" and by torch's manual bucketer.
    module_plan: list | None = None
    # How parameters are sharded (simple_fsdp.py): model, mesh -> model.
    shard: Callable = simple_fsdp
    # The device mesh: None, 1-D over every rank (FSDP); else 2-D of this shape
    # with these dim names: ("replicate", "shard") is HSDP (gradients all-reduced
    # over replicas, reduce-scattered over shards); ("dp", "tp") leaves the
    # dims to `shard` (FSDP over dp of a model tensor-parallel over tp).
    mesh_shape: tuple[int, int] | None = None
    mesh_dim_names: tuple[str, str] = ("replicate", "shard")
    # The world sizes it trains on; the first in the default session, the others slow.
    world_sizes: tuple[int, ...] = (2, 4)

    def variants(self) -> dict[str, dict]:
        """Pass options per variant, each compared with the unbucketed run."""
        out = {**VARIANTS, **EXACT_VARIANTS, **IN_PLACE_VARIANTS}
        if self.module_plan is not None:
            out["module_buckets"] = {"module_buckets": self.module_plan}
        return out

    def mesh(self, device: str, world_size: int):
        from torch.distributed.device_mesh import DeviceMesh

        if self.mesh_shape is None:
            return DeviceMesh(device, list(range(world_size)))
        return DeviceMesh(device, torch.arange(world_size).view(self.mesh_shape), mesh_dim_names=self.mesh_dim_names)

    def batch_for(self, mesh, rank: int, device: str) -> tuple:
        """The batch `rank` trains on: each data-parallel rank its own, as in
        training. Tensor-parallel ranks compute on one batch: it follows the dp rank."""
        return self.batch(mesh.get_local_rank("dp") if "tp" in (mesh.mesh_dim_names or ()) else rank, device)

    def reduction_group_size(self, world_size: int) -> int:
        """The largest group a gradient is summed over: a merged reduction over
        more than 2 ranks may round otherwise (docs/design.md, "What stays the same")."""
        return world_size if self.mesh_shape is None else max(self.mesh_shape)

    def build(self, mesh, device: str) -> torch.nn.Module:
        torch.manual_seed(0)  # the same full weights on every rank; each keeps its shard
        return self.shard(self.make().to(device), mesh)

    def autocast(self, device: str):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device, dtype=self.autocast_dtype)


TRANSFORMER_ARGS = ModelArgs(n_layers=2, vocab_size=64, max_seq_len=32, dim=256, n_heads=4,
                             dropout_p=0.0, weight_tying=False)


def _mixed_transformer() -> torch.nn.Module:
    """bf16 Linear weights and biases; Embedding and LayerNorm stay f32."""
    model = Transformer(TRANSFORMER_ARGS)
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.to(torch.bfloat16)
    return model


def _tensor_parallel_fsdp(model: torch.nn.Module, mesh) -> torch.nn.Module:
    """FSDP + TP on a (dp, tp) mesh: the Transformer's blocks tensor-parallel
    over tp (Megatron's plan, as `Transformer.parallelize` without sequence
    parallelism: q/k/v and w1 column-wise, wo and w2 row-wise, each block's
    output all-reduced), then SimpleFSDP over dp of each rank's TP shard.
    Embeddings, norms and the output projection stay whole on each TP rank
    (a row-wise embedding does not compile: Dynamo cannot trace its masked
    partial output)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    plan = {"attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(), "attention.wo": RowwiseParallel(),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w2": RowwiseParallel()}
    for layer in model.layers:
        parallelize_module(layer, mesh["tp"], plan)
        # Attention runs on this rank's heads as plain tensors (the CPU's SDPA
        # has no DTensor sharding rule).
        layer.attention.n_heads //= mesh["tp"].size()
    return simple_fsdp(model, mesh["dp"])


# The same Transformer in f32 with its output projection tied to the token
# embedding: one parameter all-gathered once and read twice, its gradient the
# sum of two reduce-scatters.
TIED_TRANSFORMER_ARGS = dataclasses.replace(TRANSFORMER_ARGS, weight_tying=True)


def _tokens(rank: int, device: str) -> tuple:
    gen = torch.Generator().manual_seed(1000 + rank)
    args = TRANSFORMER_ARGS
    tokens = torch.randint(0, args.vocab_size, (2, args.max_seq_len), generator=gen)
    targets = torch.randint(0, args.vocab_size, (2, args.max_seq_len), generator=gen)
    return tokens.to(device), targets.to(device)


def token_loss(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))


# A small Llama: 2 decoder layers of 9 parameters each (4 attention
# projections, 3 SwiGLU projections, 2 RMSNorms), grouped-query attention.
# Qwen2 and Mixtral share its sizes: Qwen2 adds biases to the q/k/v
# projections; Mixtral's decoder layers are mixtures of 4 experts (a router
# and two 3-D expert weights in place of the MLP), 2 experts per token.
LLAMA_CONFIG = dict(vocab_size=128, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                    tie_word_embeddings=False, use_cache=False)
MIXTRAL_EXPERTS = dict(num_local_experts=4, num_experts_per_tok=2)


class LMLogits(torch.nn.Module):
    """A `transformers` language model (`{architecture}For{task}`) returning
    logits; bf16 Linear, f32 Embedding, norms and expert weights."""

    def __init__(self, architecture: str, task: str = "CausalLM", model_class: str = "", bf16: str = "Linear",
                 **config):
        super().__init__()
        import transformers  # imported when the model is built

        config = getattr(transformers, f"{architecture}Config")(**{**LLAMA_CONFIG, **config})
        config._attn_implementation = "sdpa"
        self.model = getattr(transformers, model_class or f"{architecture}For{task}")(config)
        for module in self.model.modules():
            if type(module).__name__ == bf16:
                module.to(torch.bfloat16)

    def forward(self, tokens):
        return self.model(input_ids=tokens).logits


def _llama_tokens(rank: int, device: str) -> tuple:
    gen = torch.Generator().manual_seed(4000 + rank)
    shape = (2, 32)
    tokens = torch.randint(0, LLAMA_CONFIG["vocab_size"], shape, generator=gen)
    targets = torch.randint(0, LLAMA_CONFIG["vocab_size"], shape, generator=gen)
    return tokens.to(device), targets.to(device)


def _mlp_batch(rank: int, device: str) -> tuple:
    gen = torch.Generator().manual_seed(2000 + rank)
    return torch.randn(8, 10, generator=gen).to(device), torch.randn(8, 10, generator=gen).to(device)


def _mse(out, target):
    return F.mse_loss(out, target)


class _Block(torch.nn.Module):
    """A bf16 weight and an f32 bias, each all-gathered where it is used."""

    def __init__(self, dim: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(dim, dim, dtype=torch.bfloat16) / dim**0.5)
        self.bias = torch.nn.Parameter(torch.randn(dim) / 10)

    def forward(self, x):
        return x + torch.tanh(F.linear(x.to(torch.bfloat16), self.weight).float() + self.bias)


class Blocks(torch.nn.Module):
    def __init__(self, n_layers: int = 4, dim: int = 32):
        super().__init__()
        self.layers = torch.nn.ModuleList(_Block(dim) for _ in range(n_layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def _blocks_batch(rank: int, device: str) -> tuple:
    gen = torch.Generator().manual_seed(3000 + rank)
    return torch.randn(8, 32, generator=gen).to(device), torch.randn(8, 32, generator=gen).to(device)



class BasicBlock(torch.nn.Module):
    """ResNet's basic block: two 3x3 convolutions with BatchNorm, a shortcut
    that is a strided 1x1 convolution with BatchNorm where the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(cout)
        self.conv2 = torch.nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 1, stride, bias=False),
                                                  torch.nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet18(torch.nn.Module):
    """torchvision's resnet18 layout (stem, 4 stages of 2 basic blocks, 3 with a
    downsample shortcut, pooled linear head: 62 parameters) at widths 8 to 64,
    for 16x16 images; BatchNorm in training mode updates its running statistics
    in place in the compiled graph."""

    def __init__(self, widths: tuple[int, ...] = (8, 16, 32, 64), classes: int = 10):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(widths[0])
        stages, cin = [], widths[0]
        for i, width in enumerate(widths):
            stages.append(torch.nn.Sequential(BasicBlock(cin, width, 1 if i == 0 else 2), BasicBlock(width, width, 1)))
            cin = width
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = torch.nn.Linear(cin, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def _images(rank: int, device: str) -> tuple:
    gen = torch.Generator().manual_seed(5000 + rank)
    return torch.randn(4, 3, 16, 16, generator=gen).to(device), torch.randint(0, 10, (4,), generator=gen).to(device)


def _cross_entropy(logits, targets):
    return F.cross_entropy(logits, targets)


# GPT-2 at the Llama's sizes: Conv1D projections (bf16), learned positions, the
# LM head tied to the token embedding (f32, as the LayerNorms), no dropout.
GPT2_CONFIG = dict(n_inner=256, tie_word_embeddings=True, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                   bos_token_id=None, eos_token_id=None)  # its defaults lie outside this vocabulary

# Pass options per variant, each compared with the unbucketed run.
VARIANTS = {"default": {}, "merge_all": {"policy": "merge_all"}}
# The same under exact_reductions: bit-identical at every world size.
EXACT_VARIANTS = {f"exact-{name}": {**options, "exact_reductions": True} for name, options in VARIANTS.items()}
# The default options gathering each bucket in place (the rank's slot of the
# gathered buffer, no staging chunk): the default's buckets, its bytes.
IN_PLACE_VARIANTS = {"in_place-default": {"gather_in_place": True}}

# 62 parameters, 59 reduce-scatters: in each of the 3 downsampling blocks the
# shortcut BatchNorm's bias has the second BatchNorm's bias gradient (both sum
# the block's output gradient), and the graph reduces it once for both.
# Default: the stem, each basic block, the head; merge_all: one of each.
RESNET_EXPECT = {"unbucketed": (62, 59), "default": (10, 10), "merge_all": (1, 1)}
# The tied weight is gathered once and its gradient reduced for each use (as
# the tied Transformer's). Default: the embeddings, one per layer (12 members,
# bf16 and f32), the final norm; reduce-scatters: the final norm with the head's
# use, per layer and dtype, the embeddings'. merge_all: one, one per dtype.
GPT2_EXPECT = {"unbucketed": (28, 29), "default": (4, 6), "merge_all": (1, 2)}

# (ag, rs, ar) per graph. Nothing to gather; each gradient all-reduced over 4
# ranks, where merging may round otherwise: under exact_reductions all 29 stay.
# These all-reduces reach the pass with no module in their metadata, so the
# default policy merges by the locality window: 7 buckets, 13 listed with the
# compute that lies between them. merge_all: one per dtype.
DDP_EXPECT = {"unbucketed": (0, 0, 29), "default": (0, 0, 20), "merge_all": (0, 0, 2)}

MODELS = {
    spec.name: spec
    for spec in (
        ModelSpec("transformer-bf16-f32", _mixed_transformer, _tokens, token_loss, torch.bfloat16,
                  "torch's test Transformer (2 blocks, dim 256, SDPA): bf16 Linear, f32 Embedding and LayerNorm, "
                  "autocast bf16",
                  # Default: one all-gather bucket per block, one for the embeddings, one
                  # for the final norm and output; reduce-scatters per block and dtype.
                  # merge_all: across attention, one per dtype for reductions.
                  # module_buckets: the same four units, named by the user.
                  # torch's manual bucketer with the same plan: one per entry and dtype.
                  {"unbucketed": (29, 29), "default": (4, 7), "merge_all": (1, 2), "module_buckets": (4, 7),
                   "torch-manual": (7, 7)},
                  module_plan=[["tok_embeddings", "pos_embeddings"], "layers.0", "layers.1", ["norm", "output"]]),
        ModelSpec("transformer-parametrize-bf16-f32", _mixed_transformer, _tokens, token_loss, torch.bfloat16,
                  "the bf16 + f32 Transformer sharded through torch.nn.utils.parametrize (each parameter the "
                  "original of a parametrization)",
                  # As the Transformer without parametrize: a parametrization belongs
                  # to the module it parametrizes.
                  {"unbucketed": (29, 29), "default": (4, 7), "merge_all": (1, 2)},
                  shard=simple_fsdp_parametrize),
        ModelSpec("resnet18-f32", ResNet18, _images, _cross_entropy, None,
                  "ResNet-18's layout (convolutions, BatchNorm updating running statistics in place, "
                  "downsample shortcuts) at widths 8-64 in f32",
                  RESNET_EXPECT),
        ModelSpec("gpt2-hf-bf16-f32",
                  lambda: LMLogits("GPT2", model_class="GPT2LMHeadModel", bf16="Conv1D", **GPT2_CONFIG),
                  _llama_tokens, token_loss, torch.bfloat16,
                  "transformers' GPT2LMHeadModel (2 layers, hidden 128): bf16 Conv1D projections, f32 learned "
                  "positions, LayerNorms and token embedding tied to the LM head, autocast bf16",
                  GPT2_EXPECT),
        ModelSpec("transformer-hsdp-bf16-f32", _mixed_transformer, _tokens, token_loss, torch.bfloat16,
                  "the bf16 + f32 Transformer under HSDP on a 2x2 mesh: parameters sharded over 2 ranks, "
                  "replicated over 2",
                  # Forward as under FSDP. Backward: each gradient all-reduced over the
                  # replicas, then reduce-scattered over the shards; per block and dtype one
                  # bucket of each (the reduce-scatters' reads the all-reduces'), the rest
                  # listed. (ag, rs, ar) per graph.
                  {"unbucketed": (29, 29, 29), "default": (4, 7, 7), "merge_all": (1, 2, 2)},
                  mesh_shape=(2, 2), world_sizes=(4,)),
        ModelSpec("transformer-ddp-bf16-f32", _mixed_transformer, _tokens, token_loss, torch.bfloat16,
                  "the bf16 + f32 Transformer replicated on 4 ranks (a 4x1 HSDP mesh: DDP), each gradient "
                  "all-reduced over 4",
                  DDP_EXPECT, mesh_shape=(4, 1), world_sizes=(4,)),
        ModelSpec("transformer-fsdp-tp-f32", lambda: Transformer(TRANSFORMER_ARGS), _tokens, token_loss, None,
                  "torch's test Transformer in f32, tensor-parallel over 2 ranks (its own TP plan) and "
                  "SimpleFSDP over the other 2 of a 2x2 mesh",
                  # (ag, rs, backward ar) per graph. The forward's 4 TP all-reduces (each
                  # block's attention and MLP output) feed each other through the blocks:
                  # they stay as they were, listed. Backward: one reduce-scatter per
                  # block plus embeddings and tail, the TP all-reduces of q/k/v's input
                  # gradients merge per block under merge_all.
                  {"unbucketed": (29, 29, 8), "default": (4, 4, 4), "merge_all": (1, 1, 4)},
                  mesh_shape=(2, 2), mesh_dim_names=("dp", "tp"), world_sizes=(4,),
                  shard=_tensor_parallel_fsdp),
        ModelSpec("llama-hf-bf16-f32", lambda: LMLogits("Llama"), _llama_tokens, token_loss, torch.bfloat16,
                  "transformers' LlamaForCausalLM (2 layers, hidden 128, GQA 4/2 heads, SDPA): bf16 Linear, "
                  "f32 Embedding and RMSNorm, autocast bf16",
                  # Default: one all-gather bucket per decoder layer (9 members, bf16 and
                  # f32 in one collective), the final norm with the output projection,
                  # the embedding alone (the final norm, the only other collective outside
                  # the layers, may not join it: the locality window, with the whole model's
                  # compute between them; listed as such). Reduce-scatters per layer and dtype,
                  # the tail's two, the embedding's. merge_all: one all-gather across
                  # attention, one reduce-scatter per dtype.
                  {"unbucketed": (21, 21), "default": (4, 7), "merge_all": (1, 2)}),
        ModelSpec("qwen2-hf-bf16-f32", lambda: LMLogits("Qwen2"), _llama_tokens, token_loss, torch.bfloat16,
                  "transformers' Qwen2ForCausalLM (the Llama's sizes, biased q/k/v projections): bf16 Linear, "
                  "f32 Embedding and RMSNorm, autocast bf16",
                  # As the Llama: one all-gather per decoder layer (12 members).
                  {"unbucketed": (27, 27), "default": (4, 7), "merge_all": (1, 2)}),
        ModelSpec("mixtral-hf-bf16-f32", lambda: LMLogits("Mixtral", **MIXTRAL_EXPERTS), _llama_tokens,
                  token_loss, torch.bfloat16,
                  "transformers' MixtralForCausalLM (the Llama's sizes, 4 experts, 2 per token): bf16 Linear, "
                  "f32 Embedding, RMSNorm and 3-D expert weights, autocast bf16",
                  # Default: one all-gather per decoder layer (9 members), the embedding
                  # with the final norm and the output projection; reduce-scatters per
                  # layer and dtype, the rest listed. merge_all: across the experts.
                  {"unbucketed": (21, 21), "default": (3, 7), "merge_all": (1, 2)}),
        ModelSpec("bert-mlm-hf-bf16-f32",
                  lambda: LMLogits("Bert", task="MaskedLM", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
                  _llama_tokens, token_loss, torch.bfloat16,
                  "transformers' BertForMaskedLM (the Llama's sizes, post-LN encoder, GELU): bf16 Linear, "
                  "f32 Embedding and LayerNorm, autocast bf16; one parameter the loss never reaches",
                  # 44 parameters, 43 read by the forward: the head's own bias is not
                  # (no gradient either way). Default: embeddings, one per encoder layer,
                  # the head; reduce-scatters per layer and dtype. merge_all: 1, 2.
                  {"unbucketed": (43, 43), "default": (4, 7), "merge_all": (1, 2)}),
        ModelSpec("transformer-tied-f32", lambda: Transformer(TIED_TRANSFORMER_ARGS), _tokens, token_loss, None,
                  "torch's test Transformer in f32 with the output projection tied to the token embedding",
                  # One all-gather for the tied weight (read by the embedding and the
                  # output), two reduce-scatters for its gradient. Default: the embeddings
                  # (the tied weight's two uses span the model), one per block, the
                  # final norm; reduce-scatters: the output's use with the final norm,
                  # one per block, the embeddings'. merge_all: one of each.
                  {"unbucketed": (28, 29), "default": (4, 4), "merge_all": (1, 1)}),
        ModelSpec("mlp-stacked-f32", lambda: MLPStacked("cpu", n_layers=4), _mlp_batch, _mse, None,
                  "torch's test MLPStacked (4 blocks of Linear 10x16, 16x10) in f32; uneven shards at 4 ranks",
                  {"unbucketed": (16, 16), "default": (4, 4), "merge_all": (1, 1)}),
        ModelSpec("blocks4-bf16-f32", Blocks, _blocks_batch, _mse, None,
                  "4 blocks of a bf16 weight and an f32 bias; a user's module plan of 3 entries",
                  # Default: one all-gather per block, reduce-scatters per block and dtype.
                  # The plan: 3 all-gathers, 3 reduce-scatter buckets per dtype.
                  {"unbucketed": (8, 8), "default": (4, 8), "merge_all": (1, 2), "module_buckets": (3, 6),
                   "torch-manual": (6, 6)},
                  module_plan=["layers.0", "layers.1", ["layers.2", "layers.3"]], world_sizes=(2, 3, 4)),
        ModelSpec("blocks4-closure-bf16-f32", Blocks, _blocks_batch, _mse, None,
                  "the 4 blocks sharded torchtitan's way: a parametrization module in each property's closure",
                  # As blocks4: the parametrization module Dynamo reaches through the
                  # closure is no layer of the model, and places nothing.
                  {"unbucketed": (8, 8), "default": (4, 8), "merge_all": (1, 2)},
                  shard=simple_fsdp_closure),
    )
}
