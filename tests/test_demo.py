"""The demo under torchrun (env:// rendezvous on loopback), kept short, and how it reports results."""

import os
import re
import subprocess
import sys

import pytest
import torch


@pytest.mark.inductor
@pytest.mark.first_release
def test_demo_under_torchrun_is_bit_identical():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "conformance.demo", "--steps", "2"],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "bit-identical on all 2 ranks" in out.stdout
    assert "all_gather" in out.stdout and "reduce_scatter" in out.stdout
    assert "SimpleFSDP-style" in out.stdout  # the real Transformer, not the toy model
    # Per kind, what its results reach: all-gathers the loss, reduce-scatters the gradients.
    assert re.search(r"^all_gather +loss: +bit-identical$", out.stdout, re.M), out.stdout[-3000:]
    assert re.search(r"^reduce_scatter +gradients: +bit-identical$", out.stdout, re.M), out.stdout[-3000:]


def test_results_that_differ_are_reported_with_their_largest_absolute_difference():
    from conformance.demo import compare, verdict

    a = torch.tensor([1.0, 2.0, 3.0])
    assert compare([a], [a.clone()]) == (True, 0.0)
    assert verdict(*compare([a], [a.clone()])) == "bit-identical"
    same, largest = compare([a, torch.zeros(0)], [a + torch.tensor([0.0, 0.5, -0.25]), torch.zeros(0)])
    assert (same, largest) == (False, 0.5)
    assert verdict(same, largest) == "not bit-identical: largest absolute difference 0.5"
    assert compare([torch.tensor([0.0])], [torch.tensor([-0.0])]) == (False, 0.0)  # other bytes, equal values
