"""Workers whose clocks are five minutes ahead of or behind the database's (Debian's
``faketime`` on the worker process; the ledger is real PostgreSQL on the true clock).

A render's lease is the database's clock (docs/adr/0034-which-clock.md): a holder running
behind renews a lease that still lasts its whole length, a thief running ahead cannot take it
before it lapsed, and a holder running ahead is taken over as soon as it lapsed, not minutes
later. A delivery window closes by both clocks: a worker running ahead does not exhaust a
delivery whose window is still open.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from export_lib.ledger import deliveries as rec
from export_lib.ledger import open_ledger
from tests.fixtures.ledger import registration
from tests.world import REPO, clean_env

LEASE = 6.0  # seconds: renewed every 2 s by the holder
HOLD = 5.0  # the holder renews this long, then stops (its worker died)
SKEW = "5m"
NAME = "acme_daily-spend_2026-03-28_v1.csv"  # tests/support/skewed_worker.py's artifact
INSTALL = "apt-get install -y faketime (scripts/ensure-debian-packages.sh does)"


def _worker(offset: str, *args: str) -> subprocess.Popen[str]:
    faketime = shutil.which("faketime")
    if faketime is None:
        pytest.fail(f"the faketime command is missing; {INSTALL}")
    return subprocess.Popen(
        [faketime, "-f", offset, str(REPO / ".venv/bin/python"), "-m",
         "tests.support.skewed_worker", *args],
        # The wall clock is off, as a machine's is; its monotonic clock (durations) is not.
        cwd=REPO, env=clean_env(FAKETIME_DONT_FAKE_MONOTONIC="1"), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)


def _events(proc: subprocess.Popen[str], timeout: float) -> list[tuple[float, dict]]:
    """Each JSON line with the moment this (true-clock) process read it."""
    out = []
    assert proc.stdout is not None
    ends = time.monotonic() + timeout
    for line in proc.stdout:
        out.append((time.monotonic(), json.loads(line)))
        assert time.monotonic() < ends
    assert proc.wait(timeout=timeout) == 0, proc.stderr.read() if proc.stderr else ""
    return out


@pytest.mark.parametrize(("holder", "thief"), [("-" + SKEW, "+" + SKEW),
                                               ("+" + SKEW, "-" + SKEW)])
def test_a_lease_is_taken_over_when_it_lapsed_by_the_database_clock(pg_ledger, holder, thief):
    key = pg_ledger.register(registration(), datetime.now(UTC))[0].run_key
    url = pg_ledger.url
    holding = _worker(holder, "hold", url, key, str(LEASE), str(HOLD))
    assert holding.stdout is not None
    first = json.loads(holding.stdout.readline())
    assert first["event"] == "claimed"
    skew = datetime.fromisoformat(first["clock"]) - datetime.now(UTC)
    assert abs(abs(skew) - timedelta(minutes=5)) < timedelta(seconds=5)  # faketime is on
    stealing = _worker(thief, "steal", url, key, str(LEASE), str(HOLD + LEASE + 15))
    held = _events(holding, HOLD + 15)
    stolen = _events(stealing, HOLD + LEASE + 20)
    (took,) = [e for _, e in stolen]
    assert took["event"] == "took over" and took["refusals"] > 0
    attempts = pg_ledger.attempts(key)
    assert [(a.generation, a.state, a.origin) for a in attempts] == [
        (1, "abandoned", "holder"), (2, "running", "thief")]
    # In the database's time: the holder's last renewal still ran a whole lease past the
    # moment it stopped (true time: its own clock less the skew) ...
    offset = timedelta(minutes=5) * (1 if holder.startswith("+") else -1)
    stopped = datetime.fromisoformat(
        next(e for _, e in held if e["event"] == "stopped renewing")["clock"]) - offset
    lapsed = attempts[0].lease_expires_at
    assert lapsed - stopped >= timedelta(seconds=LEASE * 2 / 3 - 0.5), (lapsed, stopped)
    # ... and the thief claimed (its lease: the database's now() + LEASE) after that lease
    # lapsed, never before, and promptly after (it polls every 0.2 s).
    claimed = attempts[1].lease_expires_at - timedelta(seconds=LEASE)
    assert lapsed <= claimed <= lapsed + timedelta(seconds=2), (lapsed, claimed)


def test_a_worker_running_ahead_closes_no_delivery_window_early(pg_ledger, tmp_path: Path):
    """A retryable failure 2 minutes before the window's end, seen by a worker 5 minutes
    ahead: still ``pending`` (its own clock alone would have exhausted it); the same failure
    after the end exhausts it (so the check can fail)."""
    key = "acme/daily-spend/2026-03-29T05:00Z"
    blocked = tmp_path / "outbox"  # a directory where the upload's temp file goes: it fails
    (blocked / f".{NAME}.part-{rec.delivery_id(key, 1, 'acme-dir')}").mkdir(parents=True)
    closes = datetime.now(UTC) + timedelta(minutes=2)
    ahead = _worker("+" + SKEW, "deliver", pg_ledger.url, key, closes.isoformat(), str(blocked))
    ((_, failed),) = _events(ahead, 60)
    assert failed["event"] == "failed" and failed["retryable"] is True, failed
    assert f"will retry until {closes:%Y-%m-%dT%H:%M:%SZ}" in failed["error"]
    (record,) = rec.records_of(pg_ledger.engine, key)
    assert (record.state, record.attempts) == ("pending", 1)
    # The window's end moved into the database's past: now it closes.
    with pg_ledger.engine.begin() as conn:
        conn.execute(rec.deliveries.update().values(
            retry_until=datetime.now(UTC) - timedelta(seconds=1)))
    again = _worker("+" + SKEW, "deliver", pg_ledger.url, key, closes.isoformat(), str(blocked))
    ((_, exhausted),) = _events(again, 60)
    assert exhausted["retryable"] is False and "exhausted: its retry window closed" in \
        exhausted["error"], exhausted
    assert rec.records_of(open_ledger(pg_ledger.url).engine, key)[0].state == "exhausted"
