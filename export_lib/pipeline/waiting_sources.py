"""Where :mod:`export_lib.pipeline.waiting` gets its facts (ADR 0013): the waiting task
instances of a schedule's slots from Airflow's REST API, and the live Celery workers' queues
from the broker (``celery``'s ``inspect``, the same broadcast ``celery inspect active_queues``
sends). No Airflow import: the broker URL is ``AIRFLOW__CELERY__BROKER_URL`` as the workers
have it (``eval "$(make -s env CLUSTER=1)"`` sets it), the executor ``AIRFLOW__CORE__EXECUTOR``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from export_lib import settings
from export_lib.periods.slots import next_slots
from export_lib.pipeline.backfills import AirflowApi, api_instant
from export_lib.pipeline.waiting import (
    WAITING_STATES,
    WaitingTask,
    Worker,
    Workers,
    tasks_by_slot,
    waiting_lines,
)

if TYPE_CHECKING:
    from celery import Celery

    from export_lib.config.models import Schedule

INSPECT_TIMEOUT_S = 2.0  # how long the broker broadcast waits for workers' replies
BROKER_CONNECT_TIMEOUT_S = 3.0


def _task_instances(api: AirflowApi, dag_id: str, params: list[tuple[str, str]]) -> list[dict]:
    return api.pages(f"/api/v2/dags/{dag_id}/dagRuns/~/taskInstances", "task_instances",
                     [*params, *(("state", s) for s in WAITING_STATES)])


def waiting_tasks(api: AirflowApi, dag_id: str, start: datetime, end: datetime) -> list[WaitingTask]:
    """Task instances of ``dag_id`` in :data:`WAITING_STATES` whose DAG run stands for a slot
    in ``[start, end)``: its logical date is there, or (a manual trigger without one, which
    stands for the latest slot) its ``run_after`` is."""
    window = [("_gte", api_instant(start)), ("_lt", api_instant(end))]
    dated = _task_instances(api, dag_id, [(f"logical_date{op}", at) for op, at in window])
    undated = [ti for ti in _task_instances(api, dag_id, [(f"run_after{op}", at)
                                                          for op, at in window])
               if not ti.get("logical_date")]
    return [WaitingTask.from_api(ti) for ti in dated + undated]


def slot_waits(api: AirflowApi, schedule: Schedule, slots: Sequence[datetime],
               workers: Callable[[list[str]], Workers], *,
               now: datetime) -> dict[datetime, list[str]]:
    """``slot -> lines`` for the slots of ``schedule`` with waiting tasks. ``workers``: a
    callable returning :class:`Workers`, called only when something waits (it asks the
    broker, which takes :data:`INSPECT_TIMEOUT_S`)."""
    if not slots:
        return {}
    after = next_slots(schedule.timing, max(slots) + timedelta(microseconds=1), 1)
    end = after[0] if after else now
    by_slot = tasks_by_slot(waiting_tasks(api, schedule.dag_id, min(slots), end),
                            schedule.timing, slots)
    if not by_slot:
        return {}
    seen = workers([t.queue for tasks in by_slot.values() for t in tasks])
    return {slot: waiting_lines(tasks, seen, now=now) for slot, tasks in by_slot.items()}


def _inspect(app: Celery, queues: set[str]) -> Workers:
    replies = app.control.inspect(timeout=INSPECT_TIMEOUT_S).active_queues() or {}
    consumed = {name: tuple(q["name"] for q in qs or ()) for name, qs in replies.items()}
    serving = sorted(name for name, qs in consumed.items() if queues & set(qs))
    stats: Mapping[str, Any] = {}
    active: Mapping[str, Any] = {}
    if serving:  # only those workers, and no longer than it takes them to answer
        ask = app.control.inspect(destination=serving, timeout=INSPECT_TIMEOUT_S,
                                  limit=len(serving))
        stats, active = ask.stats() or {}, ask.active() or {}
    return Workers(tuple(
        Worker(name, qs, ((stats.get(name) or {}).get("pool") or {}).get("max-concurrency"),
               len(active[name]) if name in active else None)
        for name, qs in sorted(consumed.items())))


def celery_workers(queues: Sequence[str], environ: Mapping[str, str] | None = None) -> Workers:
    """The live Celery workers and the queues they consume, as the broker's ``inspect`` sees
    them; when that cannot be known, :class:`Workers` with ``unknown`` saying why (the
    executor is not Celery, no broker URL, the broker is unreachable). The executor and the
    broker URL are this process's (``environ``: another mapping to read them from)."""
    executor = settings.executor(environ)
    broker = settings.celery_broker_url(environ)
    if executor and "celery" not in executor.lower():
        return Workers.not_celery(executor)
    if not broker:
        return Workers.no_broker()
    try:
        from celery import Celery
        from kombu.utils.url import maybe_sanitize_url
    except ImportError:
        return Workers(unknown="the celery package is not installed here (pip install celery)")
    shown = maybe_sanitize_url(broker)
    app = Celery("exportctl-explain", broker=broker, set_as_current=False)
    app.conf.update(broker_connection_timeout=BROKER_CONNECT_TIMEOUT_S,
                    broker_connection_retry=False, broker_connection_max_retries=0,
                    broker_transport_options={"max_retries": 0,
                                              "socket_connect_timeout": BROKER_CONNECT_TIMEOUT_S,
                                              "socket_timeout": BROKER_CONNECT_TIMEOUT_S})
    try:
        return _inspect(app, set(queues))
    except Exception as exc:  # noqa: BLE001 - any broker failure is one line, never a traceback
        return Workers.unreachable(shown, f"{type(exc).__name__}: {exc}")
    finally:
        app.close()


__all__ = ["celery_workers", "slot_waits", "waiting_tasks"]
