"""A worker process for the clock-skew tests, run under ``faketime`` (its wall clock only:
``FAKETIME_DONT_FAKE_MONOTONIC=1``, as a machine whose clock is off has it) so its clock is
minutes off the database's: ``python -m tests.support.skewed_worker MODE LEDGER_URL RUN_KEY ...``.

Modes (each prints one JSON line per event on stdout, flushed, for the parent to time with
its own, true clock):

``hold LEASE HOLD``
    Claim the run (a render's lease of LEASE seconds), keep renewing it for HOLD seconds as
    a render does (LeaseKeeper), then stop renewing and exit: a worker that died.
``steal LEASE TIMEOUT``
    Try to claim the run every 0.2 s until it succeeds or TIMEOUT seconds passed.
``deliver UNTIL_ISO DIR``
    One delivery attempt of a small artifact to a local destination at DIR (a file stands
    in the way, so it fails retryably) with a retry window ending at UNTIL_ISO; ``now`` is
    this process's own (skewed) clock, as the Airflow edge passes it.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from export_lib.errors import ExportError, LeaseHeldError
from export_lib.ledger import open_ledger


def _pause(seconds: float) -> None:
    """A pause on the monotonic clock (libfaketime breaks ``time.sleep``'s absolute deadline;
    a condition wait is what the lease keeper uses too)."""
    threading.Event().wait(seconds)


def _say(**event: object) -> None:
    print(json.dumps({**event, "clock": datetime.now(UTC).isoformat()}), flush=True)


def hold(url: str, run_key: str, lease: float, seconds: float) -> None:
    from export_lib.pipeline.lease import LeaseKeeper

    ledger = open_ledger(url)
    attempt = ledger.claim_attempt(run_key, origin="holder",
                                   now=datetime.now(UTC), lease=timedelta(seconds=lease),
                                   staging_uri=lambda a: f"file:///tmp/staging/{a}.csv")
    _say(event="claimed", attempt=attempt.attempt_id)
    with LeaseKeeper(ledger, attempt.attempt_id, timedelta(seconds=lease)):
        _pause(seconds)
    _say(event="stopped renewing")


def steal(url: str, run_key: str, lease: float, timeout: float) -> None:
    ledger = open_ledger(url)
    ends, refusals = time.monotonic() + timeout, 0
    while time.monotonic() < ends:
        try:
            attempt = ledger.claim_attempt(run_key, origin="thief", now=datetime.now(UTC),
                                           lease=timedelta(seconds=lease),
                                           staging_uri=lambda a: f"file:///tmp/staging/{a}.csv")
        except LeaseHeldError:
            refusals += 1
            _pause(0.2)
            continue
        _say(event="took over", attempt=attempt.attempt_id, refusals=refusals)
        return
    _say(event="gave up", refusals=refusals)


def deliver_once(url: str, run_key: str, until: str, directory: str) -> None:
    from export_lib.config.destinations import LocalDestination
    from export_lib.delivery import DeliverableArtifact, deliver

    body = b"company_id,value\nacme,1\n"
    path = Path(tempfile.mkdtemp()) / "acme_daily-spend_2026-03-28_v1.csv"
    path.write_bytes(body)
    artifact = DeliverableArtifact(
        local_path=path, name=path.name, version=1, sha256=hashlib.sha256(body).hexdigest(),
        bytes=len(body), rows=1, format="csv", uri=path.as_uri(),
        window_start=datetime(2026, 3, 28, tzinfo=UTC),
        window_end=datetime(2026, 3, 29, tzinfo=UTC), manifest={"company": "acme"})
    destination = LocalDestination(id="acme-dir", type="local", path=directory)
    try:
        outcome = deliver(open_ledger(url).engine, destination, artifact, run_key=run_key,
                          period_label="2026-03-28", owner="owner@acme.example",
                          authorized=["owner@acme.example"],
                          retry_until=datetime.fromisoformat(until), now=datetime.now(UTC))
        _say(event="delivered", state=outcome.state)
    except ExportError as exc:
        _say(event="failed", retryable=exc.retryable, error=str(exc))


if __name__ == "__main__":
    mode, url, key, *rest = sys.argv[1:]
    if mode == "hold":
        hold(url, key, float(rest[0]), float(rest[1]))
    elif mode == "steal":
        steal(url, key, float(rest[0]), float(rest[1]))
    else:
        deliver_once(url, key, rest[0], rest[1])
