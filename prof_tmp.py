import os, time, statistics, tempfile, torch, torch.distributed as dist
def worker(rank, world, init):
    os.environ["OMP_NUM_THREADS"]="1"; torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    import bucketing.core as bc
    from benchmarks.compiled_step import _inputs, _program, _limit
    from torch.profiler import profile, ProfilerActivity
    group = dist.group.WORLD.group_name
    xs = _inputs("all_gather", 64, world, rank)
    prog = _program("all_gather", group, world)
    lp, li = _limit("all_gather", xs, group, world)
    for name, p, inp, cp in (("ours", prog, xs, bc.BucketingPass()), ("limit", lp, li, None)):
        torch._dynamo.reset()
        c = torch.compile(p, fullgraph=True)
        with torch._inductor.config.patch(post_grad_custom_post_pass=cp, fx_graph_cache=False):
            c(*inp)
        for _ in range(2):
            ts = []
            for _ in range(30):
                dist.barrier(); t = time.perf_counter(); c(*inp); ts.append(time.perf_counter() - t)
            if rank == 0: print(name, statistics.median(ts) * 1e3)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(20):
                dist.barrier(); c(*inp)
        if rank == 0:
            print(name); print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=16))
if __name__ == "__main__":
    init = os.path.join(tempfile.mkdtemp(), "rdv")
    torch.multiprocessing.spawn(worker, args=(2, init), nprocs=2)
