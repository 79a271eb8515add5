"""Deadline alerts (Airflow 3.3's SLA replacement) measured from the export slot.

A run's deadline is ``slot + schedule deadline``; misses show in Browse → Deadlines. Catch-up and
backfill runs are created after their deadline has already passed: alerting for each would flood
the page with misses nobody can act on, so :class:`OnTimeSlotDeadline` creates no deadline for a
run whose deadline was already past when the run was created (the ledger still records the run's
deadline and lateness). See docs/adr/0003-orchestration-deadlines-catch-up.md.

Airflow's Deadlines page says "Missed" for every deadline that fired, the risk point's early
warning included (it cannot be hidden or labelled otherwise), so that alert's name says it is
not a miss (ADR 0030); Browse → Export obligations and ``exportctl runs --missed`` count misses.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

# In airflow.sdk.__all__ (the 1.3 type stub lags behind and lacks some of them).
from airflow.sdk import AsyncCallback, BaseDeadlineReference, DeadlineAlert, deadline_reference

from export_lib.logfmt import get_logger

log = get_logger(__name__)
REFERENCE_TYPE_FIELD = "reference_type"



def _dag_run(session: Any, kwargs: dict[str, Any]) -> Any:
    """The run a deadline is evaluated for (logical date and run type), or None for a run
    without a logical date (a manual run may have none)."""
    from sqlalchemy import select

    from export_airflow.airflow_compat import dag_run_model

    run = dag_run_model()
    row = session.execute(
        select(run.logical_date, run.run_type)
        .where(run.dag_id == kwargs["dag_id"], run.run_id == kwargs["run_id"])
    ).first()
    return None if row is None or row.logical_date is None else row


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
        row = _dag_run(session, kwargs)
        if row is None:
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
    # An Airflow run id, not our run key: the run field stays unset (no period either).
    log.warning("company=%s schedule=%s run=%s: deadline missed (slot + %s); the export was not "
                "delivered in time. Check the run's tasks and `exportctl runs --schedule %s`.",
                company, schedule, run.get("run_id", "?"), deadline, schedule,
                extra={"company": company, "schedule": schedule})


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


@deadline_reference
@dataclass
class AtRiskDeadline(BaseDeadlineReference):
    """The run's risk point (ADR 0020): ``slot + risk offset``, evaluated by the scheduler when
    it creates the run — ``at_risk.after`` if the export sets it, else half the deadline or the
    schedule's median delivery time from the ledger if longer (never after the deadline). Like
    :class:`OnTimeSlotDeadline`, no deadline for a backfill or a run created after its deadline;
    a run created after its risk point (the scheduler was down) is at risk at once.

    :param deadline_seconds: the schedule's deadline after the slot
    :param after: ``at_risk.after`` as written (``"50%"``, ``"45m"``), or None (automatic)
    :param schedule_id: whose median delivery time the automatic risk point reads
    """

    deadline_seconds: float = 0.0
    after: str | None = None
    schedule_id: str = ""
    required_kwargs = frozenset({"dag_id", "run_id"})

    def serialize_reference(self) -> dict[str, Any]:
        return {REFERENCE_TYPE_FIELD: self.reference_name, "deadline_seconds": self.deadline_seconds,
                "after": self.after, "schedule_id": self.schedule_id}

    @classmethod
    def deserialize_reference(cls, reference_data: dict[str, Any]) -> AtRiskDeadline:
        return cls(deadline_seconds=float(reference_data.get("deadline_seconds", 0.0)),
                   after=reference_data.get("after"),
                   schedule_id=str(reference_data.get("schedule_id", "")))

    def _evaluate_with(self, *, session: Any, **kwargs: Any) -> datetime | None:
        row = _dag_run(session, kwargs)
        if row is None:
            return None
        now = datetime.now(UTC)
        deadline = timedelta(seconds=self.deadline_seconds)
        if slot_deadline_base(row.logical_date, str(row.run_type), deadline, now) is None:
            return None
        return row.logical_date + self.offset(now)

    def offset(self, now: datetime) -> timedelta:
        """The risk offset; the ledger is read only for the automatic point (and an unreachable
        ledger leaves it at half the deadline)."""
        from export_lib.config.risk import AtRisk
        from export_lib.views.risk import RiskRule

        deadline = timedelta(seconds=self.deadline_seconds)
        if self.after:
            return RiskRule(AtRisk(after=self.after)).offset(deadline)
        return RiskRule(median=_median(self.schedule_id, now)).offset(deadline)


# The scheduler's risk reads in this process: a dead ledger is not asked again for a minute.
_RISK_READS: Any = None


def _median(schedule_id: str, now: datetime) -> timedelta | None:
    """The schedule's median delivery time, or None (half the deadline) when the ledger has
    none or does not answer within its connect timeout: the scheduler waits no longer."""
    global _RISK_READS
    from export_airflow.runtime.ledger import callback_ledger_url, ledger_at
    from export_lib import settings
    from export_lib.errors import ExportError
    from export_lib.ledger.bounded import FailureMemory, bounded_read
    from export_lib.views.risk import median_delivery

    # A schedule's line, no run's: the words come from the fields (logfmt).
    fields = {"company": schedule_id.split("/", 1)[0], "schedule": schedule_id}
    if _RISK_READS is None:
        _RISK_READS = FailureMemory()
    try:
        # ledger_at(): one per process, kept (not disposed after each read)
        return bounded_read(callback_ledger_url, ledger_at,
                            lambda conn: median_delivery(conn, [schedule_id], now=now)
                            .get(schedule_id),
                            seconds=settings.ledger_connect_timeout(), memory=_RISK_READS)
    except ExportError as exc:
        log.warning("%s; its risk point is half the deadline", exc, extra=fields)
        return None
    except Exception as exc:  # noqa: BLE001 - a risk point never stops the scheduler
        log.warning("median delivery time not read (%s: %s); its risk point is half the "
                    "deadline", type(exc).__name__, exc, extra=fields)
        return None


def risk_alert(schedule: Any, config_dir: str) -> DeadlineAlert | None:
    """The at-risk alert (ADR 0020), or None when the export turned it off
    (``at_risk: {alert: false}``): announced once per run through the same notifier."""
    from export_airflow.alerts import ExportAlertNotifier, deadline_kwargs

    at_risk = schedule.policies.at_risk
    if at_risk is not None and not at_risk.alert:
        return None
    after = at_risk.after if at_risk is not None else None
    return DeadlineAlert(
        reference=AtRiskDeadline(deadline_seconds=schedule.deadline.total_seconds(), after=after,
                                 schedule_id=schedule.schedule_id),
        interval=timedelta(0),
        callback=AsyncCallback(ExportAlertNotifier, kwargs={
            **deadline_kwargs(schedule, config_dir), "reason": "at_risk",
            "risk": after or "automatic"}),
        name=risk_alert_name(after),
    )


def risk_alert_name(after: str | None) -> str:
    """The at-risk alert's name, the "Alert Name" beside Airflow's red "Missed" on Browse →
    Deadlines: an early warning, not a miss (ADR 0030)."""
    point = ("half the deadline (or the median delivery time)" if after is None
             else f"{after} of the deadline" if after.endswith("%") else f"{after} after the slot")
    return f"early warning (at risk), not a miss: not yet delivered at {point}"


def deadline_alerts(schedule: Any, config_dir: str) -> list[DeadlineAlert]:
    """The DAG's ``deadline=[...]``: the missed deadline, and the risk point unless off.

    None under ``airflow dags test``: Airflow 3.3.2's ``DAG.test()`` hands its in-memory DAG to
    ``DagRun.update_state``, which then looks the encoded alerts up as ids and crashes after a
    successful run ("'dict' object has no attribute 'hex'", exit 1: apache/airflow#73428, fix
    proposed in #73430). ``dags test`` runs no deadline processing anyway; the scheduler, the
    api-server and the dag-processor never take this branch.
    """
    if under_dags_test():
        return []
    risk = risk_alert(schedule, config_dir)
    return [deadline_alert(schedule, config_dir), *([risk] if risk is not None else [])]


def under_dags_test(argv: list[str] | None = None) -> bool:
    """Whether this process is the ``airflow dags test`` command (it parses the DAG file
    in-process, so its arguments are this process's)."""
    args = [a for a in (sys.argv if argv is None else argv)[1:] if not a.startswith("-")]
    return args[:2] == ["dags", "test"]
