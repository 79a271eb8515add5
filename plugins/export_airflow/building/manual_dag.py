"""The ``manual_export__<company>`` DAGs: one-off exports from the Airflow UI trigger form (seed
000), one DAG per company so Airflow's own DAG permissions decide who may export what.

Each company's loader (``dags/company_<id>.py``) registers its manual DAG next to its scheduled
ones, built from the same catalog: the form lists only that company's exports and destinations,
and ``resolve_window`` refuses a request naming another company (the REST API lets a caller
send any ``conf``). The temporary config is validated in ``resolve_window`` — an invalid request
fails that task with the reason and registers nothing — captured on the run with the triggering
user, and never persisted as a schedule. Retries: 3, after 30 s, 2 min and 10 min (seed 002).

Its own lane (ADR 0018): every task runs in the ``export_manual`` pool, which scheduled and
catch-up work never use, at :data:`~export_airflow.deploy.cluster_policy.MANUAL_PRIORITY`, so a free
executor slot goes to it first; under Celery the cluster policy also routes it to the
``exports_manual`` queue, served by a worker of its own. A catch-up backlog queues behind it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param

from export_airflow.access import access_control, quiet_access_control
from export_airflow.alerts import manual_failure_notifier
from export_airflow.building.params import param, with_form
from export_airflow.building.retry_policy import MANUAL_RETRY
from export_airflow.deploy.cluster_policy import MANUAL_POOL, MANUAL_PRIORITY
from export_airflow.tasks.limits import task_timeout
from export_airflow.tasks.operators import (
    SUMMARY,
    DeliverOperator,
    PublishOperator,
    RenderCsvOperator,
    ResolveWindowOperator,
)
from export_lib.formats import installed_formats

DOC = """### Manual export of company `{company}`

Exports one window of a configured export once, for the reason you give. Pick the company, the
export to base it on (its query, tenant scoping and destinations apply), the window (`[start,
end)`; the pickers read the UI's time zone, UTC unless changed at the bottom left), optionally
explicit columns, the format and a subset of the configured destinations. To pick a period in the
company's local time (yesterday, last week, last month, or any local start and end), use **Export
now** on the company's page instead (Browse → Export companies): it converts the period and
triggers this DAG. Nothing is saved as a schedule. The run, its artifact and deliveries are in the
ledger: `exportctl runs --company {company}`. Who triggered the run is recorded on it."""


def manual_params(company: str, schedules: Sequence[Any] | None) -> dict[str, Param]:
    """The trigger form of ``company``'s manual DAG. ``schedules=None`` (a worker running this
    DAG's task) builds the same fields without the enums: the form is rendered from the
    serialized DAG, and ``resolve_window`` re-checks export and destinations against the
    catalog."""
    if schedules is None:
        return _open_params(company)
    exports = sorted(s.schedule_id for s in schedules)
    destinations = sorted({d.id for s in schedules for d in s.destinations})
    columns = sorted({c for s in schedules for c in s.query.columns})
    return {
        "company": param(company, type="string", enum=[company], title="Company",
                         description="This DAG exports this company's data only."),
        "base_export": param(exports[0] if exports else "", type="string", enum=exports or [""],
                             title="Based on export",
                             description="A configured export of this company (schedule id)."),
        # Date-time pickers in the form, no default: the API and the form refuse a run
        # without both, or with a value that is not an RFC 3339 date-time (with its offset),
        # before the run exists. resolve_window checks the rest (order, span, retention).
        "window_start": param(type="string", format="date-time", title="Window start",
                              description="Inclusive, in the UI's time zone (UTC unless "
                                          "changed at the bottom left of the page); for a "
                                          "company-local period use Export now on Browse → "
                                          "Export companies"),
        "window_end": param(type="string", format="date-time", title="Window end",
                            description="Exclusive, in the same time zone; after the start."),
        "columns": param([], type="array", items={"type": "string", "enum": columns or [""]},
                         uniqueItems=True, title="Columns",
                         description="Leave empty for the export's configured columns; else a "
                                     "subset of the base export's (checked when the run starts)."),
        "format": param("csv", type="string", enum=format_names(), title="Format",
                        description="The export's compression is kept (none for parquet)."),
        "destinations": param([], type="array",
                              items={"type": "string", "enum": destinations or [""]},
                              title="Destinations",
                              description="A subset of the export's configured destinations "
                                          "(empty: all of them)."),
        "reason": param("", type="string", minLength=3, title="Reason",
                        description="Why this export is needed (kept in the run's history)."),
        "regenerate": param(False, type="boolean", title="Regenerate",
                            description="Publish a new version even if this run has one."),
    }


@functools.cache
def format_names() -> list[str]:
    """The built-in and installed output formats (a gap audit may ask for a plugin's): the
    entry points are scanned once per process, not at every parse of every manual DAG."""
    return installed_formats()


def _open_params(company: str) -> dict[str, Param]:
    text = {"type": "string"}
    return {
        "company": param(company, type="string", enum=[company]),
        "base_export": param("", **text),
        "window_start": param("", **text), "window_end": param("", **text),
        "columns": param([], type="array", items=text),
        "format": param("csv", type="string", enum=format_names()),
        "destinations": param([], type="array", items=text),
        "reason": param("", type="string", minLength=3),
        "regenerate": param(False, type="boolean"),
    }


def manual_dag_id(company: str) -> str:
    return f"manual_export__{company}"


def build_manual_dag(config_dir: Path, company: str, schedules: Sequence[Any] | None) -> DAG:
    """``company``'s manual DAG; ``schedules=None`` when a worker builds it to run a task."""
    with quiet_access_control(), DAG(
        dag_id=manual_dag_id(company),
        schedule=None,
        tags=[f"company:{company}", "kind:manual"],
        # Only the company's operators (and admins) may trigger it (ADR 0023).
        access_control=access_control(company),
        doc_md=DOC.format(company=company),
        default_args={"owner": "exports", "retries": 3, "retry_delay": timedelta(seconds=30),
                      # The lane: every task, the mapped deliveries included (module docstring).
                      "pool": MANUAL_POOL, "priority_weight": MANUAL_PRIORITY,
                      "weight_rule": "absolute"},
        max_active_runs=4,
    ) as dag:
        # Objects go to each task, not default_args: Airflow stores a callable there as its
        # class's source code, serialised on every parse (issue 25 item 3).
        task_args = {"retry_policy": MANUAL_RETRY,
                     "on_failure_callback": manual_failure_notifier(company, str(config_dir))}
        resolve = ResolveWindowOperator(task_id="resolve_window", schedule_id=None,
                                        config_dir=str(config_dir), company=company, **task_args)
        rendered = RenderCsvOperator(task_id="render", run=resolve.output,
                                     regenerate="{{ params.regenerate }}",
                                     config_dir=str(config_dir), **task_args)
        published = PublishOperator(task_id="publish", rendered=rendered.output, **task_args)
        DeliverOperator.partial(task_id="deliver", published=published.output[SUMMARY],
                                execution_timeout=task_timeout("deliver"),
                                config_dir=str(config_dir), **task_args).expand(
            destination_id=published.output)  # the validated requested ones
    with_form(dag, manual_params(company, schedules))
    return dag
