"""Why a period's Airflow task has not started (ADR 0013): the lines
``exportctl explain`` adds under a period whose DAG run has task instances waiting in Airflow
(``scheduled`` or ``queued``).

The case it exists for: under the CeleryExecutor a large channel's render goes to the
``exports_large`` queue (the cluster policy); if no worker consumes that queue the task stays
``queued`` for ever and nothing fails. Airflow's UI shows "queued", not why. Here::

    render: queued on exports_large, no worker listening (since 12:03:10 UTC, 4 min) —
    start one with: airflow celery worker --queues exports_large

:func:`waiting_lines` is pure: the waiting task instances (as the REST API lists them), what
the live Celery workers consume (:class:`Workers`, or why that is unknown) and ``now`` in, the
lines out. The REST and broker calls are in :mod:`export_lib.pipeline.waiting_sources`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from export_lib.config.timing import Timing

WAITING_STATES = ("scheduled", "queued")
DEFAULT_QUEUE = "default"  # AIRFLOW__OPERATORS__DEFAULT_QUEUE (deploy/cluster.env)


def _instant(value: Any) -> datetime | None:
    if not value:
        return None
    parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)


@dataclass(frozen=True)
class WaitingTask:
    """A task instance Airflow has not started: ``scheduled`` (waiting for a pool or
    concurrency slot before it is sent to the executor) or ``queued`` (sent to the executor,
    waiting for a worker). ``since``: when it entered that state."""

    dag_id: str
    run_id: str
    task_id: str
    state: str
    queue: str
    since: datetime | None = None
    pool: str | None = None
    map_index: int = -1
    logical_date: datetime | None = None
    run_after: datetime | None = None

    @classmethod
    def from_api(cls, ti: Mapping[str, Any]) -> WaitingTask:
        """From one entry of ``GET /api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances``."""
        state = str(ti.get("state") or "")
        since = ti.get("queued_when") if state == "queued" else ti.get("scheduled_when")
        index = ti.get("map_index")
        return cls(dag_id=ti["dag_id"], run_id=ti["dag_run_id"], task_id=ti["task_id"],
                   state=state, queue=ti.get("queue") or DEFAULT_QUEUE, since=_instant(since),
                   pool=ti.get("pool"), map_index=-1 if index is None else int(index),
                   logical_date=_instant(ti.get("logical_date")),
                   run_after=_instant(ti.get("run_after")))


@dataclass(frozen=True)
class Worker:
    """A live Celery worker as the broker's ``inspect`` saw it. ``busy`` / ``concurrency``:
    its running tasks and pool size, None when it did not say."""

    name: str
    queues: tuple[str, ...]
    concurrency: int | None = None
    busy: int | None = None

    def describe(self) -> str:
        if self.concurrency is None:
            return self.name
        busy = "?" if self.busy is None else str(self.busy)
        return f"{self.name} ({busy} of {self.concurrency} busy)"


@dataclass(frozen=True)
class Workers:
    """The live workers that answered the broker, or ``unknown``: why they were not asked."""

    workers: tuple[Worker, ...] = ()
    unknown: str | None = None

    @classmethod
    def not_celery(cls, executor: str) -> Workers:
        return cls(unknown=(
            f"the executor is {executor}, not Celery: it has no worker queues (a queued task "
            "waits for a free executor slot, AIRFLOW__CORE__PARALLELISM, and a running "
            "scheduler)"))

    @classmethod
    def no_broker(cls) -> Workers:
        return cls(unknown=(
            "no Celery broker known: set AIRFLOW__CELERY__BROKER_URL as the workers have it "
            "(make cluster: eval \"$(make -s env CLUSTER=1)\")"))

    @classmethod
    def unreachable(cls, broker: str, error: str) -> Workers:
        return cls(unknown=(f"the Celery broker {broker} is unreachable ({error}); is it up? "
                            "Workers cannot take tasks from it either"))

    def serving(self, queue: str) -> tuple[Worker, ...]:
        return tuple(w for w in self.workers if queue in w.queues)


def tasks_by_slot(tasks: Sequence[WaitingTask], timing: Timing,
                  slots: Sequence[datetime]) -> dict[datetime, list[WaitingTask]]:
    """The waiting tasks of each of ``slots``: a DAG run stands for the slot at or before its
    logical date (two runs at 06:00 and 06:01 are one slot), a manual trigger without a
    logical date for the slot at or before its ``run_after`` (as ResolveWindowOperator
    reads them). Tasks of other slots are dropped."""
    from export_lib.periods.slots import latest_slot_at_or_before

    wanted = set(slots)
    found: dict[datetime, list[WaitingTask]] = {}
    for task in tasks:
        moment = task.logical_date or task.run_after
        slot = latest_slot_at_or_before(timing, moment) if moment else None
        if slot in wanted:
            found.setdefault(slot, []).append(task)
    return found


def _age(since: datetime | None, now: datetime) -> str:
    if since is None:
        return ""
    seconds = max(int((now - since).total_seconds()), 0)
    span = f"{seconds} s" if seconds < 60 else f"{seconds // 60} min"
    if seconds >= 3600:
        span = f"{seconds // 3600} h {seconds % 3600 // 60} min"
    day = "" if since.date() == now.astimezone(UTC).date() else f"{since:%Y-%m-%d} "
    return f"since {day}{since:%H:%M:%S} UTC, {span}"


def _label(task: WaitingTask, runs: int) -> str:
    name = task.task_id + (f"[{task.map_index}]" if task.map_index >= 0 else "")
    return name + (f" (run {task.run_id})" if runs > 1 else "")


def task_line(task: WaitingTask, workers: Workers, *, now: datetime, runs: int = 1) -> str:
    """One waiting task in words (see the module docstring for the shape)."""
    label, age, queue = _label(task, runs), _age(task.since, now), task.queue
    fix = f"start one with: airflow celery worker --queues {queue}"
    serving = workers.serving(queue)
    if task.state == "queued":
        if workers.unknown is not None:
            return f"{label}: queued on {queue}" + (f" ({age})" if age else "")
        if not serving:
            return (f"{label}: queued on {queue}, no worker listening"
                    + (f" ({age})" if age else "") + f" — {fix}")
        return (f"{label}: queued on {queue}" + (f" ({age})" if age else "") + ", served by "
                + ", ".join(w.describe() for w in serving) + ": waiting for a free slot")
    head = (f"{label}: scheduled" + (f" ({age})" if age else "") + ", waiting for a free slot"
            + (f" in pool {task.pool}" if task.pool else "") + f" before it is queued on {queue}")
    if workers.unknown is None and not serving:
        return f"{head}; queue {queue}: no worker listening — {fix}"
    return head


def waiting_lines(tasks: Sequence[WaitingTask], workers: Workers, *,
                  now: datetime) -> list[str]:
    """The lines under a period's paragraph: a header naming the DAG, one line per waiting
    task (oldest first), and, when the workers could not be asked, one line saying why.
    Empty when nothing waits.

    :param tasks: the period's task instances in :data:`WAITING_STATES`.
    :param workers: the live workers and their queues (or why they are unknown).
    :param now: the current instant (aware).
    """
    if not tasks:
        return []
    runs = len({t.run_id for t in tasks})
    dags = sorted({t.dag_id for t in tasks})
    oldest_first = sorted(tasks, key=lambda t: (t.since or now, t.task_id, t.map_index))
    lines = [f"In Airflow (DAG {', '.join(dags)}):"]
    lines += [f"  {task_line(t, workers, now=now, runs=runs)}" for t in oldest_first]
    if workers.unknown is not None:
        lines.append(f"  workers not checked: {workers.unknown}.")
    return lines


__all__ = ["WAITING_STATES", "WaitingTask", "Worker", "Workers", "task_line", "tasks_by_slot",
           "waiting_lines"]
