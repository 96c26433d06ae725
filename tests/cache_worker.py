"""Run in a fresh process: compile (or load from the FX graph cache) a bucketed program.

Prints one JSON line: cache hits/misses, whether the pass ran, and a digest of the outputs.
"""

import hashlib
import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist

import bucketing
import bucketing.core as bc


def main(cap_mb: float) -> None:
    store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    group = dist.group.WORLD.group_name
    c = torch.ops._c10d_functional

    def f(*xs):
        return tuple(c.wait_tensor(c.all_gather_into_tensor(x, 1, group)) * 2 for x in xs)

    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(5 + i, generator=gen).to(torch.bfloat16 if i % 2 else torch.float32) for i in range(4)]
    the_pass = bc.BucketingPass(bucket_cap_mb=cap_mb)
    torch._inductor.config.post_grad_custom_post_pass = the_pass
    torch._inductor.config.fx_graph_cache = True
    from torch._dynamo.utils import counters

    out = torch.compile(f, fullgraph=True)(*xs)
    digest = hashlib.sha256(b"".join(o.contiguous().view(torch.uint8).numpy().tobytes() for o in out)).hexdigest()
    expected = hashlib.sha256(b"".join((x * 2).contiguous().view(torch.uint8).numpy().tobytes() for x in xs)).hexdigest()
    print(json.dumps({
        "hit": counters["inductor"]["fxgraph_cache_hit"],
        "miss": counters["inductor"]["fxgraph_cache_miss"],
        "pass_ran": the_pass.last_plan is not None,
        "correct": digest == expected,
        "ops_registered": hasattr(torch.ops.bucketing_ops, "all_gather_copy_in") and bucketing is not None,
    }))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(float(sys.argv[1]))
