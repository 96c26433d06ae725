"""Failure isolation: a rank that raises fails the task promptly instead of hanging it."""

import time

from conformance.pool import RankPool


def test_failing_rank_fails_the_others_within_the_grace_period():
    pool = RankPool(2, timeout_s=60)
    try:
        start = time.monotonic()
        results = pool.run("tests.smoke_ranks:fail_on_rank0", timeout_s=60)
        elapsed = time.monotonic() - start
        assert not results[0].ok and "fails on purpose" in results[0].error
        assert not results[1].ok  # stuck in a collective: reported, not waited for
        assert elapsed < 30, f"took {elapsed:.1f}s"
        # The pool restarts cleanly for the next task.
        again = pool.run("tests.smoke_ranks:echo_rank", timeout_s=60)
        assert [r.value for r in again] == [0, 1]
    finally:
        pool.close()


def test_a_rank_killed_by_a_signal_is_named_with_the_signal():
    pool = RankPool(2, timeout_s=60)
    try:
        start = time.monotonic()
        results = pool.run("tests.smoke_ranks:crash_on_rank1", timeout_s=60)
        assert not results[1].ok and "killed by SIGSEGV" in results[1].error, results[1].error
        assert not results[0].ok
        assert time.monotonic() - start < 30
        again = pool.run("tests.smoke_ranks:echo_rank", timeout_s=60)
        assert [r.value for r in again] == [0, 1]
    finally:
        pool.close()
