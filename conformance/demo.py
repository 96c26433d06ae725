"""See what bucketing does to a sharded mixed-precision training step.

    python -m conformance.demo                      # 2 gloo ranks on this machine
    torchrun --nproc-per-node 4 -m conformance.demo # any launcher with env:// rendezvous

Compiles one forward + backward step of torch's test Transformer, sharded
SimpleFSDP-style (bf16 Linear weights beside f32 embeddings and norms),
twice, without and with `BucketingPass`, and prints the collectives per kind
before and after, the bucket plan, per kind whether the results it reaches
are bit-identical (else their largest absolute difference), and the median
step times. Each rank trains on its own batch. At 2 ranks the results must be
bit-identical (a sum of two values is exact in any order); above 2, merged
reductions may sum in another order than unbucketed ones, and the demo
reports the difference instead of failing.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._inductor.custom_graph_pass import CustomGraphPass

import bucketing
import bucketing.plan.memory

from .harness import KIND_BY_TARGET, KINDS, count_collectives, largest_difference
from .models.toy_fsdp import ShardedMLP, loss_fn
from .timing import bitwise_equal, fresh_copy, time_in_turns

TRANSFORMER = "transformer-bf16-f32"  # conformance.models.family
# The results each kind reaches in a training step: all-gathers feed the
# forward (the loss), reductions the backward (the gradients).
REACHES = {"all_gather": "loss", "reduce_scatter": "gradients", "all_reduce": "gradients"}


def collective_bytes(graph) -> dict[str, int]:
    """Bytes each kind moves per rank (larger side), as in bucket sizes."""
    out = dict.fromkeys(KINDS, 0)
    for node in graph.nodes:
        kind = KIND_BY_TARGET.get(node.target)
        if kind:
            val = node.meta["val"] if kind == "all_gather" else node.args[0].meta["val"]
            out[kind] += val.numel() * val.element_size()
    return out


class CountingPass(CustomGraphPass):
    """Records the collectives of each post-grad graph; changes nothing."""

    def __init__(self):
        self.counts, self.bytes, self.peaks = [], [], []

    def __call__(self, graph):
        self.counts.append(count_collectives(graph))
        self.bytes.append(collective_bytes(graph))
        self.peaks.append(bucketing.plan.memory.estimate_peak_bytes(graph))

    def uuid(self):
        return "bucketing-demo-counting"


class RecordingBucketingPass(bucketing.BucketingPass):
    """`BucketingPass` that also keeps the counts and plans of every graph it sees."""

    def __init__(self, **options):
        super().__init__(**options)
        self.before, self.after, self.plans, self.bytes, self.peaks = [], [], [], [], []

    def __call__(self, graph):
        self.before.append(count_collectives(graph))
        super().__call__(graph)
        self.after.append(count_collectives(graph))
        self.bytes.append(collective_bytes(graph))
        self.peaks.append(bucketing.plan.memory.estimate_peak_bytes(graph))
        self.plans.append(self.last_plan)


def total_counts(dicts):
    out = dict.fromkeys(KINDS, 0)
    for d in dicts:
        for k in KINDS:
            out[k] += d[k]
    return out


def say(rank: int, *args):
    if rank == 0:
        print(*args, flush=True)


@dataclasses.dataclass
class Variant:
    """One compiled training step and what its first run produced."""

    name: str
    loss: torch.Tensor
    grads: list[torch.Tensor]
    compile_s: float
    step: Callable[[], None]
    times: list[float] = dataclasses.field(default_factory=list)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times)


def compare(expected: list[torch.Tensor], actual: list[torch.Tensor]) -> tuple[bool, float]:
    """(bit-identical, the largest absolute difference of corresponding elements; 0.0 when bit-identical)."""
    if all(bitwise_equal(a, b) for a, b in zip(expected, actual)):
        return True, 0.0
    return False, largest_difference(expected, actual)


def verdict(same: bool, largest_difference: float) -> str:
    return "bit-identical" if same else f"not bit-identical: largest absolute difference {largest_difference:.3g}"


def _workload(args, rank: int, world: int, group, device: str):
    """(model, loss function, its arguments) of the step the demo compiles."""
    if args.model == "toy":
        model = ShardedMLP(args.layers, args.dim, world, rank).to(device)
        gen = torch.Generator().manual_seed(100 + rank)
        x = torch.randn(args.batch, args.dim, generator=gen).to(device)
        return model, loss_fn, (model, x, group)
    from .models import family

    spec = family.MODELS[TRANSFORMER]
    mesh = spec.mesh(device, world)
    model = spec.build(mesh, device)
    # Each rank its own batch, as in real training (ModelSpec.batch_for).
    tokens, targets = spec.batch_for(mesh, rank, device)

    def transformer_loss(model, tokens, targets):
        with spec.autocast(device):
            out = model(tokens)
        return spec.loss(out, targets)

    return model, transformer_loss, (model, tokens, targets)


def compile_variant(name, custom_pass, args, rank, world, group, device) -> Variant:
    """Compile forward + backward with `custom_pass` and run the first step.

    Each variant compiles its own copy of the loss function (dynamo caches per
    code object), so variants can be timed side by side afterwards.
    """
    model, loss_of, inputs = _workload(args, rank, world, group, device)
    fn = fresh_copy(loss_of, name)
    say(rank, f"[{name}] compiling forward + backward ...")
    start = time.perf_counter()
    with torch._inductor.config.patch(post_grad_custom_post_pass=custom_pass):
        compiled = torch.compile(fn)
        loss = compiled(*inputs)
        loss.backward()
    compile_s = time.perf_counter() - start
    say(rank, f"[{name}] compiled and ran the first step in {compile_s:.1f}s")

    def step() -> None:
        model.zero_grad(set_to_none=True)
        compiled(*inputs).backward()

    from .models.simple_fsdp import local_tensor

    grads = [local_tensor(p.grad).detach().clone() for p in model.parameters()]
    return Variant(name, loss.detach().clone(), grads, compile_s, step)


def time_side_by_side(variants: list[Variant], steps: int, device: str) -> None:
    """Time the variants in turns (see `time_in_turns`)."""
    times = time_in_turns({v.name: v.step for v in variants}, steps, device)
    for v in variants:
        v.times.extend(times[v.name])


def main_worker(rank: int, world: int, args, init_method: str | None):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    device = args.device
    backend = "nccl" if device == "cuda" and torch.cuda.device_count() >= world else "gloo"
    if device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    if init_method is None:
        dist.init_process_group(backend, timeout=timedelta(seconds=300))
    else:
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world,
                                timeout=timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    group = dist.group.WORLD
    torch._inductor.config.fx_graph_cache = False  # the counting passes must run
    what = (f"toy MLP, {args.layers} layers, dim {args.dim}" if args.model == "toy"
            else "torch's test Transformer, SimpleFSDP-style (bf16 Linear, f32 Embedding/LayerNorm, autocast bf16)")
    say(rank, f"bucketing demo: {world} ranks ({backend}, {device}), {what}, torch {torch.__version__}")

    counting = CountingPass()
    base = compile_variant("unbucketed", counting, args, rank, world, group, device)
    options = {"multidtype": not args.no_multidtype, "policy": args.policy,
               "exact_reductions": args.exact_reductions}
    if args.locality_flops is not None:
        options["locality_flops"] = args.locality_flops
    if args.bucket_cap_mb is not None:
        options["bucket_cap_mb"] = args.bucket_cap_mb
    recording = RecordingBucketingPass(**options)
    ours = compile_variant("bucketed", recording, args, rank, world, group, device)
    time_side_by_side([base, ours], args.steps, device)

    mine = {"loss": compare([base.loss], [ours.loss]), "gradients": compare(base.grads, ours.grads)}
    per_rank = [None] * world
    dist.all_gather_object(per_rank, mine)
    # Over all ranks: the same on every rank, else the largest difference on any.
    compared = {what: (all(r[what][0] for r in per_rank), max(r[what][1] for r in per_rank)) for what in mine}
    identical = all(same for same, _ in compared.values())

    if rank == 0:
        before, after = total_counts(counting.counts), total_counts(recording.after)
        moved = total_counts(recording.bytes)
        padding = dict.fromkeys(KINDS, 0)
        buckets = dict.fromkeys(KINDS, 0)
        for plan in recording.plans:
            for b in plan.buckets if plan else []:
                padding[b.kind] += b.padding_bytes
                buckets[b.kind] += 1
        print()
        print(f"{'collective':<16}{'before':>8}{'after':>8}{'buckets':>9}{'bytes moved':>14}{'padding':>10}")
        for k in KINDS:
            print(f"{k:<16}{before[k]:>8}{after[k]:>8}{buckets[k]:>9}{moved[k]:>14,}{padding[k]:>10,}")
        print()
        print("bucket plan (forward graph, then backward graph):")
        for plan in recording.plans:
            print(plan if plan else "  (pass did not run)")
        print()
        print(f"results against the unbucketed step on all {world} ranks, per kind:")
        for k in KINDS:
            what = REACHES[k]
            print(f"{k:<16}" + (f"{what + ':':<11}{verdict(*compared[what])}" if before[k] else "none in this step"))
        print(f"loss and {len(base.grads)} gradients: {'bit-identical' if identical else 'DIFFERENT'} "
              f"on all {world} ranks")
        if not identical and world > 2:
            print(f"  expected above 2 ranks: each rank trains on its own batch, and a merged reduction may sum "
                  f"{world} values in another order than the unbucketed ones")
        print(f"estimated peak live bytes of the post-grad graphs (fwd, bwd): unbucketed {counting.peaks}, "
              f"bucketed {recording.peaks}")
        print(f"median step time: unbucketed {base.median_s * 1e3:.2f} ms, bucketed {ours.median_s * 1e3:.2f} ms, "
              f"ratio {ours.median_s / base.median_s:.2f}x (compile: {base.compile_s:.1f}s vs {ours.compile_s:.1f}s)")
    dist.barrier()
    dist.destroy_process_group()
    if not identical and world <= 2:  # a sum of two values is exact in any order
        sys.exit(1)


def _spawned(rank, world, args, init_method):
    main_worker(rank, world, args, init_method)


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m conformance.demo", description=__doc__.split("\n")[0])
    p.add_argument("--world-size", type=int, default=2, help="ranks to spawn here (ignored under torchrun)")
    p.add_argument("--model", choices=("transformer", "toy"), default="transformer",
                   help="transformer (default): torch's test Transformer sharded SimpleFSDP-style; "
                        "toy: a hand-sharded MLP sized by --layers/--dim/--batch")
    p.add_argument("--layers", type=int, default=4, help="toy model only")
    p.add_argument("--dim", type=int, default=64, help="toy model only")
    p.add_argument("--batch", type=int, default=8, help="toy model only")
    p.add_argument("--steps", type=int, default=10, help="timed steps after the first")
    p.add_argument("--bucket-cap-mb", type=float, default=None)
    p.add_argument("--no-multidtype", action="store_true", help="one all-gather bucket per dtype")
    p.add_argument("--policy", choices=("module", "locality", "merge_all"), default="module",
                   help="module (default): one bucket per module block, locality outside blocks; "
                        "locality: buckets follow where results are needed; merge_all: the cap alone")
    p.add_argument("--locality-flops", type=float, default=None,
                   help="compute one bucket may span (default: what one collective's latency is worth)")
    p.add_argument("--exact-reductions", action="store_true",
                   help="merge reductions only where the result is bit-identical (groups of 2)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = p.parse_args(argv)
    for name in ("world_size", "layers", "dim", "batch", "steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.locality_flops is not None and args.locality_flops < 0:
        p.error("--locality-flops must be >= 0")
    if args.bucket_cap_mb is not None and args.bucket_cap_mb <= 0:
        p.error("--bucket-cap-mb must be > 0")
    return args


def main(argv=None):
    args = parse_args(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun / env:// launchers
        main_worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args, None)
        return
    os.environ["OMP_NUM_THREADS"] = "1"
    init_file = os.path.join(tempfile.mkdtemp(prefix="conformance-demo-"), "rendezvous")
    torch.multiprocessing.spawn(
        _spawned, args=(args.world_size, args, f"file://{init_file}"), nprocs=args.world_size, join=True
    )


if __name__ == "__main__":
    main()
