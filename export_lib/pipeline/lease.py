"""Keep a render's lease (its hold on the run, its place in the render budget) alive while it
reads the source, and wait for another attempt's lease.

An attempt holds its run from its claim until it publishes, as long as its lease lives: a
second attempt for the same run waits (:func:`claim_waiting`, bounded) or stands down with
LeaseHeldError, and takes over only once the lease lapsed. A daemon thread renews the
attempt's ``lease_expires_at`` every third of the lease (to the database's ``now()`` + the
lease: the worker's own clock decides nothing another worker reads), so a long
render keeps its place and a worker killed without a word (SIGKILL, a lost host) gives its
place back within one lease. Renewing is best effort: a ledger hiccup is logged, the next tick tries
again; the render itself is never stopped by it.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

from export_lib.errors import LeaseHeldError
from export_lib.ledger import Ledger
from export_lib.ledger.records import AttemptRecord
from export_lib.ledger.renewal import Renewal
from export_lib.logfmt import get_logger

log = get_logger(__name__)


class LeaseKeeper(Renewal):
    """``with LeaseKeeper(ledger, attempt_id, lease):`` renews the lease every third of it
    until the block ends."""

    def __init__(self, ledger: Ledger, attempt_id: str, lease: timedelta) -> None:
        super().__init__(lambda: ledger.renew_lease(attempt_id, lease),
                         lease.total_seconds() / 3, f"lease-{attempt_id[:8]}",
                         f"attempt {attempt_id[:12]}: renewing the render lease")


def claim_waiting(ledger: Ledger, run_key: str, *, now: datetime, wait: timedelta,
                  **claim: Any) -> AttemptRecord:
    """``ledger.claim_attempt`` that waits (bounded by ``wait``, polling, on this host's
    monotonic clock: a duration, not a moment another machine reads) while another attempt
    holds the run; the claim's ``now`` advances with the time waited."""
    started = time.monotonic()
    logged = False
    while True:
        waited = timedelta(seconds=time.monotonic() - started)
        try:
            return ledger.claim_attempt(run_key, now=now + waited, **claim)
        except LeaseHeldError as exc:
            if waited >= wait:
                log.warning("%s", exc)
                raise
            if not logged:
                log.info("%s; waiting up to %s", exc, wait)
                logged = True
            time.sleep(min(1.0, (wait - waited).total_seconds()) or 0.01)
