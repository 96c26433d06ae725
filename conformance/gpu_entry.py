"""`nox -s gpu_tests`: the CUDA conformance run on the ambient Python; installs nothing.

Needs pytest, expecttest and filecheck importable (pure-Python wheels can be
carried to a machine without a package registry). After the tests it runs
the step calibration (`python -m benchmarks.calibrate`: the family's
Transformer step timed on this GPU beside the simulator's compute estimate
of the same graphs); the exit status is the tests', else the calibration's.
Without an SM80+ GPU it says so, reports how many CUDA tests it skipped, and
exits 0.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .gpu import suitable_gpu

PYTEST_ARGS = ["-m", "gpu", "--conformance-device", "cuda", "-p", "no:cacheprovider"]
ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    ok, description = suitable_gpu()
    if not ok:
        collected = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "conformance", *PYTEST_ARGS],
            capture_output=True, text=True,
        )
        count = sum(1 for line in collected.stdout.splitlines() if "::" in line)
        print(f"gpu_tests: no suitable GPU ({description}); skipped {count} CUDA tests and the step calibration.")
        return 0
    print(f"gpu_tests: running on {description}", flush=True)
    tests = subprocess.call([sys.executable, "-m", "pytest", "conformance", *PYTEST_ARGS, *argv])
    calibration = calibrate()  # runs whatever the tests gave: its table is worth having either way
    return tests or calibration


def calibrate() -> int:
    """The calibration in a process of its own (a fresh CUDA context and compile state)."""
    if not (ROOT / "benchmarks" / "calibrate.py").is_file():  # an installed copy of the suite has no benchmarks
        print("gpu_tests: no benchmarks/ beside conformance/; step calibration skipped.")
        return 0
    print("gpu_tests: step calibration (python -m benchmarks.calibrate)", flush=True)
    return subprocess.call([sys.executable, "-m", "benchmarks.calibrate"], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
