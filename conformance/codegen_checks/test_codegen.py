"""Data-driven checks on Inductor's generated code, one `.check` file per check.

Each file names a catalog case (`; CASE:`) and the adapters it applies to
(`; ADAPTERS:`, `*` for any bucketing pass); its CHECK lines run through the
`filecheck` tool against the code Inductor generates for that case with the
pass in its config, in a single process with a fake process group.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

from conformance import catalog
from conformance.adapters import BUCKETING

CHECK_DIR = pathlib.Path(__file__).parent
CHECK_FILES = sorted(CHECK_DIR.glob("*.check"))
WORLD = 4


def _header(path: pathlib.Path, key: str) -> str:
    match = re.search(rf"^; {key}:\s*(.+)$", path.read_text(), re.M)
    assert match, f"{path.name} lacks a '; {key}:' line"
    return match.group(1).strip()


def generated_code(case_name: str, adapter) -> str:
    from conformance.compiled import compile_and_run, fake_group
    from conformance.programs import build, make_inputs

    case = catalog.BY_NAME[case_name]
    groups = fake_group(WORLD)
    program = build(case.steps, groups)
    inputs = make_inputs(case.steps, groups, case.name, 0)
    _, code = compile_and_run(program, inputs, adapter.inductor_pass(**case.options_for(WORLD)), get_code=True)
    return code


@pytest.mark.inductor
@pytest.mark.parametrize("check_file", CHECK_FILES, ids=[p.stem for p in CHECK_FILES])
def test_codegen(check_file, bucketing_adapter):
    adapters = [a.strip() for a in _header(check_file, "ADAPTERS").split(",")]
    if bucketing_adapter.inductor_pass is None or bucketing_adapter.expectations != BUCKETING:
        pytest.skip(f"{bucketing_adapter.name} is not checked for code structure")
    if "*" not in adapters and bucketing_adapter.name not in adapters:
        pytest.skip(f"{check_file.name} is specific to {adapters}")
    reason = bucketing_adapter.xfail_reason(f"codegen:{check_file.stem}")
    if reason:
        pytest.xfail(reason)
    code = generated_code(_header(check_file, "CASE"), bucketing_adapter)
    run = subprocess.run(
        [sys.executable, "-m", "filecheck", str(check_file)], input=code, capture_output=True, text=True
    )
    assert run.returncode == 0, f"{check_file.name} failed:\n{run.stdout}\n{run.stderr}"
