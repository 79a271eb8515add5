"""Every Airflow name we use that is not part of Airflow's public interface, in one place.

Airflow's public interface (its "Public Interface for Airflow 3.0+" page and the Task SDK
reference) is ``airflow.sdk`` and the documented extension points: timetables, plugins,
listeners, secrets backends, auth managers, providers' hooks, ``airflow.exceptions``,
``airflow.configuration.conf``. What follows has no public path in Airflow 3.3, so a minor
release may move or change it. Everything else in ``plugins/`` imports public paths only:
ruff's banned-api rule (``ruff.toml``) fails on an internal import anywhere but here.

``TESTED_AIRFLOW`` is the minor version these were checked against;
``tests/dags/test_airflow_compat.py`` fails on any other, naming what to re-check. Upgrading
Airflow: run that test, re-read each function below against the new release, then move
``TESTED_AIRFLOW``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

TESTED_AIRFLOW = "3.3"

# What each function leans on, for the version test's message.
INTERNALS = {
    "stats_module / initialise_stats": "airflow.sdk.observability.stats (a re-export of "
    "airflow.sdk._shared...metrics.stats) and airflow.sdk.observability.metrics.stats_utils."
    "get_stats_factory: Airflow's own task runner initialises Stats this way",
    "dag_run_model": "airflow.models.DagRun (a custom deadline reference's _evaluate_with "
    "runs in the scheduler with a session; Airflow's own references query it the same way)",
    "connection_from_secrets": "airflow.models.connection.Connection.get_connection_from_secrets "
    "(server processes: scheduler, api-server, where the Task SDK's lookup has no supervisor)",
    "get_listener_manager": "airflow.sdk.listener.get_listener_manager (preload only)",
    "serialize_dag": "airflow.serialization.serialized_objects.DagSerialization.to_dict "
    "(preload only)",
    "trigger_dag_run_as": "airflow.api_fastapi.core_api.routes.public.dag_run.trigger_dag_run, "
    "its TriggerDAGRunPostBody, create_dag_bag and airflow.utils.session.create_session",
    "is_simple_auth_manager": "airflow.api_fastapi.auth.managers.simple.SimpleAuthManager",
    "fab_application_builder": "airflow.providers.fab.auth_manager.cli_commands.utils."
    "get_application_builder",
    "postgres_hook_uses_psycopg3": "airflow.providers.postgres.hooks.postgres.USE_PSYCOPG3",
    "get_user_dependency": "airflow.api_fastapi.core_api.security.GetUserDep (the dependency "
    "Airflow's own API routes resolve the signed-in user with; plugin apps are not "
    "authenticated by Airflow, so our pages use it)",
    "base_dag_bundle": "airflow.dag_processing.bundles.base.BaseDagBundle (the class a DAG "
    "bundle of [dag_processor] dag_bundle_config_list subclasses; Airflow's docs name it, "
    "but not among the public interface)",
    "register_dag_bundles": "airflow.dag_processing.bundles.manager.DagBundlesManager."
    "sync_bundles_to_db (what every dag-processor and `airflow dags reserialize` run first)",
}


def stats_module() -> Any:
    """Airflow's ``Stats`` functions (``incr``, ``gauge``, ``timing``, ``initialize``)."""
    from airflow.sdk.observability import stats

    return stats


def initialise_stats() -> None:
    """Set ``Stats`` up from ``[metrics]`` exactly as Airflow's task runner and triggerer do
    (the triggerer's callback runner, where deadline alerts run, does not)."""
    from airflow.sdk import conf
    from airflow.sdk.observability.metrics import stats_utils

    stats_module().initialize(
        factory=stats_utils.get_stats_factory(),
        export_legacy_names=conf.getboolean("metrics", "legacy_names_on", fallback=False))


def dag_run_model() -> Any:
    """The metadata DB's ``DagRun`` model (scheduler side only)."""
    from airflow.models import DagRun

    return DagRun


def connection_from_secrets(conn_id: str) -> Any | None:
    """The connection ``conn_id`` from the server's secrets chain (environment, backends,
    metadata DB); None when it is not defined."""
    from airflow.exceptions import AirflowNotFoundException
    from airflow.models.connection import Connection

    try:
        return Connection.get_connection_from_secrets(conn_id)
    except AirflowNotFoundException:
        return None


def get_listener_manager() -> Any:
    from airflow.sdk.listener import get_listener_manager as manager

    return manager()


def serialize_dag(dag: Any) -> dict[str, Any]:
    from airflow.serialization.serialized_objects import DagSerialization

    return DagSerialization.to_dict(dag)


def trigger_dag_run_as(user: Any, dag_id: str, conf: dict[str, Any], note: str) -> str:
    """Trigger ``dag_id`` through Airflow's own ``POST /api/v2/dags/{dag_id}/dagRuns`` handler,
    in this api-server process, as ``user``; the run id. Airflow's ``HTTPException`` passes
    through (the caller asks the auth manager first)."""
    from airflow.api_fastapi.common.dagbag import create_dag_bag
    from airflow.api_fastapi.core_api.datamodels.dag_run import TriggerDAGRunPostBody
    from airflow.api_fastapi.core_api.routes.public.dag_run import trigger_dag_run
    from airflow.utils.session import create_session
    from starlette.requests import Request

    # The handler tells a UI trigger from an API one by the Referer: this is the UI.
    request = Request({"type": "http", "method": "POST", "headers": [
        (b"referer", b"export company page")]})
    body = TriggerDAGRunPostBody(logical_date=None, conf=conf, note=note)
    with create_session() as session:
        run = trigger_dag_run(dag_id=dag_id, body=body, dag_bag=create_dag_bag(), user=user,
                              session=session, request=request)
        return run.run_id


def is_simple_auth_manager(manager: object) -> bool:
    """Does ``manager`` authorise DAGs as SimpleAuthManager does (roles, not DAGs)?"""
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    return type(manager).is_authorized_dag is SimpleAuthManager.is_authorized_dag


@contextmanager
def fab_application_builder() -> Iterator[Any]:
    """The FAB auth manager's app builder (its security manager syncs roles and users)."""
    from airflow.providers.fab.auth_manager.cli_commands.utils import get_application_builder

    with get_application_builder() as appbuilder:
        yield appbuilder


def postgres_hook_uses_psycopg3() -> bool:
    """Does the installed postgres provider's ``PostgresHook.get_conn()`` return psycopg 3?"""
    from airflow.providers.postgres.hooks import postgres

    return bool(getattr(postgres, "USE_PSYCOPG3", False))



def base_dag_bundle() -> type:
    """The base class of a DAG bundle (export_airflow.deploy.bundles.DagsPartBundle)."""
    from airflow.dag_processing.bundles.base import BaseDagBundle

    return BaseDagBundle


def register_dag_bundles() -> list[str]:
    """Write the configured DAG bundles' rows (``dag_bundle``), marking any other inactive;
    the names of the configured ones. Every dag-processor does this as it starts: two
    starting together on a database without the rows race on the same INSERT and one exits
    (UniqueViolation on ``dag_bundle_pkey``), so a deployment registers them once first."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager

    manager = DagBundlesManager()
    manager.sync_bundles_to_db()
    return sorted(bundle.name for bundle in manager.get_all_dag_bundles())


def get_user_dependency() -> Any:
    """``GetUserDep``: a FastAPI parameter annotation resolving the signed-in user from the
    request's token, as the core API does; an anonymous request gets 401/403."""
    from airflow.api_fastapi.core_api.security import GetUserDep

    return GetUserDep
