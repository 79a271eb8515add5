"""Recovery ``each``: which missed slots a scheduled run hands to an Airflow backfill (ADR 0006).

The scheduler only ever creates the newest due slot (``catchup=False``), so the current slot is
never queued behind a backlog. When a scheduled run starts, its ``recover_missed`` task asks
this module for the slots before it that should have run, and creates one backfill over them
(oldest first, under the catch-up budget). Pure: ``previous`` (the newest earlier scheduled or
backfilled slot Airflow knows) and ``lookback`` are passed in.

The range reaches back to the previous run (an outage of any length is recovered), and at
least ``lookback`` (so a slot whose run was lost or never created inside the lookback is found
again by the next scheduled run: the check is self-healing); never before ``effective_from``.
Slots that already have a run are left to Airflow's ``reprocess_behavior=none``, which never
creates a second run for a logical date.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from export_lib.config.timing import Timing
from export_lib.periods.slots import slots_between

# How many catch-up runs of one DAG run at once (the backfill's max_active_runs); the renders
# of all catch-up runs together share the `export_catchup` pool (2 slots).
CATCHUP_BUDGET = 2


@dataclass(frozen=True)
class RecoveryRange:
    """The slots ``[first, last]`` (both slots) a backfill should cover; ``count`` of them."""

    first: datetime
    last: datetime
    count: int

    def describe(self) -> str:
        return (f"{self.count} missed slot{'s' if self.count != 1 else ''} "
                f"{self.first:%Y-%m-%dT%H:%MZ} .. {self.last:%Y-%m-%dT%H:%MZ}")


def recovery_range(timing: Timing, slot: datetime, *, previous: datetime | None,
                   lookback: timedelta, effective_from: datetime | None = None
                   ) -> RecoveryRange | None:
    """The missed slots before ``slot`` to backfill, or None when there are none.

    :param slot: the scheduled run's slot (the newest due slot)
    :param previous: the newest scheduled/backfilled slot before ``slot``, if any
    :param lookback: how far back to look at least (``EXPORT_CATCHUP_LOOKBACK_HOURS``)
    :param effective_from: the schedule's first slot, if configured
    """
    start = slot - lookback
    if previous is not None and previous < start:
        start = previous
    if effective_from is not None and effective_from > start:
        start = effective_from
    missed = [s for s in slots_between(timing, start, slot) if s < slot]
    if not missed:
        return None
    return RecoveryRange(first=missed[0], last=missed[-1], count=len(missed))


__all__ = ["CATCHUP_BUDGET", "RecoveryRange", "recovery_range"]
