"""The suite as a downstream PyTorch developer runs it: a unittest file of their own,
`python file.py`, and a pass that breaks results caught by every front end."""

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.first_release  # launcher checks, the same on every release

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HEADER = """
from torch.testing._internal.common_distributed import MultiProcContinuousTest, MultiProcessTestCase
from torch.testing._internal.common_utils import instantiate_parametrized_tests, run_tests
from conformance import FxConformance
"""
FOOTER = """
for _name in [n for n in list(globals()) if n.startswith("Test")]:
    instantiate_parametrized_tests(globals()[_name])
if __name__ == "__main__":
    run_tests()
"""


def _run_file(tmp_path, body: str, pythonpath: str | None = None):
    path = tmp_path / "test_downstream.py"
    path.write_text(HEADER + textwrap.dedent(body) + FOOTER)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    # Under CI=<anything> torch's run_tests writes JUnit XML through xmlrunner, a reporting
    # package the file's author chooses; these checks read the text report instead.
    env.pop("CI", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)


def test_a_downstream_file_passes_for_ours_and_identity_and_reports_torchs_expected_failures(tmp_path):
    run = _run_file(tmp_path, """
        class TestProject(FxConformance, MultiProcContinuousTest):
            adapter = "project"
            cases = "ag-bf16-f32-odd"
            world_size = 2

        class TestIdentity(FxConformance, MultiProcContinuousTest):
            adapter = "identity"
            cases = "ag-bf16-f32-odd"

        class TestTorch(FxConformance, MultiProcContinuousTest):
            adapter = "torch"
            cases = ("ag-bf16-f32-odd", "rs-sum-f32-w2")   # a known torch failure, and a case it passes

        class TestProjectSpawned(FxConformance, MultiProcessTestCase):
            adapter = "project"
            cases = "ag-bf16-f32-odd"
    """)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    assert "Ran 5 tests" in output and "OK (expected failures=1)" in output, output[-2000:]


def test_a_broken_pass_fails_under_both_unittest_bases_naming_case_rank_output_and_offset(tmp_path):
    run = _run_file(tmp_path, """
        class TestBrokenContinuous(FxConformance, MultiProcContinuousTest):
            adapter = "tests.broken_pass:swap_bytes"
            cases = "ag-bf16-f32-odd"

        class TestBrokenSpawned(FxConformance, MultiProcessTestCase):
            adapter = "tests.broken_pass:swap_bytes"
            cases = "ag-bf16-f32-odd"
    """, pythonpath=ROOT)
    output = run.stdout + run.stderr
    assert run.returncode != 0
    line = "ag-bf16-f32-odd-w2: rank 0: output 0 differs at byte offset 0"
    assert "FAIL: test_ag_bf16_f32_odd_w2 (__main__.TestBrokenContinuous" in output, output[-3000:]
    assert "test_ag_bf16_f32_odd_w2 (__main__.TestBrokenSpawned" in output, output[-3000:]
    assert output.count(line) >= 2, output[-3000:]


def test_a_broken_pass_fails_under_pytest_with_the_same_message():
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "conformance/multiproc/test_fx_catalog.py",
         "--bucketing-pass=tests.broken_pass:swap_bytes", "-k", "ag-bf16-f32-odd-w2"],
        cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=600)
    assert run.returncode == 1, run.stdout[-3000:]
    assert "ag-bf16-f32-odd-w2: rank 0: output 0 differs at byte offset 0" in run.stdout, run.stdout[-3000:]
    assert "test_fx_case[tests.broken_pass:swap_bytes-ag-bf16-f32-odd-w2]" in run.stdout, run.stdout[-3000:]


def test_the_projects_own_catalog_file_runs_as_plain_python(tmp_path):
    """`python conformance/multiproc/test_fx_catalog.py -k NAME`: the suite's own file under unittest."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("CI", None)  # see _run_file
    run = subprocess.run([sys.executable, os.path.join(ROOT, "conformance", "multiproc", "test_fx_catalog.py"),
                          "-k", "ag_bf16_f32_odd_w2"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-3000:]
    assert "Ran 1 test" in output and "OK" in output, output[-2000:]
