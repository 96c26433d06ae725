"""`nox -s gpu_tests`: the CUDA conformance run on the ambient Python; installs nothing.

Needs pytest, expecttest and filecheck importable (pure-Python wheels can be
carried to a machine without a package registry). Without an SM80+ GPU it says
so, reports how many CUDA tests it skipped, and exits 0.
"""

from __future__ import annotations

import subprocess
import sys

from .gpu import suitable_gpu

PYTEST_ARGS = ["-m", "gpu", "--conformance-device", "cuda", "-p", "no:cacheprovider"]


def main(argv: list[str]) -> int:
    ok, description = suitable_gpu()
    if not ok:
        collected = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "conformance", *PYTEST_ARGS],
            capture_output=True, text=True,
        )
        count = sum(1 for line in collected.stdout.splitlines() if "::" in line)
        print(f"gpu_tests: no suitable GPU ({description}); skipped {count} CUDA tests.")
        return 0
    print(f"gpu_tests: running on {description}", flush=True)
    return subprocess.call([sys.executable, "-m", "pytest", "conformance", *PYTEST_ARGS, *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
