"""``ExportTimetable``: Airflow runs keyed by export slots, built on ``export_lib.periods.slots``.

Airflow takes a run's logical date from the start of its data interval and requires it to be
unique per DAG, while reporting windows overlap (a trailing 30-day window every day) or repeat
(the previous business day on Saturday, Sunday and Monday). So a run is keyed by its *slot*:
``DagRunInfo.exact(slot)`` (run_after = logical date = slot), and the reporting window is
resolved from the slot by ``export_lib.periods.windows.resolve_window`` exactly as ``exportctl preview``
does. DST gaps and folds follow the schedule's ``dst_gap``/``dst_fold`` policy (ADR 0001).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pendulum
from airflow.timetables.base import DagRunInfo, DataInterval, TimeRestriction, Timetable

from export_lib.config.timing import Timing
from export_lib.periods.slots import (
    is_slot,
    latest_slot_at_or_before,
    next_slots,
    slots_between,
)


def _pendulum(instant: datetime) -> pendulum.DateTime:
    return pendulum.instance(instant.astimezone(UTC), tz="UTC")


class ExportTimetable(Timetable):
    """One run per slot of a :class:`~export_lib.config.timing.Timing` (local hours or cron).

    Export DAGs are built with ``catchup=False`` (ADR 0006): the scheduler always creates the
    newest due slot and never works through a backlog itself, so the current slot is never
    queued behind missed ones; missed slots are recovered as Airflow backfills under the
    catch-up budget. Backfills (CLI, REST, the UI dialog) iterate this timetable with
    ``catchup=True`` from the requested start, so a backfill lists exactly the slots of its
    range, however old.

    :param timing: the schedule's timing, or its JSON dict (as stored by :meth:`serialize`).
    """

    periodic = True  # Airflow refuses backfills of non-periodic timetables
    run_ordering = ("logical_date",)

    def __init__(self, timing: Timing | dict[str, Any]) -> None:
        self.timing = timing if isinstance(timing, Timing) else Timing.model_validate(timing)
        self.description = f"Export slots: {self.timing.summary} (runs keyed by slot)"

    @property
    def summary(self) -> str:
        """E.g. ``07:00 Europe/Berlin, every 24 h`` or ``cron 0 14 * * * UTC``."""
        return self.timing.summary

    def serialize(self) -> dict[str, Any]:
        return {"timing": self.timing.model_dump(mode="json")}

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> ExportTimetable:
        # Serializations written before ADR 0006 also carry lookback_seconds and recovery;
        # recovery now lives in the DAG (recover_missed), so they are ignored.
        return cls(Timing.model_validate(data["timing"]))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ExportTimetable) and other.timing == self.timing

    def __hash__(self) -> int:
        return hash(self.timing)

    def infer_manual_data_interval(self, *, run_after: pendulum.DateTime) -> DataInterval:
        """A manual run maps to a slot: ``run_after`` itself if it is a slot, else the latest
        slot at or before it (a trigger at 09:12 for a 07:00 daily export re-runs today's 07:00
        slot). Airflow passes the logical date the user chose as ``run_after``.
        """
        slot = run_after if is_slot(self.timing, run_after) else (
            latest_slot_at_or_before(self.timing, run_after))
        return DataInterval.exact(_pendulum(slot if slot is not None else run_after))

    def next_dagrun_info(self, *, last_automated_data_interval: DataInterval | None,
                         restriction: TimeRestriction) -> DagRunInfo | None:
        return self.next_run_info(last_automated_data_interval, restriction,
                                  now=datetime.now(UTC))  # the only clock read: the edge

    def next_run_info(self, last: DataInterval | None, restriction: TimeRestriction, *,
                      now: datetime) -> DagRunInfo | None:
        """:meth:`next_dagrun_info` with ``now`` passed in (pure; what the tests drive).

        * after a run: the first slot strictly after its slot;
        * first run: the first slot at or after ``restriction.earliest`` (start_date, or a
          backfill's ``from_date``), or the latest slot at or before ``now`` without one;
        * ``catchup=False`` (the scheduler, ADR 0006): never older than the latest slot at or
          before ``now``, so the newest due slot is created at once and missed ones are left
          to backfills;
        * ``catchup=True`` (how Airflow iterates a backfill's range): every slot in turn;
        * nothing after ``restriction.latest`` (end_date, or a backfill's ``to_date``).
        """
        candidates: list[datetime] = []
        if last is not None:
            candidates += next_slots(self.timing, last.start + timedelta(microseconds=1), 1)
        elif restriction.earliest is None:
            first = latest_slot_at_or_before(self.timing, now)
            candidates += [first] if first is not None else next_slots(self.timing, now, 1)
        # After a run at or past ``earliest`` the next slot after it is later than any slot
        # from ``earliest``: skip that look-up (half the work of every backfill step).
        if restriction.earliest is not None and (last is None
                                                 or last.start < restriction.earliest):
            candidates += next_slots(self.timing, restriction.earliest, 1)
        if not restriction.catchup:
            current = latest_slot_at_or_before(self.timing, now)
            candidates += [current] if current is not None else []
        if not candidates:
            return None
        slot = max(candidates)
        if last is not None and slot <= last.start:  # sparse cron with nothing ahead
            return None
        if restriction.latest is not None and slot > restriction.latest:
            return None
        return DagRunInfo.exact(_pendulum(slot))

    def slots_between(self, start: datetime, end: datetime) -> tuple[datetime, ...]:
        """Convenience for the DAG factory and tests: the slots in ``[start, end)``."""
        return slots_between(self.timing, start, end)
