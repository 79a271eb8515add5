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

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

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
    slots: tuple[datetime, ...] = ()

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
    return RecoveryRange(first=missed[0], last=missed[-1], count=len(missed),
                         slots=tuple(missed))


@dataclass(frozen=True)
class RecoveryPlan:
    """How the missed slots are recovered (ADR 0032): ``backfill`` (one Airflow run per slot,
    ``first`` .. ``last``), ``batch`` (``batches``, each one task exporting its slots oldest
    first) or ``none`` (every slot is settled in the ledger or already in flight)."""

    kind: Literal["none", "backfill", "batch"]
    todo: tuple[datetime, ...] = ()
    batches: tuple[tuple[datetime, ...], ...] = ()

    def describe(self) -> str:
        if self.kind == "none":
            return "no slot left to recover"
        span = f"{self.todo[0]:%Y-%m-%dT%H:%MZ} .. {self.todo[-1]:%Y-%m-%dT%H:%MZ}"
        if self.kind == "backfill":
            return f"{len(self.todo)} slot(s) {span} by backfill"
        return f"{len(self.todo)} slot(s) {span} in {len(self.batches)} batch(es)"


def plan_recovery(missed: Sequence[datetime], *, settled: set[datetime],
                  in_flight: set[datetime], threshold: int, size: int) -> RecoveryPlan:
    """Choose between a backfill and batches for ``missed`` (oldest first).

    The slots to do are the missed ones neither settled in the ledger (ready, skipped,
    cancelled) nor in flight (a queued or running backfill run or batch). More than
    ``threshold`` of them go in batches of ``size``. So do fewer when settled slots lie between
    them (a batch left one failed period behind): a backfill over that range would start a
    no-op run for each settled slot in it, which has no Airflow run of its own.

    Worked example: 365 daily slots missed, 300 ready from a first batch, 2 of its periods
    failed and the other 63 not started; threshold 8, size 50: 65 to do → 2 batches (50, 15).
    """
    todo = tuple(s for s in sorted(missed) if s not in settled and s not in in_flight)
    if not todo:
        return RecoveryPlan("none")
    spanned = [s for s in missed if todo[0] <= s <= todo[-1]]
    if len(todo) <= threshold and len(spanned) == len(todo):
        return RecoveryPlan("backfill", todo)
    return RecoveryPlan("batch", todo, tuple(todo[i:i + size] for i in range(0, len(todo), size)))


__all__ = ["CATCHUP_BUDGET", "RecoveryPlan", "RecoveryRange", "plan_recovery", "recovery_range"]
