"""The company page's two calls into Airflow itself: trigger a company's manual DAG (Export
now) and the REST client the gap audit's backfills go through (recover).

Export now triggers ``manual_export__<company>`` through Airflow's own REST handler
(``POST /api/v2/dags/{dag_id}/dagRuns``: ``trigger_dag_run``), called in this api-server process
with the logged-in user: the run is the user's (``triggering_user_name``), Airflow validates the
conf against the DAG's trigger-form params as it does for the form, and its own permission
check (create runs of that DAG) is asked of the auth manager first. So a run started here is
the run the trigger form would start with the same values.
"""

from __future__ import annotations

from typing import Any

from export_lib.errors import FormError
from export_lib.logfmt import get_logger

log = get_logger(__name__)


def trigger_manual(dag_id: str, conf: dict[str, Any], user: Any) -> str:
    """Trigger ``dag_id`` with ``conf`` as ``user``; its run id. FormError when Airflow refuses
    the conf (the field it names) or the DAG is not there; 403 when the user may not trigger
    it."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import (
        DagAccessEntity,
        DagDetails,
    )
    from fastapi import HTTPException

    from export_airflow.airflow_compat import trigger_dag_run_as

    if not get_auth_manager().is_authorized_dag(method="POST", access_entity=DagAccessEntity.RUN,
                                                details=DagDetails(id=dag_id), user=user):
        raise HTTPException(status_code=403, detail=f"{user.get_name()} may not trigger {dag_id}; "
                            "nothing was changed")
    note = f"Export now (company page): {conf.get('reason', '')}"[:1000]
    try:
        run_id = trigger_dag_run_as(user, dag_id, conf, note)
    except HTTPException as exc:
        if exc.status_code == 403:
            raise
        raise FormError("base_export", f"Airflow refused to start {dag_id}: {exc.detail}; "
                                       "nothing was started") from None
    log.warning("company=%s schedule=%s period=%s: manual export %s triggered by %s",
                conf.get("company"), conf.get("base_export"),
                f"{conf.get('window_start')}/{conf.get('window_end')}", run_id, user.get_name(),
                extra={"company": conf.get("company"), "schedule": conf.get("base_export")})
    return run_id


def airflow_api() -> tuple[Any, str | None]:
    """The REST client of the ``export_airflow_api`` connection, logged in; or None and why
    not (the gap audit then records skips and unrecoverable periods, requests no backfill)."""
    from export_airflow.airflow_compat import connection_from_secrets
    from export_lib.errors import ExportError
    from export_lib.pipeline.backfills import API_CONN_ID, AirflowApi

    try:
        conn = connection_from_secrets(API_CONN_ID)
        if conn is None:
            return None, (f"connection {API_CONN_ID!r} is not defined in Airflow: add it with "
                          f"'airflow connections add {API_CONN_ID} --conn-uri "
                          "http://USER:PASSWORD@HOST:PORT'")
        return AirflowApi.from_connection(conn).login(), None
    except ExportError as exc:
        return None, str(exc)
    except Exception as exc:  # noqa: BLE001 - Airflow's "connection not defined" and its kin
        return None, f"connection {API_CONN_ID!r}: {type(exc).__name__}: {exc}"
