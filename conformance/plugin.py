"""pytest plugin (entry point `pytest11`): pass selection and shared rank pools."""

from __future__ import annotations

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("bucketing conformance")
    group.addoption(
        "--bucketing-pass",
        default="project",
        help="pass(es) under test, comma-separated: project | torch | torch-manual | identity | module:object "
             "(default: project); test ids carry each adapter's name",
    )
    group.addoption(
        "--conformance-device",
        default="cpu",
        choices=("cpu", "cuda"),
        help="device of the tensors; cuda uses NCCL when enough GPUs are visible",
    )
    group.addoption(
        "--conformance-cases",
        default=None,
        help="module(s) that add cases with conformance.catalog.register (comma-separated; rank processes "
             "import them too, through CONFORMANCE_CASES)",
    )


def pytest_configure(config):
    extra = config.getoption("--conformance-cases", None)
    if extra:
        import os

        os.environ["CONFORMANCE_CASES"] = extra  # inherited by every rank process
        from . import catalog

        catalog.load_extra_cases()
    config.addinivalue_line("markers", "slow: long-running; excluded from the default run")
    config.addinivalue_line("markers", "inductor: compiles through torch.compile/Inductor")
    config.addinivalue_line("markers", "gpu: needs a CUDA device")
    config.addinivalue_line("markers", "client: trains a real client installed by `nox -s clients` (torchtitan)")
    config.addinivalue_line("markers", "first_release: `nox -s tests` runs it on the first supported release only "
                                       "(costly, or the same on every release)")


class PoolSet:
    """One rank pool per (world size, backend), started on first use."""

    def __init__(self, device: str):
        self.device = device
        self.pools = {}

    def get(self, world_size: int, backend: str | None = None):
        from .pool import RankPool

        if backend is None:
            from .gpu import backend_for

            backend = backend_for(world_size) if self.device == "cuda" else "gloo"
        key = (world_size, backend)
        if key not in self.pools:
            self.pools[key] = RankPool(world_size, backend, self.device)
        return self.pools[key]

    def close(self):
        for pool in self.pools.values():
            pool.close()


def pytest_generate_tests(metafunc):
    if "bucketing_adapter" in metafunc.fixturenames:
        specs = [s.strip() for s in metafunc.config.getoption("--bucketing-pass").split(",") if s.strip()]
        metafunc.parametrize("bucketing_adapter", specs, indirect=True, ids=specs, scope="session")


@pytest.fixture(scope="session")
def bucketing_adapter(request):
    """The adapter under test (one per spec of --bucketing-pass)."""
    from .adapters import load

    return load(request.param)


@pytest.fixture(scope="session")
def conformance_device(request):
    return request.config.getoption("--conformance-device")


@pytest.fixture(scope="session")
def rank_pools(conformance_device):
    pools = PoolSet(conformance_device)
    yield pools
    pools.close()


def expect_result(adapter, check: str, request, level: str = "fx", backend: str = "gloo") -> None:
    """Apply the check's expected outcome (conformance.checking.expected_outcome, the one
    decision every front end applies) to this test: skip it, or mark it xfail strictly, so
    passing where the adapter is expected to fail fails, naming the stale entry."""
    from .checking import expected_outcome

    expected = expected_outcome(adapter, check, level, backend)
    if expected.skip:
        pytest.skip(f"{expected.check_id}: {expected.skip}")
    if expected.xfail:
        request.applymarker(pytest.mark.xfail(
            reason=f"{expected.check_id}: {expected.xfail} (expected for {adapter.name}; passing means the entry "
                   "is stale)",
            strict=True))
