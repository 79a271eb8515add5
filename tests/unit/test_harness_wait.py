"""The scheduler harness's wait (tests/system/scheduler/harness.wait_until): a run whose tasks keep
moving gets more time on a loaded machine; one that stopped moving fails at its timeout
(CI, 4 Dec: alertco's 4th render attempt failed just as a 240 s wait for the run ran out)."""

from __future__ import annotations

import itertools
import time

import pytest

from tests.system.scheduler.harness import wait_until


def _describe() -> str:
    return "waiting for run to reach failed"


def test_a_wait_that_stopped_moving_fails_at_its_timeout():
    start = time.monotonic()
    with pytest.raises(AssertionError,
                       match=r"timed out after 0 s \(no progress since the last check\): "
                             "waiting for run to reach failed"):
        wait_until(lambda: False, 0.2, 0.02, _describe, progress=lambda: ("render", "failed", 4))
    assert time.monotonic() - start < 0.5


def test_a_moving_wait_is_extended_at_most_twice():
    tries = itertools.count()
    start = time.monotonic()
    with pytest.raises(AssertionError, match=r"timed out after 1 s: waiting for run"):
        wait_until(lambda: False, 0.3, 0.02, _describe, progress=lambda: next(tries))
    assert 0.85 < time.monotonic() - start < 1.3  # three timeouts: the first and two extensions


def test_a_moving_wait_ends_when_its_condition_holds_after_the_first_timeout():
    start = time.monotonic()
    tries = itertools.count()
    wait_until(lambda: time.monotonic() - start > 0.45, 0.3, 0.02, _describe,
          progress=lambda: next(tries))
    assert time.monotonic() - start < 0.7


def test_without_progress_the_timeout_is_the_limit():
    start = time.monotonic()
    with pytest.raises(AssertionError, match=r"timed out after 0 s: waiting"):
        wait_until(lambda: False, 0.2, 0.02, _describe)
    assert time.monotonic() - start < 0.5
