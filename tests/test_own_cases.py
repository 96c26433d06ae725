"""Cases of one's own: registered from a module, they get the catalog's checks in every front end."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conformance import catalog

pytestmark = pytest.mark.first_release  # front-end plumbing, the same on every release

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CASES_MODULE = """
import torch
from conformance.catalog import Case, ag, register

register(Case("my-trio", (ag(torch.bfloat16, 7), ag(torch.float32, 5), ag(torch.bfloat16, 3)),
              {"all_gather": 1}, world_sizes=(2,)))
"""


def _env(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
    env.pop("CI", None)
    return env


def test_a_registered_case_runs_under_pytest_for_ours_and_fails_a_broken_pass(tmp_path):
    (tmp_path / "my_cases.py").write_text(CASES_MODULE)
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--conformance-cases=my_cases",
            os.path.join(ROOT, "conformance", "multiproc", "test_fx_catalog.py"), "-k", "my-trio"]
    ours = subprocess.run(base, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert ours.returncode == 0 and "1 passed" in ours.stdout, ours.stdout[-3000:] + ours.stderr[-2000:]
    broken = subprocess.run(base + ["--bucketing-pass=tests.broken_pass:swap_bytes"], cwd=tmp_path,
                            env=_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert broken.returncode != 0 and "my-trio-w2: rank 0: output 0 differs at byte offset 0" in broken.stdout, \
        broken.stdout[-3000:]


def test_register_refuses_a_duplicate_or_a_name_that_reads_as_a_world_size():
    existing = catalog.CASES[0]
    with pytest.raises(ValueError, match="case: 'ag-single-bf16' is already in the catalog"):
        catalog.register(existing)
    with pytest.raises(ValueError, match="must not contain '-w'"):
        catalog.register(catalog.Case("x-w2", existing.steps, None))
    with pytest.raises(ValueError, match=r"options \['polcy'\] are not in the catalog's vocabulary"):
        catalog.Case("typo", existing.steps, None, {"polcy": "merge_all"})
