"""Run in a fresh process: 2 gloo ranks compile (or load from one shared FX graph
cache) an in-place bucketed all-gather, and check what each rank gathered.

Prints one JSON line: per rank, cache hits/misses and whether the gathered bytes
are every rank's inputs in rank order.
"""

import datetime
import json
import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import bucketing.core as bc

WORLD = 2


def _inputs(rank: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own real values
    return [torch.randn(5 + i, generator=gen).to(torch.bfloat16 if i % 2 else torch.float32) for i in range(4)]


def _rank(rank: int, store_path: str, out_dir: str) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    store = dist.FileStore(store_path, WORLD)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=120))
    group = dist.group.WORLD.group_name
    c = torch.ops._c10d_functional

    def f(*xs):
        return tuple(c.wait_tensor(c.all_gather_into_tensor(x, WORLD, group)) for x in xs)

    torch._inductor.config.post_grad_custom_post_pass = bc.BucketingPass(gather_in_place=True)
    torch._inductor.config.fx_graph_cache = True
    from torch._dynamo.utils import counters

    out = torch.compile(f, fullgraph=True)(*_inputs(rank))
    every = [_inputs(r) for r in range(WORLD)]
    correct = all(torch.equal(o.view(torch.uint8), torch.cat([xs[i] for xs in every]).view(torch.uint8))
                  for i, o in enumerate(out))
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as fh:
        json.dump({"hit": counters["inductor"]["fxgraph_cache_hit"],
                   "miss": counters["inductor"]["fxgraph_cache_miss"], "correct": correct}, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    work = tempfile.mkdtemp()
    mp.spawn(_rank, args=(os.path.join(work, "store"), work), nprocs=WORLD, join=True)
    print(json.dumps([json.load(open(os.path.join(work, f"{r}.json"))) for r in range(WORLD)]))
