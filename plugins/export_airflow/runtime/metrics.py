"""Our metrics through Airflow's ``Stats`` (via :mod:`export_airflow.airflow_compat`), so they go where
the deployment sends Airflow's own: ``[metrics] statsd_on`` / ``statsd_host`` / ``statsd_port``
(or Datadog, or OpenTelemetry). Names and tags: :mod:`export_lib.metrics` (ADR 0010).

A metric never fails an export: an error while emitting is logged and dropped.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from export_lib.logfmt import get_logger
from export_lib.metrics import metric_name, metric_tags

log = get_logger(__name__)


_initialised = False


def _stats() -> Any:
    """Airflow's stats functions, set up from ``[metrics]`` once in this process: a task process
    has set them up already, the triggerer's callback runner (deadline alerts) has not, and
    Airflow offers no public "is it set up?", so we do it once ourselves, the same way
    (setting it up again from the same settings only opens a new StatsD socket). A fork
    keeps both Airflow's settings and this flag."""
    from export_airflow.airflow_compat import initialise_stats, stats_module

    global _initialised
    if not _initialised:
        initialise_stats()
        _initialised = True
    return stats_module()


def emit(kind: str, metric: str, company: str, schedule_id: str, value: float = 1) -> None:
    """``kind``: ``incr`` (a counter, by ``value``), ``gauge`` or ``timing`` (seconds)."""
    try:
        stats = _stats()
        name, tags = metric_name(metric, company, schedule_id), metric_tags(company, schedule_id)
        if kind == "incr":
            stats.incr(name, count=int(value), tags=tags)
        elif kind == "gauge":
            stats.gauge(name, value, tags=tags)
        elif kind == "timing":
            stats.timing(name, timedelta(seconds=value), tags=tags)
        else:
            raise ValueError(f"unknown metric kind {kind!r}")
    except Exception as exc:  # noqa: BLE001 - metrics are best effort
        # Inside a task's run context the line also gets its run and period.
        log.warning("company=%s schedule=%s: metric %s not emitted: %s", company, schedule_id,
                    metric, exc, extra={"company": company, "schedule": schedule_id})


def render_metrics(company: str, schedule_id: str, rows: int, nbytes: int,
                   seconds: float) -> None:
    emit("incr", "render.rows", company, schedule_id, rows)
    emit("incr", "render.bytes", company, schedule_id, nbytes)
    emit("timing", "render.seconds", company, schedule_id, seconds)
    emit("gauge", "render.rows_per_second", company, schedule_id,
         round(rows / seconds, 1) if seconds > 0 else float(rows))


def delivery_metrics(ledger: Any, run_key: str, now: Any) -> None:
    """After a deliver task: the schedule's unresolved deliveries, and — once per run — the run
    completed (and late) when its last destination acknowledged."""
    from export_lib.views.run_metrics import completion, count_once, unresolved_deliveries

    company = schedule_id = "-"
    try:
        # From the ledger, not the key: a manual export's key is not slot-shaped.
        run = ledger.get_run(run_key)
        if run is None:
            return
        company, schedule_id = run.company, run.schedule_id
        emit("gauge", "deliveries.unresolved", company, schedule_id,
             unresolved_deliveries(ledger, schedule_id))
        done = completion(ledger, run_key)
        if done is None or not count_once(ledger, run_key, "completed", now):
            return
        emit("incr", "runs.completed", company, schedule_id)
        if done.late_by is not None:
            emit("incr", "runs.late", company, schedule_id)
            emit("gauge", "runs.lateness_seconds", company, schedule_id,
                 done.late_by.total_seconds())
    except Exception as exc:  # noqa: BLE001 - metrics are best effort
        log.warning("company=%s schedule=%s run=%s: delivery metrics not emitted: %s", company,
                    schedule_id, run_key, exc, extra={"run": run_key})
