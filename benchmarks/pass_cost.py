"""Pass cost on synthetic graphs of N collectives: ours vs torch's built-in pass.

    python -m benchmarks.pass_cost

Each measurement runs in a fresh subprocess (a fake process group of 8), timing
the pass alone, beside a 3-million-addition CPython loop timed in the same run
(the machine's speed, to read the seconds by); torch's pass runs on even sizes (it crashes on odd mixed-dtype
buckets) and is stopped past the time limit.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

SIZES = (100, 400, 1600, 6400)
KINDS = ("all_gather", "reduce_scatter", "all_reduce")
TORCH_LIMIT_S = 120.0


def _measure(impl: str, kind: str, n: int) -> float:
    """Runs inside the subprocess: seconds of one pass over a fresh graph.

    impl "ours-ambient-fake" is ours run inside a `FakeTensorMode` of the caller's
    (as when a user runs the pass while tracing under fake mode)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from benchmarks.synthetic import collective_graph

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=8)
    group = dist.group.WORLD.group_name
    gm = collective_graph(kind, n, group, 8, even_sizes=impl == "torch")
    if impl.startswith("ours"):
        import contextlib

        from torch._subclasses.fake_tensor import FakeTensorMode

        import bucketing.core as bc
        from bucketing import lowering

        # Inside Inductor, its lowering module (which the pass's first call
        # imports to register the copy-out lowering) is loaded already: not pass time.
        lowering.install()
        the_pass = bc.BucketingPass()
        ambient = FakeTensorMode() if impl == "ours-ambient-fake" else contextlib.nullcontext()
        with ambient:
            start = time.perf_counter()
            the_pass(gm.graph)
            return time.perf_counter() - start
    from torch._inductor.fx_passes import bucketing as tb

    start = time.perf_counter()
    if kind == "all_gather":
        tb.bucket_all_gather(gm, lambda i: 2000.0, "custom_ops_multidtype")
    elif kind == "reduce_scatter":
        tb.bucket_reduce_scatter(gm, lambda i: 2000.0, "custom_ops")
    else:
        tb.bucket_all_reduce(gm, lambda i: 2000.0)
    return time.perf_counter() - start


def measure(impl: str, kind: str, n: int, timeout_s: float) -> float | None:
    code = (
        "import json,sys; from benchmarks.pass_cost import _measure; "
        f"print(json.dumps(_measure({impl!r}, {kind!r}, {n})))"
    )
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(kinds=KINDS, sizes=SIZES, torch_limit_s: float = TORCH_LIMIT_S) -> list[dict]:
    rows = []
    for kind in kinds:
        torch_gave_up = False
        previous = None
        for n in sizes:
            ours = measure("ours", kind, n, 600)
            theirs = None
            note = ""
            if torch_gave_up:
                note = "torch skipped: the previous size already took too long"
            else:
                theirs = measure("torch", kind, n, torch_limit_s)
                if theirs is None:
                    note = f"torch stopped after {torch_limit_s:.0f}s"
                # Extrapolate the measured growth: skip a size that would run past the limit.
                growth = max(4.0, theirs / previous) if theirs and previous else 4.0
                torch_gave_up = theirs is None or theirs * growth > torch_limit_s
                previous = theirs
            rows.append({"kind": kind, "n": n, "ours_s": ours, "torch_s": theirs, "note": note})
            print(f"pass cost {kind:<15} N={n:<5} ours {ours:8.3f}s  torch "
                  f"{'-' if theirs is None else f'{theirs:8.3f}s'}  {note}", flush=True)
    return rows


def ambient_fake_ratio(n: int = 1600, repeats: int = 3) -> tuple[float, float]:
    """Median pass seconds at `n` all-gathers without and with an ambient fake mode, in turns."""
    plain, ambient = [], []
    for _ in range(repeats):
        plain.append(measure("ours", "all_gather", n, 600))
        ambient.append(measure("ours-ambient-fake", "all_gather", n, 600))
    return statistics.median(plain), statistics.median(ambient)


def loop_seconds() -> float:
    """A 3-million-addition CPython loop: what this machine's Python does in a second, to read the pass time by."""
    start = time.perf_counter()
    total = 0
    for i in range(3_000_000):
        total += i
    return time.perf_counter() - start


def growth(n: int = 1600, factor: int = 4, repeats: int = 3) -> tuple[float, float, float]:
    """Median pass seconds at `n` and `factor * n` all-gathers, in turns, and the loop's beside them."""
    small, large, loops = [], [], []
    for _ in range(repeats):
        loops.append(loop_seconds())
        small.append(measure("ours", "all_gather", n, 600))
        large.append(measure("ours", "all_gather", factor * n, 600))
    return statistics.median(small), statistics.median(large), statistics.median(loops)


if __name__ == "__main__":
    small_s, large_s, loop_s = growth()
    print(f"pass at 1600 all-gathers: {small_s:.3f}s ({small_s / loop_s:.2f}x the 3M-addition loop, {loop_s:.3f}s); "
          f"at 6400: {large_s:.3f}s ({large_s / small_s:.2f}x 1600's)")
    plain_s, ambient_s = ambient_fake_ratio()
    print(f"pass at 1600 all-gathers: {plain_s:.3f}s, under an ambient FakeTensorMode {ambient_s:.3f}s "
          f"({ambient_s / plain_s:.2f}x)")
