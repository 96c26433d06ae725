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
