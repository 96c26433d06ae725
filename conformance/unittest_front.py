"""The catalog as unittest classes, the way PyTorch's distributed tests are written.

    from torch.testing._internal.common_distributed import MultiProcContinuousTest
    from torch.testing._internal.common_utils import instantiate_parametrized_tests, run_tests
    from conformance import FxConformance

    class TestMyPass(FxConformance, MultiProcContinuousTest):
        adapter = "torch"   # a name, "module:object", a PassAdapter, or a callable fn(gm, **options)
        cases = "ag-*"      # optional: glob(s) or substring(s) over catalog case ids
        world_size = 2

    instantiate_parametrized_tests(TestMyPass)
    if __name__ == "__main__":
        run_tests()

Each matching case becomes a method `test_<case id>` (dashes as underscores),
run on every rank with the same rank task and verdict as the pytest suite and
the torchrun runner. With `MultiProcContinuousTest` the ranks live for the
whole class; with `MultiProcessTestCase` each test spawns its own. Cases the
adapter is expected to fail are marked `unittest.expectedFailure`, so a fix
shows up as an unexpected success.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import unittest
from datetime import timedelta

from . import adapters, runner
from .checking import check_on_rank, expected_outcome

CASE_TIMEOUT = timedelta(seconds=300)
SUBGROUPS = {"pairs", "halves", "strided"}  # made by pool.make_groups on even worlds of 4 or more


def _verdict_path(main_pid: int, test_id: str) -> str:
    return os.path.join(tempfile.gettempdir(), f"conformance-verdict-{main_pid}-{re.sub(r'[^A-Za-z0-9_.-]', '_', test_id)}")


_contexts: dict = {}


def _rank_context(rank: int, world_size: int):
    """This process's RankContext, its subgroups made once (every rank runs the
    tests in the same order, so they create them together)."""
    import torch.distributed as dist

    from .pool import RankContext, make_groups

    key = (id(dist.group.WORLD), rank, world_size)
    if key not in _contexts:
        backend = dist.get_backend()
        _contexts.clear()
        _contexts[key] = RankContext(rank, world_size, backend, "cuda" if backend == "nccl" else "cpu",
                                     make_groups(world_size))
    return _contexts[key]


class _Conformance:
    adapter = "project"
    cases: str | tuple[str, ...] = "*"
    world_size = 2
    level = "fx"
    timeout = CASE_TIMEOUT  # MultiProcContinuousTest's process-group timeout

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("_abstract"):
            return
        adapter = adapters.resolve(cls.adapter)
        patterns = [cls.cases] if isinstance(cls.cases, str) else list(cls.cases)
        groups = {"world", "alt"} | (SUBGROUPS if cls.world_size % 2 == 0 and cls.world_size > 2 else set())
        for case_id in runner.select(cls.world_size, [p for p in patterns if p != "*"], groups):
            test = _case_test(case_id)
            expected = expected_outcome(adapter, case_id, cls.level, cls.backend_str())
            if expected.skip:
                test = unittest.skip(expected.skip)(test)
            elif expected.xfail:
                test = unittest.expectedFailure(test)
            setattr(cls, "test_" + case_id.replace("-", "_"), test)

    @classmethod
    def backend_str(cls) -> str:  # MultiProcContinuousTest: gloo on CPU tensors
        return "gloo"

    @classmethod
    def device_type(cls) -> str:
        return "cpu"

    def setUp(self):
        super().setUp()
        from torch.testing._internal.common_distributed import MultiProcessTestCase

        if isinstance(self, MultiProcessTestCase):
            self._spawn_processes()

    def tearDown(self):
        super().tearDown()
        try:
            os.remove(self.file_name)
        except (AttributeError, OSError):
            pass

    def _worker_run_main_wait(self, fn):
        """MultiProcContinuousTest: the verdict is raised in the main process, so a
        failing case fails its own test and not, through the class's poison pill,
        every test after it."""
        waited = super()._worker_run_main_wait(fn)

        def judged():
            waited()
            if self.rank == self.MAIN_PROCESS_RANK:
                path = _verdict_path(os.getpid(), self._verdict_key())
                with open(path) as f:
                    failure = json.load(f)["failure"]
                os.remove(path)
                if failure:
                    raise AssertionError(failure)

        judged.__dict__.update(getattr(fn, "__dict__", {}))
        return judged

    def _verdict_key(self) -> str:
        # Not self.id(): a spawned rank imports the test file as __mp_main__.
        return f"{type(self).__name__}.{self._testMethodName}"

    def _check_case(self, case_id: str) -> None:
        import torch.distributed as dist
        from torch.testing._internal.common_distributed import MultiProcContinuousTest

        own_group = not dist.is_initialized()
        if own_group:  # MultiProcessTestCase: a process group per test
            store = dist.FileStore(self.file_name, self.world_size)
            dist.init_process_group("gloo", store=store, rank=self.rank, world_size=self.world_size,
                                    timeout=self.timeout)
        try:
            ctx = _rank_context(self.rank, self.world_size)
            status, failure = check_on_rank(ctx, case_id, adapters.resolve(self.adapter), self.level)
        finally:
            if own_group:
                _contexts.clear()
                dist.destroy_process_group()
        failure = failure if status != "passed" else None
        if isinstance(self, MultiProcContinuousTest):
            if self.rank == 0:
                with open(_verdict_path(os.getppid(), self._verdict_key()), "w") as f:
                    json.dump({"failure": failure}, f)
        elif failure:
            raise AssertionError(failure)


def _case_test(case_id: str):
    def test(self):
        self._check_case(case_id)

    test.__name__ = "test_" + case_id.replace("-", "_")
    test.__doc__ = f"catalog case {case_id}"
    return test


class FxConformance(_Conformance):
    """Catalog cases at FX level: the pass on a traced graph, both graphs run, bytes compared."""

    _abstract = True
    level = "fx"


class InductorConformance(_Conformance):
    """Catalog cases compiled through Inductor with and without the pass, bytes compared."""

    _abstract = True
    level = "inductor"
