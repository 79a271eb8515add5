"""The ``manual_export`` DAG: one-off exports from the Airflow UI trigger form (seed 000).

The form is built from the catalog (company and base export are enums); destinations can only be
narrowed to configured ones. The temporary config is validated in ``resolve_window`` — an invalid
request fails that task with the reason and registers nothing — captured on the run, and never
persisted as a schedule. Retries: 3, after 30 s, 2 min and 10 min (seed 002).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, task

from export_airflow.operators import (
    DeliverOperator,
    PublishOperator,
    RenderCsvOperator,
    ResolveWindowOperator,
)
from export_airflow.retry_policy import MANUAL_RETRY

DOC = """### Manual export

Exports one window of a configured export once, for the reason you give. Pick the company, the
export to base it on (its query, tenant scoping and destinations apply), the window
(`[start, end)`, ISO 8601; no offset means UTC), optionally explicit columns, the format and a
subset of the configured destinations. Nothing is saved as a schedule. The run, its artifact and
deliveries are in the ledger: `exportctl runs --company <id>`.
"""


def manual_params(catalog: Any | None) -> dict[str, Param]:
    """The trigger form. ``catalog=None`` (a worker running this DAG's task) builds the same
    fields without the enums: the form is rendered from the serialized DAG, and
    ``resolve_window`` re-checks company, export and destinations against the catalog."""
    if catalog is None:
        return _open_params()
    companies = sorted(catalog.companies)
    exports = sorted(s.schedule_id for s in catalog.schedules)
    destinations = sorted({d.id for s in catalog.schedules for d in s.destinations})
    return {
        "company": Param(companies[0] if companies else "", type="string", enum=companies or [""],
                         title="Company", description="Whose data to export."),
        "base_export": Param(exports[0] if exports else "", type="string", enum=exports or [""],
                             title="Based on export",
                             description="A configured export of that company (schedule id)."),
        "window_start": Param("", type="string", title="Window start",
                              description="ISO 8601, inclusive, e.g. 2026-11-01T00:00:00+01:00"),
        "window_end": Param("", type="string", title="Window end",
                            description="ISO 8601, exclusive; must be after the start."),
        "columns": Param([], type="array", items={"type": "string"}, title="Columns",
                         description="Leave empty for the export's configured columns."),
        "format": Param("csv", type="string", enum=["csv", "parquet"], title="Format"),
        "destinations": Param([], type="array",
                              items={"type": "string", "enum": destinations or [""]},
                              title="Destinations",
                              description="A subset of the export's configured destinations "
                                          "(empty: all of them)."),
        "reason": Param("", type="string", minLength=3, title="Reason",
                        description="Why this export is needed (kept in the run's history)."),
        "regenerate": Param(False, type="boolean", title="Regenerate",
                            description="Publish a new version even if this run has one."),
    }


@task(task_id="destinations")
def requested_destinations(resolved: dict[str, Any]) -> list[str]:
    """The validated destination ids of this manual run (deliver maps over them)."""
    return list(resolved["destinations"])


def _open_params() -> dict[str, Param]:
    text = {"type": "string"}
    return {
        "company": Param("", **text), "base_export": Param("", **text),
        "window_start": Param("", **text), "window_end": Param("", **text),
        "columns": Param([], type="array", items=text),
        "format": Param("csv", type="string", enum=["csv", "parquet"]),
        "destinations": Param([], type="array", items=text),
        "reason": Param("", type="string", minLength=3),
        "regenerate": Param(False, type="boolean"),
    }


def build_manual_dag(config_dir: Path) -> DAG:
    from airflow.sdk import get_parsing_context

    from export_lib.config.loader import load_catalog

    # A worker running one of this DAG's tasks needs no form: skip reading every company file
    # (500 companies: 0.8 s → 0.2 s). The dag-processor builds the full form.
    worker = get_parsing_context().dag_id == "manual_export"
    catalog = None if worker else load_catalog(config_dir)  # broken files: left out of the form
    with DAG(
        dag_id="manual_export",
        schedule=None,
        tags=["kind:manual"],
        doc_md=DOC,
        params=manual_params(catalog),
        default_args={"owner": "exports", "retries": 3, "retry_delay": timedelta(seconds=30),
                      "retry_policy": MANUAL_RETRY},
        max_active_runs=4,
    ) as dag:
        resolve = ResolveWindowOperator(task_id="resolve_window", schedule_id=None,
                                        config_dir=str(config_dir))
        rendered = RenderCsvOperator(task_id="render", run=resolve.output, pool="export_render",
                                     regenerate="{{ params.regenerate }}")
        published = PublishOperator(task_id="publish", rendered=rendered.output)
        DeliverOperator.partial(task_id="deliver", published=published.output,
                                pool="export_deliver",
                                config_dir=str(config_dir)).expand(
            destination_id=requested_destinations(resolve.output))
    return dag
