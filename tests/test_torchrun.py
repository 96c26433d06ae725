"""The catalog under torchrun: ranks the suite did not spawn, JUnit XML, a killed rank."""

import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest

pytestmark = pytest.mark.first_release  # launcher checks, the same on every release

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")


def _torchrun(nproc: int, *args: str) -> list[str]:
    return [TORCHRUN, "--standalone", "--nproc-per-node", str(nproc), "-m", "conformance", "run", *args]


def _env():
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT, PYTHONUNBUFFERED="1")


def test_four_ranks_pass_and_write_junit(tmp_path):
    xml = tmp_path / "out.xml"
    run = subprocess.run(_torchrun(4, "-k", "ag-bf16", "--junitxml", str(xml)), env=_env(), cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    suite = ET.parse(xml).getroot().find("testsuite")
    names = [tc.get("name") for tc in suite.iter("testcase")]
    assert names and all(re.fullmatch(r"ag-bf16.*-w4", n) for n in names), names
    assert suite.get("failures") == "0" and suite.get("errors") == "0"
    assert f"{len(names)} passed" in run.stdout


def test_a_killed_rank_stops_every_rank_naming_the_case(tmp_path):
    xml = tmp_path / "out.xml"
    proc = subprocess.Popen(_torchrun(2, "--junitxml", str(xml), "--case-timeout", "60"), env=_env(), cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    pids, lines = {}, []
    try:
        for line in proc.stdout:  # wait for both ranks and a first finished case
            lines.append(line)
            m = re.search(r"rank (\d+) pid (\d+) ready", line)
            if m:
                pids[int(m.group(1))] = int(m.group(2))
            if line.startswith("PASSED") and 1 in pids:
                break
        else:
            pytest.fail(f"the run ended (exit {proc.wait()}) before rank 1 was ready and a case passed:\n"
                        + "".join(lines)[-3000:])
        try:
            os.kill(pids[1], signal.SIGKILL)
        except ProcessLookupError:  # rank 1 ended on its own after a case passed: say how
            rest, _ = proc.communicate(timeout=120)
            pytest.fail(f"rank 1 (pid {pids[1]}) was gone before the kill; the run exited {proc.returncode}:\n"
                        + ("".join(lines) + rest)[-4000:])
        killed_at = time.monotonic()
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    elapsed = time.monotonic() - killed_at
    output = "".join(lines) + rest
    assert proc.returncode != 0
    assert elapsed < 60, f"took {elapsed:.0f}s to stop after the kill"
    m = re.search(r"rank 0: (?:stopped by signal \d+ during case|stopped in case) ([\w.-]+-w2)\b", output)
    assert m, output[-3000:]
    errors = [tc for tc in ET.parse(xml).getroot().iter("testcase") if tc.find("error") is not None]
    assert [tc.get("name") for tc in errors] == [m.group(1)]
