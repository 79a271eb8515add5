"""Deadline alerts (Airflow 3.3's SLA replacement) measured from the export slot.

A run's deadline is ``slot + schedule deadline``; misses show in Browse → Deadlines. Catch-up and
backfill runs are created after their deadline has already passed: alerting for each would flood
the page with misses nobody can act on, so :class:`OnTimeSlotDeadline` creates no deadline for a
run whose deadline was already past when the run was created (the ledger still records the run's
deadline and lateness). See docs/adr/0003-deadlines-and-catch-up.md.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk.definitions.callback import AsyncCallback
from airflow.sdk.definitions.deadline import (
    BaseDeadlineReference,
    DeadlineAlert,
    deadline_reference,
)

log = logging.getLogger(__name__)
REFERENCE_TYPE_FIELD = "reference_type"


@deadline_reference
@dataclass
class OnTimeSlotDeadline(BaseDeadlineReference):
    """The run's slot (its logical date) — but only for runs created before their deadline.

    :param deadline_seconds: the schedule's deadline after the slot (same as the alert interval)
    """

    deadline_seconds: float = 0.0
    required_kwargs = frozenset({"dag_id", "run_id"})

    def serialize_reference(self) -> dict[str, Any]:
        return {REFERENCE_TYPE_FIELD: self.reference_name, "deadline_seconds": self.deadline_seconds}

    @classmethod
    def deserialize_reference(cls, reference_data: dict[str, Any]) -> OnTimeSlotDeadline:
        return cls(deadline_seconds=float(reference_data.get("deadline_seconds", 0.0)))

    def _evaluate_with(self, *, session: Any, **kwargs: Any) -> datetime | None:
        from airflow.models import DagRun
        from sqlalchemy import select

        row = session.execute(
            select(DagRun.logical_date, DagRun.run_type)
            .where(DagRun.dag_id == kwargs["dag_id"], DagRun.run_id == kwargs["run_id"])
        ).first()
        if row is None or row.logical_date is None:
            return None
        return slot_deadline_base(row.logical_date, str(row.run_type),
                                  timedelta(seconds=self.deadline_seconds), datetime.now(UTC))


def slot_deadline_base(slot: datetime, run_type: str, deadline: timedelta,
                       now: datetime) -> datetime | None:
    """The reference time of a run's deadline alert, or None for no alert (pure; tested)."""
    if run_type.split(".")[-1].lower() == "backfill":
        return None
    if slot + deadline <= now:
        return None  # created after its deadline: a catch-up run, recorded late in the ledger
    return slot


async def on_deadline_missed(company: str, schedule: str, deadline: str, context: Any = None,
                             **_: Any) -> None:
    """The callback of DAGs serialized before alerts (ADR 0010) — kept so their stored deadline
    alerts still import in the triggerer: one line an analyst can act on."""
    run = (context or {}).get("dag_run", {}) if isinstance(context, dict) else {}
    log.warning("company=%s schedule=%s run=%s: deadline missed (slot + %s); the export was not "
                "delivered in time. Check the run's tasks and `exportctl runs --schedule %s`.",
                company, schedule, run.get("run_id", "?"), deadline, schedule)


def deadline_alert(schedule: Any, config_dir: str) -> DeadlineAlert:
    """A miss is announced through :class:`export_airflow.alerts.ExportAlertNotifier` (awaited
    in the triggerer): the exports team and the owner, once per run (ADR 0010)."""
    from export_airflow.alerts import ExportAlertNotifier, deadline_kwargs

    seconds = schedule.deadline.total_seconds()
    return DeadlineAlert(
        reference=OnTimeSlotDeadline(deadline_seconds=seconds),
        interval=schedule.deadline,
        callback=AsyncCallback(ExportAlertNotifier, kwargs=deadline_kwargs(schedule, config_dir)),
        name=f"delivered within {schedule.deadline} of the slot",
    )
