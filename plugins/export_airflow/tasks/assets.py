"""Airflow Assets for published exports (ADR 0024): what a downstream DAG schedules on.

Each export schedule is one asset (``export:<schedule id>``, URI = the schedule's folder in the
artifact store: :mod:`export_lib.pipeline.asset_events`). ``publish`` declares an *alias* as its
outlet, not the asset: Airflow emits an event for every declared asset of a successful task,
and a re-run that publishes nothing new must emit none. Through the alias, publish adds the
event only when a new artifact version was published, with the manifest's fields as its extra.
The restatement DAG announces corrections through an alias of its own (extra ``correction``).
Manual exports (ad-hoc windows, not periods of the schedule) announce nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, Asset, AssetAlias, task

from export_airflow.access import access_control, quiet_access_control
from export_airflow.tasks.limits import task_timeout
from export_lib.logfmt import get_logger
from export_lib.pipeline.asset_events import (
    AssetEvent,
    schedule_asset_name,
    schedule_asset_uri,
)

log = get_logger(__name__)

def publish_alias(schedule_id: str) -> str:
    """The alias a schedule's ``publish`` task declares as its outlet."""
    return f"export-alias:{schedule_id}"


def corrections_alias(company: str) -> str:
    """The alias of the company's restatement DAG (it corrects any of the company's schedules)."""
    return f"export-alias:{company}/corrections"


def schedule_asset(company: str, schedule_id: str) -> Asset:
    """The asset a consumer schedules on (the same name and URI publish's events carry)."""
    return Asset(name=schedule_asset_name(schedule_id),
                 uri=schedule_asset_uri(company, schedule_id))


def announce(context: Any, alias: str, event: AssetEvent | None) -> None:
    """Add ``event`` to the task's alias outlet (nothing when publish made no new version)."""
    if event is None:
        log.info("no new artifact version: no event on asset %s", alias.split(":", 1)[-1])
        return
    context["outlet_events"][AssetAlias(alias)].add(Asset(name=event.name, uri=event.uri),
                                                     extra=event.extra)
    log.info("announced v%s of period %s on asset %s (%s)", event.extra["version"],
             event.extra["period"], event.name, event.uri)


def consumer_dag(company: str, schedule_id: str, dag_id: str | None = None,
                 schema_major: int | None = None) -> DAG:
    """An example downstream job (``consumer__<schedule id with __>`` unless ``dag_id``): runs
    on each new artifact version of ``schedule_id`` and checks the file it was told about
    (sha256 and size against the event) before "loading" it. Events that arrive while a run is
    already queued reach that run together (Airflow's asset scheduling): ``load`` takes each
    once. ``dags/example_asset_consumer.py`` follows acme/daily-spend in ``make run``.
    ``schema_major``: the schema major version the job reads (ADR 0025); a file of another
    is refused (None: any, a schema change is logged)."""
    dag_id = dag_id or f"consumer__{schedule_id.replace('/', '__')}"
    with quiet_access_control():
        dag = DAG(dag_id=dag_id, schedule=[schedule_asset(company, schedule_id)],
                  start_date=datetime(2020, 1, 1), catchup=False, max_active_runs=1,
                  tags=[f"company:{company}", "kind:consumer", "example"],
                  access_control=access_control(company),
                  doc_md=f"Example consumer of `{schedule_id}`: scheduled on its asset "
                         f"`{schedule_asset_name(schedule_id)}`; one run per published version.")
    with dag:
        # Reading the file to check it is publish's validation again: publish's time limit.
        @task(task_id="load", execution_timeout=task_timeout("publish"))
        def load(triggering_asset_events: Any = None) -> list[dict[str, Any]]:
            from export_airflow.runtime.connections import airflow_resolver
            from export_lib.pipeline.asset_events import check_announced
            from export_lib.storage.stores import open_store

            store = open_store(resolver=airflow_resolver())
            loaded: dict[tuple[str, int], dict[str, Any]] = {}
            # Airflow lists an event under more than one key of the mapping (the asset, its
            # name, its URI): one artifact version is loaded once.
            for events in (triggering_asset_events or {}).values():
                for event in events:
                    extra = dict(event.extra)
                    key = (extra["run_key"], extra["version"])
                    if key not in loaded:
                        loaded[key] = check_announced(store, extra, schema_major=schema_major)
                        if extra.get("schema_change"):
                            log.warning("%s v%s of %s has a changed schema (%s, schema major "
                                        "%s): %s", extra["period"], extra["version"],
                                        extra["schedule"], extra["schema_change"],
                                        extra.get("schema_major"),
                                        "; ".join(extra.get("schema_diff") or ()))
                        log.info("loaded %s v%s of %s (%s rows) from %s", extra["period"],
                                 extra["version"], extra["schedule"], extra["rows"],
                                 extra["artifact_uri"])
            return list(loaded.values())

        load()
    return dag
