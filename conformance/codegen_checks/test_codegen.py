"""Data-driven checks on Inductor's generated code, one `.check` file per check.

Each file names a catalog case (`; CASE:`), the adapters it applies to
(`; ADAPTERS:`, `*` for any bucketing pass) and optionally the targets
(`; TARGETS:`, default every one: `cpu`, and the GPU presets `sm80`, `sm90`
generated on this machine by conformance/fake_cuda.py); its CHECK lines run
through the `filecheck` tool against the code Inductor generates for that case
with the pass in its config, in a single process with a fake process group.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

from conformance.adapters import BUCKETING
from conformance.codegen import TARGETS, target_code, target_param
from conformance.plugin import expect_result

CHECK_DIR = pathlib.Path(__file__).parent
CHECK_FILES = sorted(CHECK_DIR.glob("*.check"))


def _header(path: pathlib.Path, key: str, default: str | None = None) -> str:
    match = re.search(rf"^; {key}:\s*(.+)$", path.read_text(), re.M)
    if match is None and default is not None:
        return default
    assert match, f"{path.name} lacks a '; {key}:' line"
    return match.group(1).strip()


def _targets(path: pathlib.Path) -> list[str]:
    return [t.strip() for t in _header(path, "TARGETS", ",".join(TARGETS)).split(",")]


# Every check file against every target it names (`; TARGETS:`, default all).
CHECKS = [target_param(path, target, target=target, id=f"{path.stem}-{target}")
          for path in CHECK_FILES for target in _targets(path)]


@pytest.mark.inductor
@pytest.mark.parametrize("check_file,target", CHECKS)
def test_codegen(check_file, target, bucketing_adapter, request):
    adapters = [a.strip() for a in _header(check_file, "ADAPTERS").split(",")]
    if bucketing_adapter.inductor_pass is None or bucketing_adapter.expectations != BUCKETING:
        pytest.skip(f"{bucketing_adapter.name} is not checked for code structure")
    if "*" not in adapters and bucketing_adapter.name not in adapters:
        pytest.skip(f"{check_file.name} is specific to {adapters}")
    expect_result(bucketing_adapter, f"codegen:{check_file.stem}", request)
    code = target_code(_header(check_file, "CASE"), bucketing_adapter, target)
    run = subprocess.run(
        [sys.executable, "-m", "filecheck", str(check_file)], input=code, capture_output=True, text=True
    )
    assert run.returncode == 0, f"{check_file.name} failed:\n{run.stdout}\n{run.stderr}"
