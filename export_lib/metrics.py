"""Metric names: ``export.<metric>`` per company and schedule, for StatsD.

The Airflow edge (``export_airflow.runtime.metrics``) emits them through Airflow's ``Stats``, so they go
wherever the deployment sends Airflow's own metrics (StatsD, Datadog, OpenTelemetry). Plain
StatsD has no tags, so the company and the schedule are also put *in the name*, as Airflow does
for its own per-DAG names (``ti.finish.<dag_id>.<task_id>.<state>``):
``export.render.rows.<company>.<schedule>``, where ``<schedule>`` is the schedule id without
the company and with ``/`` written ``__`` (``acme/google-ads/primary`` →
``export.render.rows.acme.google-ads__primary``), so every name has the same number of dots.
The same call passes ``company`` and ``schedule`` as tags, which the tag-aware backends
(InfluxDB-style StatsD tags, Datadog, OpenTelemetry) keep. ADR 0010.
"""

from __future__ import annotations

import re

PREFIX = "export"
# What we emit; the name is ``export.<metric>.<company>.<schedule>``.
METRICS = {
    "runs.expected": "counter: a scheduled slot's run was registered",
    "runs.completed": "counter: every destination of a run acknowledged (once per run)",
    "runs.late": "counter: a run completed after its deadline (once per run)",
    "runs.lateness_seconds": "gauge: how late the last late run completed",
    "runs.missed": "counter: a run missed its deadline (Airflow deadline alert)",
    "runs.at_risk": "counter: a run was not delivered at its risk point (Airflow deadline "
                    "alert at the risk point, ADR 0020; once per run with the alert)",
    "slots.skipped": "counter: missed slots recorded skipped by the recovery policy",
    "deliveries.unresolved": "gauge: the schedule's deliveries not acknowledged (all runs)",
    "render.rows": "counter: rows rendered",
    "render.bytes": "counter: bytes rendered",
    "render.rows_per_second": "gauge: rows per second of the last render",
    "render.seconds": "timer: the last render's duration (milliseconds on the wire)",
    "catchup.backlog": "gauge: missed slots a recovery handed to a backfill (0: none)",
    "alerts.sent": "counter: alerts sent",
    "alerts.suppressed": "counter: alerts not sent again (already sent for that run and reason)",
}
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
MAX_NAME = 250  # Airflow's validate_stat limit


def kind(metric: str) -> str:
    """``counter``, ``gauge`` or ``timer``: how the metric is sent (the start of its help)."""
    return METRICS[metric].split(":", 1)[0]


def name_part(value: str) -> str:
    """One dot-free segment: anything but letters, digits, ``_`` and ``-`` becomes ``_``."""
    return _UNSAFE.sub("_", value) or "_"


def schedule_part(company: str, schedule_id: str) -> str:
    """``acme/google-ads/primary`` → ``google-ads__primary`` (the company is its own part)."""
    rest = schedule_id.split("/", 1)[1] if schedule_id.startswith(f"{company}/") else schedule_id
    return "__".join(name_part(p) for p in rest.split("/"))


def metric_name(metric: str, company: str, schedule_id: str) -> str:
    """``export.<metric>.<company>.<schedule>``; ``KeyError`` for a metric not in METRICS."""
    if metric not in METRICS:
        raise KeyError(f"unknown export metric {metric!r}; known: {', '.join(sorted(METRICS))}")
    name = f"{PREFIX}.{metric}.{name_part(company)}.{schedule_part(company, schedule_id)}"
    return name[:MAX_NAME]


def metric_tags(company: str, schedule_id: str) -> dict[str, str]:
    return {"company": company, "schedule": schedule_id}
