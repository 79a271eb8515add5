"""A process of an earlier release using the ledger while it is upgraded under it.

Run with ``PYTHONPATH`` naming that release's source tree (``git archive`` of it), so the
``export_lib`` imported here is the old one: ``python old_release_worker.py LEDGER_URL STOP``.
It registers, claims and fails runs (what a scheduler and its workers do) until the file STOP
exists, printing ``ok N`` after each and ``error ...`` for anything that went wrong.
"""

from __future__ import annotations

import os
import sys
import threading
from datetime import UTC, datetime, timedelta

from export_lib.ledger import open_ledger
from export_lib.ledger.records import RunRegistration


def main(url: str, stop: str) -> None:
    import export_lib

    print(f"code {os.path.dirname(export_lib.__file__)}", flush=True)
    ledger, i = open_ledger(url), 0
    while not os.path.exists(stop):
        i += 1
        key, now = f"acme/old-release/{i}", datetime.now(UTC)
        try:
            ledger.register(RunRegistration(
                run_key=key, company="acme", schedule_id="acme/old-release", slot=now,
                window_start=now - timedelta(days=1), window_end=now, timezone="UTC",
                window_kind="calendar_day", config_version="v1", config_snapshot={"i": i},
                owner="data@acme.example"), now)
            attempt = ledger.claim_attempt(key, origin="old release", now=now,
                                           staging_uri=lambda a: f"file:///s/{a}",
                                           lease=timedelta(seconds=30))
            ledger.fail(key, attempt.attempt_id, "done", now)
            print(f"ok {i}", flush=True)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            print(f"error {type(exc).__name__}: {exc}".replace("\n", " "), flush=True)
        threading.Event().wait(0.05)


if __name__ == "__main__":
    main(*sys.argv[1:3])
