"""FX graph cache: a fresh process loads the bucketed graph without running the pass."""

import json
import os
import subprocess
import sys

import pytest


def _run(cache_dir, cap_mb):
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(cache_dir), OMP_NUM_THREADS="1")
    env.pop("TORCHINDUCTOR_FORCE_DISABLE_CACHES", None)
    out = subprocess.run(
        [sys.executable, "-m", "tests.cache_worker", str(cap_mb)],
        env=env, capture_output=True, text=True, timeout=300,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.inductor
@pytest.mark.first_release
def test_warm_cache_hits_and_runs_without_the_pass_and_options_miss(tmp_path):
    cold = _run(tmp_path, 64.0)
    assert cold["miss"] >= 1 and cold["pass_ran"] and cold["correct"]
    warm = _run(tmp_path, 64.0)
    assert warm["hit"] >= 1 and warm["miss"] == 0
    assert not warm["pass_ran"], "a cache hit must not need the pass"
    assert warm["correct"] and warm["ops_registered"]
    changed = _run(tmp_path, 32.0)
    assert changed["miss"] >= 1 and changed["pass_ran"] and changed["correct"]


def _run_ranks(cache_dir):
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(cache_dir), OMP_NUM_THREADS="1")
    env.pop("TORCHINDUCTOR_FORCE_DISABLE_CACHES", None)
    out = subprocess.run(
        [sys.executable, "-m", "tests.cache_ranks_worker"],
        env=env, capture_output=True, text=True, timeout=300,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.inductor
def test_ranks_sharing_a_cache_each_get_the_code_of_their_own_slot(tmp_path):
    """gather_in_place names the rank in the code, and Inductor's FX graph cache key holds
    no rank: two ranks on one cache directory must store and load code under keys of
    their own, each naming its own slot (gloo gathers right from any slot, since it
    copies; NCCL's in-place gather needs the rank's own). Run twice: the second run hits."""
    import re

    cold = _run_ranks(tmp_path)
    assert all(r["miss"] >= 1 and r["correct"] for r in cold), cold
    keys = sorted(p for p in (tmp_path / "fxgraph").glob("*/*") if p.is_dir())
    entries = [list(key.iterdir()) for key in keys]
    assert [len(e) for e in entries] == [1, 1], entries  # a key per rank, not two entries under one
    slots = {m for (entry,) in entries
             for m in re.findall(rb"all_gather_copy_in_slot\.default\([^)]*, 2, (\d)\)", entry.read_bytes())}
    assert slots == {b"0", b"1"}, slots
    warm = _run_ranks(tmp_path)
    assert all(r["hit"] >= 1 and r["miss"] == 0 and r["correct"] for r in warm), warm
