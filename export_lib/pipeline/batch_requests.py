"""Asking Airflow for batched recovery runs (ADR 0032): plain REST, no Airflow import.

Each batch is one run of the company's ``recovery_batch__<company>`` DAG whose ``conf`` lists
the schedule and the slots it exports (oldest first) and whose note says the same in words, so
Airflow's run list shows which periods each batch covers. The run id is derived from the
schedule and the batch's first and last slot: asking twice for the same batch creates it once
(HTTP 409 is "already requested"). Slots of a batch that is queued or running are in flight:
the next recovery leaves them to it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from export_lib.errors import OrchestratorError
from export_lib.pipeline.backfills import ACTIVE_RUN_STATES, AirflowApi

BATCH_PREFIX = "recovery_batch__"
BATCH_TASK = "export_periods"
_RUN_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_.~:+-]")


def batch_dag_id(company: str) -> str:
    """``recovery_batch__acme``: the company's batched-recovery DAG."""
    return BATCH_PREFIX + company


def _instant(slot: datetime) -> str:
    return slot.astimezone(UTC).strftime("%Y-%m-%dT%H:%MZ")


def batch_run_id(schedule_id: str, slots: Sequence[datetime]) -> str:
    """``batch__acme_daily-spend__2026-03-01T06:00Z__2026-03-28T05:00Z``."""
    return (f"batch__{_RUN_ID_UNSAFE.sub('_', schedule_id)}__{_instant(min(slots))}"
            f"__{_instant(max(slots))}")


def batch_conf(schedule_id: str, slots: Sequence[datetime]) -> dict[str, Any]:
    """What a batch run's ``conf`` says: the schedule and its slots, oldest first."""
    return {"schedule_id": schedule_id, "periods": [_instant(s) for s in sorted(slots)]}


def batch_note(schedule_id: str, slots: Sequence[datetime]) -> str:
    ordered = sorted(slots)
    return (f"Batched recovery of {schedule_id}: {len(ordered)} period(s), slots "
            f"{_instant(ordered[0])} .. {_instant(ordered[-1])} (each listed in conf.periods; "
            "each period has its own run in Browse → Export runs)")


def parse_periods(conf: dict[str, Any], where: str) -> tuple[str, list[datetime]]:
    """The schedule id and slots of a batch run's ``conf``; ConfigError naming the field."""
    from export_lib.errors import ConfigError

    schedule_id, periods = conf.get("schedule_id"), conf.get("periods")
    if not isinstance(schedule_id, str) or "/" not in schedule_id:
        raise ConfigError(f"{where}: conf.schedule_id is {schedule_id!r}; give the export's id, "
                          "e.g. 'acme/daily-spend'")
    if not isinstance(periods, list) or not periods:
        raise ConfigError(f"{where}: conf.periods is {periods!r}; give a list of slots such as "
                          "['2026-03-28T05:00Z']")
    slots = []
    for i, text in enumerate(periods):
        try:
            slot = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
        except ValueError:
            slot = None
        if slot is None or slot.tzinfo is None:
            raise ConfigError(f"{where}: conf.periods[{i}] is {text!r}; write a UTC slot such "
                              "as '2026-03-28T05:00Z'")
        slots.append(slot.astimezone(UTC))
    return schedule_id, slots


def batch_slots_in_flight(api: AirflowApi, company: str, schedule_id: str) -> set[datetime]:
    """Slots of ``schedule_id`` in a queued or running batch run of the company."""
    runs = api.pages(f"/api/v2/dags/{batch_dag_id(company)}/dagRuns", "dag_runs",
                     [("state", s) for s in ACTIVE_RUN_STATES])
    found: set[datetime] = set()
    for run in runs:
        conf = run.get("conf") or {}
        if conf.get("schedule_id") == schedule_id:
            _, slots = parse_periods(conf, f"batch run {run.get('dag_run_id')}")
            found.update(slots)
    return found


def request_batches(api: AirflowApi, company: str, schedule_id: str,
                    batches: Sequence[Sequence[datetime]]) -> list[tuple[str, str]]:
    """Trigger one batch run per batch, oldest first: (run id, ``requested`` / ``already
    requested`` / ``deferred: …``) each."""
    dag_id = batch_dag_id(company)
    outcomes = []
    for slots in batches:
        run_id = batch_run_id(schedule_id, slots)
        status, body = api.call("POST", f"/api/v2/dags/{dag_id}/dagRuns", {
            "dag_run_id": run_id, "logical_date": None, "conf": batch_conf(schedule_id, slots),
            "note": batch_note(schedule_id, slots)})
        if status in (200, 201):
            outcomes.append((run_id, "requested"))
        elif status == 409:
            outcomes.append((run_id, "already requested"))
        elif status == 404:
            outcomes.append((run_id, f"deferred: Airflow does not know {dag_id} (not parsed "
                                     "yet, or the company file has errors)"))
        else:
            raise OrchestratorError(f"trigger of {dag_id} run {run_id}: HTTP {status}: {body}")
    return outcomes


__all__ = ["BATCH_PREFIX", "BATCH_TASK", "batch_conf", "batch_dag_id", "batch_note",
           "batch_run_id", "batch_slots_in_flight", "parse_periods", "request_batches"]
