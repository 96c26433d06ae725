"""The demo under torchrun (env:// rendezvous on loopback), kept short."""

import os
import subprocess
import sys

import pytest


@pytest.mark.inductor
@pytest.mark.first_release
def test_demo_under_torchrun_is_bit_identical():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "bucketing.demo", "--steps", "2"],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "bit-identical on all 2 ranks" in out.stdout
    assert "all_gather" in out.stdout and "reduce_scatter" in out.stdout
    assert "SimpleFSDP-style" in out.stdout  # the real Transformer, not the toy model
