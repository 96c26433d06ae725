"""Models at real sizes, sharded SimpleFSDP-style and traced to the graphs Inductor compiles.

Nothing here allocates a model: parameters are built on the meta device and
each rank's shard is an untouched `torch.empty` (address space, no pages), the
process group is torch's fake backend, and every activation is a fake tensor.

How the graphs are obtained: `torch.compile` with Inductor's `compile_fx` and
an inner compile that moves the partitioned forward and backward graphs to
`cuda` and runs Inductor's own `compile_fx_inner` inside a fake CUDA target
(`conformance.fake_cuda`): decompositions, partitioner, fake-tensor
propagation and every post-grad pass run as for the GPU. The graph is taken
where a `post_grad_custom_post_pass` would see it, and the compile stops
there (no lowering, no code generation). Dynamo and AOTAutograd trace on the
CPU because a CPU build of torch cannot trace on a fake `cuda` device
(indexing and some structured kernels need a CUDA device guard); the
consequences: attention is the CPU flash kernel
(`_scaled_dot_product_flash_attention_for_cpu` and its backward), which
`fake_device()` gives the FLOP formulas of the CUDA flash kernels (same
arguments, same shapes); the few fake-tensor ops a CPU build cannot run on a
fake `cuda` tensor (a CUDA device guard in the kernel or in `Tensor.copy_`'s
binding) run on fake CPU tensors of the same layout (`Traced.cuda_fallbacks`
counts them).

Sharding is torchtitan's SimpleFSDP: each parameter a DTensor sharded on dim 0
(dim 1 where dim 0 has fewer rows than the group has ranks, as torchtitan shards
experts; replicated x sharded on a 2-D HSDP mesh), read through a property that
calls a parametrization module held in its closure; the gather runs under a
selective-checkpoint policy that recomputes it in the backward (reshard after
forward), so the backward graph all-gathers each parameter again.

`estimation(gpu)` is the context every estimate and every pass runs in: the
GPU preset's name, capability, dense bf16 peak (torch's datasheet table) and
HBM bandwidth (what Triton's driver reports: memory clock x bus width), and
torch's NCCL model's topology: nodes of 8 GPUs joined by NVLink, one NIC per
GPU between nodes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import time
from collections.abc import Callable
from unittest import mock

import torch
import torch.nn.functional as F

from conformance import fake_cuda
from conformance.codegen import retarget_to_cuda

GPUS_PER_NODE = 8


@dataclasses.dataclass(frozen=True)
class Gpu:
    """A GPU as Inductor's estimators read it."""

    key: str
    preset: fake_cuda.Preset
    mem_clock_khz: int  # HBM clock and bus width: Triton's driver derives the bandwidth from them
    mem_bus_width: int
    datasheet: Callable | None = None  # () -> DeviceInfo, for a GPU torch's table lacks

    @property
    def dram_gbps(self) -> float:
        return self.mem_clock_khz * self.mem_bus_width * 2 / 1e6 / 8

    @property
    def arch(self) -> str:
        return f"sim-{self.key}"


def _h200_datasheet():
    from torch._inductor.analysis.device_info import lookup_device_info

    # The H100's compute (same SM90 die and clocks), the H200's 141 GB of HBM3e at 4.8 TB/s.
    return dataclasses.replace(lookup_device_info("NVIDIA H100"), dram_bw_gbs=4800.0, dram_gb=141.0)


GPUS = {
    "a100": Gpu("a100", fake_cuda.Preset("NVIDIA A100", 8, 0, 108, 80 * 2**30, 166912, 40 * 2**20,
                                         clock_rate=1_410_000), 1_593_000, 5120),
    "h100": Gpu("h100", fake_cuda.Preset("NVIDIA H100", 9, 0, 132, 80 * 2**30, 232448, 50 * 2**20),
                2_619_000, 5120),
    "h200": Gpu("h200", fake_cuda.Preset("NVIDIA H200", 9, 0, 132, 141 * 2**30, 232448, 50 * 2**20),
                3_125_000, 6144, datasheet=_h200_datasheet),
}


def gpu(name: str) -> Gpu:
    if name not in GPUS:
        raise ValueError(f"--gpu: {name!r} is not a known GPU; choose one of {sorted(GPUS)}")
    return GPUS[name]


# ---------------------------------------------------------------------------
# The fake CUDA device, for tracing and for estimates.


_cuda_fallbacks: dict[str, int] = {}


def _dispatch_with_cpu_fallback(original):
    """A fake tensor op that a CPU build cannot run on a fake `cuda` device (the
    kernel takes a CUDA device guard) runs on fake CPU tensors of the same
    layout; its outputs come back as fake `cuda` tensors. Shapes, strides and
    dtypes do not depend on the device."""

    def dispatch(self, func, types, args, kwargs):
        try:
            return original(self, func, types, args, kwargs)
        except RuntimeError as e:
            if "not linked with support for cuda" not in str(e):
                raise
        _cuda_fallbacks[str(func)] = _cuda_fallbacks.get(str(func), 0) + 1
        from torch.utils._pytree import tree_map_only

        def move(t, device):
            return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device)

        with self:
            cpu_args, cpu_kwargs = tree_map_only(
                torch.Tensor, lambda t: move(t, "cpu") if t.device.type == "cuda" else t, (args, kwargs))
            out = func(*cpu_args, **cpu_kwargs)
            return tree_map_only(torch.Tensor, lambda t: move(t, "cuda") if t.device.type == "cpu" else t, out)

    return dispatch


def _copy_(self, src, non_blocking=False):
    return torch.ops.aten.copy_.default(self, src, non_blocking)


def _cpu_flash_flops() -> dict:
    """The CPU flash-attention kernels with the FLOP formulas of the CUDA ones."""
    from torch.utils.flop_counter import flop_registry

    aten = torch.ops.aten
    return {aten._scaled_dot_product_flash_attention_for_cpu: flop_registry[aten._scaled_dot_product_flash_attention],
            aten._scaled_dot_product_flash_attention_for_cpu_backward:
                flop_registry[aten._scaled_dot_product_flash_attention_backward]}


@contextlib.contextmanager
def fake_device(g: Gpu, nodes_of: int | None = None):
    """Inside: torch believes one GPU `g` is present. With `nodes_of`, torch's NCCL
    model sees nodes of that many GPUs joined by NVLink."""
    from torch._inductor import comm_analysis
    from torch._inductor.analysis import device_info
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import flop_registry

    extra_info = {g.preset.name.upper(): g.datasheet()} if g.datasheet else {}
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.dict(fake_cuda.PRESETS, {g.arch: g.preset}))
        stack.enter_context(mock.patch.dict(device_info._device_mapping, extra_info))
        stack.enter_context(mock.patch.dict(flop_registry, _cpu_flash_flops()))
        stack.enter_context(mock.patch.object(FakeTensorMode, "_dispatch_impl",
                                              _dispatch_with_cpu_fallback(FakeTensorMode._dispatch_impl)))
        # `Tensor.copy_`'s Python binding takes a device guard before dispatching: the op itself does not.
        stack.enter_context(mock.patch.object(torch.Tensor, "copy_", _copy_))
        stack.enter_context(fake_cuda.target(g.arch))
        # Triton's driver reports the HBM clock and bus width; get_dram_gbps multiplies them.
        from triton.runtime import driver

        utils = driver.active.utils
        props = utils.get_device_properties

        utils.get_device_properties = lambda device=0: {**props(device), "mem_clock_rate": g.mem_clock_khz,
                                                         "mem_bus_width": g.mem_bus_width}
        if nodes_of is not None:
            stack.enter_context(mock.patch.object(torch.cuda, "device_count", lambda: nodes_of))
            if hasattr(comm_analysis, "_has_nvlink"):  # torch < 2.13 assumes NVLink
                stack.enter_context(mock.patch.object(comm_analysis, "_has_nvlink", lambda: True))
        if hasattr(comm_analysis.get_gpu_type, "cache_clear"):
            comm_analysis.get_gpu_type.cache_clear()
            stack.callback(comm_analysis.get_gpu_type.cache_clear)
        yield g


@contextlib.contextmanager
def estimation(g: Gpu):
    """The context estimates and passes run in: GPU `g`, nodes of 8."""
    with fake_device(g, nodes_of=GPUS_PER_NODE), getitem_roofline_once():
        yield g


@contextlib.contextmanager
def getitem_roofline_once():
    """Inside, torch's roofline estimate of a `getitem` is computed once per (input, output
    layout) and reused: the same numbers, sooner. The roofline of a getitem reads its whole
    input tuple, so a gathered parameter chunked into 1,024 ranks' pieces and joined on dim 1
    costs 1,024 x 1,024 tensor reads to estimate, minutes per graph in the overlap scheduler;
    the estimate depends on nothing but the input and the output's shape, stride and dtype."""
    import operator

    from torch._inductor.fx_passes import overlap_scheduling

    roofline = getattr(overlap_scheduling, "estimate_roofline_runtime_ms", None)
    if roofline is None:  # torch 2.11: no roofline estimate
        yield
        return
    memo: dict = {}

    def once(node):
        out = node.meta.get("val")
        if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node) \
                and isinstance(out, torch.Tensor) and all(isinstance(d, int) for d in (*out.shape, *out.stride())):
            key = (node.args[0], tuple(out.shape), tuple(out.stride()), out.dtype)
            if key not in memo:
                memo[key] = roofline(node)
            return memo[key]
        return roofline(node)

    with mock.patch.object(overlap_scheduling, "estimate_roofline_runtime_ms", once):
        yield


def link_figures(g: Gpu) -> dict:
    """What torch's NCCL model assumes for `g` (GB/s per GPU), read from torch."""
    from torch._inductor import comm_analysis

    config = torch._inductor.config
    with estimation(g):
        detect = getattr(comm_analysis, "detect_interconnect", None)
        return {"gpu_type": comm_analysis.get_gpu_type().name, "gpus_per_node": GPUS_PER_NODE,
                "intra_node_gbps": float(comm_analysis.get_intra_node_bw() if hasattr(comm_analysis, "get_intra_node_bw")
                                         else config.intra_node_bw),
                "inter_node_gbps": float(comm_analysis.get_inter_node_bw() if hasattr(comm_analysis, "get_inter_node_bw")
                                         else config.inter_node_bw),
                "intra_interconnect": detect(GPUS_PER_NODE).name if detect else "NVLink",
                "inter_interconnect": detect(2 * GPUS_PER_NODE).name if detect else "network",
                "dram_gbps": torch._inductor.utils.get_gpu_dram_gbps(),
                "bf16_tflops": torch._inductor.utils.get_device_tflops(torch.bfloat16)}


# ---------------------------------------------------------------------------
# Models.


@dataclasses.dataclass(frozen=True)
class Llama:
    """A llama3-style decoder (transformers' `{architecture}ForCausalLM` configured to its
    sizes); with `experts`, each layer's MLP is a mixture of that many experts, `top_k` per token."""

    name: str
    layers: int
    dim: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int = 128256
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5
    architecture: str = "Llama"
    experts: int = 0
    top_k: int = 0

    def config(self, layers: int, seq: int):
        import transformers

        moe = dict(num_local_experts=self.experts, num_experts_per_tok=self.top_k) if self.experts else {}
        config = getattr(transformers, f"{self.architecture}Config")(
            vocab_size=self.vocab, hidden_size=self.dim, intermediate_size=self.ffn, num_hidden_layers=layers,
            num_attention_heads=self.heads, num_key_value_heads=self.kv_heads,
            max_position_embeddings=max(seq, 8192), rope_theta=self.rope_theta, rms_norm_eps=self.norm_eps,
            tie_word_embeddings=False, use_cache=False, **moe)
        config._attn_implementation = "sdpa"
        return config

    def model_class(self):
        import transformers

        return getattr(transformers, f"{self.architecture}ForCausalLM")

    def block_params(self) -> tuple[int, int]:
        """(bf16 parameters, f32 parameters) of one decoder layer."""
        head = self.dim // self.heads
        attention = self.dim * self.dim * 2 + 2 * self.dim * self.kv_heads * head
        mlp = 3 * self.dim * self.ffn * self.experts + self.dim * self.experts if self.experts else 3 * self.dim * self.ffn
        return attention + mlp, 2 * self.dim

    def block_bytes(self) -> int:
        bf16, f32 = self.block_params()
        return 2 * bf16 + 4 * f32


LLAMAS = {m.name: m for m in (
    Llama("llama3-8b", layers=32, dim=4096, heads=32, kv_heads=8, ffn=14336),
    Llama("llama3-70b", layers=80, dim=8192, heads=64, kv_heads=8, ffn=28672),
    Llama("mixtral-8x7b", layers=32, dim=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000, rope_theta=1e6,
          architecture="Mixtral", experts=8, top_k=2),
)}


def model_names() -> list[str]:
    from conformance.models.family import MODELS

    return sorted(LLAMAS) + sorted(MODELS)


def check_model(name: str) -> None:
    if name not in model_names():
        raise ValueError(f"--model: {name!r} is not a known model; choose one of {model_names()}")


# ---------------------------------------------------------------------------
# SimpleFSDP-style sharding: every parameter a DTensor sharded on dim 0; reading it
# through the module all-gathers it (in the forward, and again in the backward:
# the all-gather is recomputed, not saved), its gradient reduce-scattered.


c10d = torch.ops._c10d_functional
_RECOMPUTED = frozenset({c10d.all_gather_into_tensor.default, c10d.wait_tensor.default,
                         torch.ops.aten._to_copy.default})


def _policy(ctx, op, *args, **kwargs):
    from torch.utils.checkpoint import CheckpointPolicy

    return CheckpointPolicy.MUST_RECOMPUTE if op in _RECOMPUTED else CheckpointPolicy.MUST_SAVE


def _reshard_after_forward():
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    return create_selective_checkpoint_contexts(_policy)


def _replicate(param):
    from torch.distributed.tensor import Partial, Replicate

    ndim = param.device_mesh.ndim
    return param.redistribute(placements=(Replicate(),) * ndim).to_local(grad_placements=(Partial(),) * ndim)


class ReplicateComputation(torch.nn.Module):
    """A sharded parameter in, the gathered local tensor out; the gather is
    recomputed in the backward (SimpleFSDP's reshard after forward)."""

    def replicate_compute(self, param):
        return _replicate(param)

    def forward(self, param):
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.replicate_compute, param, use_reentrant=False, context_fn=_reshard_after_forward)


def _register_parametrization(module: torch.nn.Module, names: list[str], parametrization) -> None:
    """torchtitan's way: a subclass per module whose parameters are properties
    calling the parametrization held in their closure."""
    properties = {name: property(lambda self, pn=name: parametrization(self._parameters[pn])) for name in names}
    module.__class__ = type(f"SimpleFSDP{type(module).__name__}", (type(module),), properties)


def shard_meta_model(model: torch.nn.Module, mesh, dtype_of: Callable[[torch.nn.Module, str], torch.dtype]):
    """Replace each meta parameter by a sharded DTensor whose local shard is an
    untouched CPU tensor of `dtype_of(module, name)`; swap each module's class
    for one whose parameters read as gathered tensors (torchtitan's SimpleFSDP
    `data_parallel`, mode "fully_shard", or "hybrid_shard" on a 2-D mesh)."""
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    shards = mesh.size(mesh.ndim - 1)
    for module in list(model.modules()):
        names = [n for n, p in module.named_parameters(recurse=False) if p is not None]
        if not names:
            continue
        for name in names:
            shape = module._parameters[name].shape
            # Fewer rows than ranks (8 experts over 64): dim 1, as torchtitan shards experts,
            # rather than gathering a shard of padding from every rank.
            dim = 1 if len(shape) > 1 and shape[0] < shards else 0
            placements = [Shard(dim)] if mesh.ndim == 1 else [Replicate(), Shard(dim)]
            local_shape, _ = compute_local_shape_and_global_offset(shape, mesh, placements)
            local = torch.empty(local_shape, dtype=dtype_of(module, name))
            stride = torch.empty(shape, device="meta").stride()
            dtensor = DTensor.from_local(local, mesh, placements, run_check=False, shape=shape, stride=stride)
            module._parameters[name] = torch.nn.Parameter(dtensor)
        _register_parametrization(module, names, ReplicateComputation())
    return model


def _llama_dtype(module: torch.nn.Module, name: str) -> torch.dtype:
    """bf16 weights, f32 norms."""
    return torch.float32 if "RMSNorm" in type(module).__name__ else torch.bfloat16


@dataclasses.dataclass
class Program:
    """What is traced: `step(*inputs)` returns the loss."""

    step: Callable
    inputs: tuple
    parameters: int  # full (unsharded) parameter count
    parameter_bytes: int
    matmul_parameters: int  # parameters read by a matmul (all but the token embedding)
    block_bytes: int | None  # one transformer block's gathered parameters
    tokens: int  # per rank and step
    activation_checkpointing: str = "none"  # AC_MODES


def make_mesh(world_size: int, mesh_shape: tuple[int, int] | None):
    from torch.distributed.device_mesh import DeviceMesh

    if mesh_shape is None:
        return DeviceMesh("cpu", list(range(world_size)))
    return DeviceMesh("cpu", torch.arange(world_size).view(mesh_shape), mesh_dim_names=("replicate", "shard"))


AC_MODES = ("none", "selective", "full")


class Checkpointed(torch.nn.Module):
    """A decoder layer whose activations are recomputed in the backward (torchtitan's
    activation checkpointing of a whole block, non-reentrant)."""

    def __init__(self, layer: torch.nn.Module):
        super().__init__()
        self.layer = layer

    def forward(self, *args, **kwargs):
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.layer, *args, use_reentrant=False, **kwargs)


def checkpoint_layers(layers: torch.nn.ModuleList, mode: str) -> None:
    """`full`: every layer recomputed; `selective`: every second one (torchtitan's
    `selective_ac_option = "2"`, its per-layer selective mode); `none`: nothing."""
    if mode not in AC_MODES:
        raise ValueError(f"--ac: {mode!r} is not one of {AC_MODES}")
    every = {"none": 0, "selective": 2, "full": 1}[mode]
    for i in range(len(layers)) if every else ():
        if i % every == 0:
            layers[i] = Checkpointed(layers[i])


def llama_program(spec: Llama, mesh, layers: int, seq: int, batch: int, ac: str = "none") -> Program:

    config = spec.config(layers, seq)
    with torch.device("meta"):
        model = spec.model_class()(config)
    # The rotary frequencies are a computed buffer: computed on the CPU.
    model.model.rotary_emb = type(model.model.rotary_emb)(config)
    params = [(m, n, p) for m in model.modules() for n, p in m.named_parameters(recurse=False)]
    count = sum(p.numel() for _, _, p in params)
    nbytes = sum(p.numel() * (4 if _llama_dtype(m, n) == torch.float32 else 2) for m, n, p in params)
    embedding = model.model.embed_tokens.weight.numel()
    shard_meta_model(model, mesh, _llama_dtype)
    checkpoint_layers(model.model.layers, ac)
    tokens = torch.zeros(batch, seq, dtype=torch.long)
    targets = torch.zeros(batch, seq, dtype=torch.long)

    def step(tokens, targets):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(input_ids=tokens).logits
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))

    return Program(step, (tokens, targets), count, nbytes, count - embedding, spec.block_bytes(), batch * seq, ac)


def family_program(name: str, mesh) -> Program:
    """A model of the family, built and sharded as the suite does (small, real weights)."""
    from conformance.models.family import MODELS

    spec = MODELS[name]
    model = spec.build(mesh, "cpu")
    inputs, targets = spec.batch(0, "cpu")
    count = sum(p.numel() for p in model.parameters())  # a DTensor's numel is the full tensor's
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())

    def step(inputs, targets):
        with spec.autocast("cpu"):
            out = model(inputs)
        return spec.loss(out, targets)

    return Program(step, (inputs, targets), count, nbytes, count, None, int(inputs.numel()))


# ---------------------------------------------------------------------------
# Tracing.


@dataclasses.dataclass
class Traced:
    graphs: list  # [forward GraphModule, backward GraphModule], as the post-grad custom pass sees them
    program: Program
    seconds: float
    cuda_fallbacks: dict


class _Captured(Exception):
    pass


class _Done(Exception):
    pass


def _no_caches():
    return torch._inductor.config.patch(fx_graph_cache=False, fx_graph_remote_cache=False,
                                        autotune_local_cache=False, autotune_remote_cache=False)


def _capture(step: Callable, inputs: tuple, g: Gpu | None) -> list:
    """The forward and backward graphs of `step(*inputs)` where Inductor's
    post-grad custom pass sees them: on `cuda` for GPU `g`, or on the CPU."""
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    captured: list = []

    def capture(graph):
        captured.append(graph.owning_module)
        raise _Captured  # the graph is what we came for: no lowering

    def inner_compile(gm, example_inputs, **kwargs):
        wanted = len(captured) + 1
        device = contextlib.nullcontext()
        if g is not None:
            example_inputs = retarget_to_cuda(gm, example_inputs)
            device = fake_device(g)
        try:
            with device:
                compile_fx_inner(gm, example_inputs, **kwargs)
        except Exception:
            if len(captured) < wanted:
                raise
        if kwargs.get("is_backward"):
            raise _Done
        return lambda *args: None

    def backend(gm, example_inputs):
        return compile_fx(gm, example_inputs, inner_compile=inner_compile)

    torch._dynamo.reset()
    try:
        with _no_caches(), torch._inductor.config.patch(post_grad_custom_post_pass=capture), \
                torch._functorch.config.patch(force_non_lazy_backward_lowering=True):
            torch.compile(step, backend=backend, fullgraph=True)(*inputs)
    except Exception as e:
        cause = e
        while cause is not None and not isinstance(cause, _Done):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise
    finally:
        torch._dynamo.reset()
    return captured


@functools.cache
def _warm_up() -> None:
    """Inductor builds its pattern libraries once per process, on `cuda` once it
    believes one exists, which a CPU build cannot run: they are built on the CPU first."""
    x = torch.ones(8, 8, requires_grad=True)
    _capture(lambda a: (a @ a).relu().sum(), (x,), None)


def trace(program: Program, g: Gpu) -> Traced:
    """The forward and backward graphs of `program.step` for GPU `g`."""
    _warm_up()
    start = time.perf_counter()
    _cuda_fallbacks.clear()
    # A decoder layer's forward has side effects (transformers' caches of the rotary
    # frequencies' device): under checkpointing they are not replayed in the backward.
    side_effects = ({"skip_fwd_side_effects_in_bwd_under_checkpoint": True}
                    if program.activation_checkpointing != "none" else {})
    with torch._dynamo.config.patch(**side_effects):
        captured = _capture(program.step, program.inputs, g)
    if len(captured) != 2:
        raise RuntimeError(f"expected a forward and a backward graph, captured {len(captured)}")
    return Traced(captured, program, time.perf_counter() - start, dict(_cuda_fallbacks))


def init_world(world_size: int) -> None:
    """A fake process group of `world_size` ranks (this process is rank 0)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        if dist.get_world_size() == world_size:
            return
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)


def build(model: str, world_size: int, mesh_shape, layers: int | None, seq: int, batch: int,
          ac: str = "none") -> Program:
    if ac not in AC_MODES:
        raise ValueError(f"--ac: {ac!r} is not one of {AC_MODES}")
    init_world(world_size)
    if model in LLAMAS:
        spec = LLAMAS[model]
        n_layers = spec.layers if layers is None else layers
        if not 1 <= n_layers <= spec.layers:
            raise ValueError(f"--layers: {model} has {spec.layers} layers, got {layers}")
        return llama_program(spec, make_mesh(world_size, mesh_shape), n_layers, seq, batch, ac)
    from conformance.models.family import MODELS

    spec = MODELS[model]
    if ac != "none":
        raise ValueError(f"--ac: {model} is traced as the suite builds it, without activation checkpointing")
    if mesh_shape is not None and tuple(mesh_shape) != spec.mesh_shape:
        raise ValueError(f"--mesh: {model} is sharded on its own mesh ({spec.mesh_shape}), got {mesh_shape}")
    if spec.mesh_shape is not None and math.prod(spec.mesh_shape) != world_size:
        raise ValueError(f"--world-size: {model} runs on a mesh of {spec.mesh_shape}, not {world_size} ranks")
    return family_program(model, spec.mesh("cpu", world_size))
