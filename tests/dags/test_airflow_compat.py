"""The Airflow internals we lean on (plugins/export_airflow/airflow_compat.py) still exist and
behave as we use them, on the Airflow minor version they were checked against; and ruff fails
on an internal Airflow import anywhere else."""

from __future__ import annotations

import inspect
import json
import socket
import subprocess

import pytest
from export_airflow import airflow_compat

from tests.conftest import REPO


def test_the_installed_airflow_is_the_minor_version_the_internals_were_checked_against():
    from importlib.metadata import version

    installed = ".".join(version("apache-airflow-core").split(".")[:2])
    recheck = "\n".join(f"  - {name}: {what}" for name, what in airflow_compat.INTERNALS.items())
    assert installed == airflow_compat.TESTED_AIRFLOW, (
        f"Airflow {installed} is installed, but plugins/export_airflow/airflow_compat.py was "
        f"checked against {airflow_compat.TESTED_AIRFLOW}. Re-check each internal it uses in the "
        f"new release, then set TESTED_AIRFLOW = {installed!r}:\n{recheck}")


def test_stats_are_set_up_from_the_metrics_settings_and_our_metric_arrives(
        monkeypatch: pytest.MonkeyPatch):
    """Through export_airflow.runtime.metrics, as a deadline callback in the triggerer emits:
    a real UDP socket as the StatsD server."""
    from export_airflow.runtime import metrics

    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(("127.0.0.1", 0))
    listener.settimeout(5)
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(listener.getsockname()[1]))
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PREFIX", "airflow")
    monkeypatch.setattr(metrics, "_initialised", False)
    packets = []
    try:
        metrics.emit("incr", "runs.missed", "acme", "daily-spend", 2)
        while not packets or not packets[-1].startswith("airflow.export."):
            packets.append(listener.recv(4096).decode())  # Airflow's own come too
    finally:
        listener.close()
    assert packets[-1] == "airflow.export.runs.missed.acme.daily-spend:2|c"
    assert metrics._initialised is True
    stats = airflow_compat.stats_module()
    assert all(callable(getattr(stats, name)) for name in ("incr", "gauge", "timing"))


def test_the_dag_run_model_has_the_columns_the_deadline_reference_reads():
    run = airflow_compat.dag_run_model()
    assert {"dag_id", "run_id", "logical_date", "run_type"} <= set(run.__table__.columns.keys())


def test_a_server_side_connection_lookup_reads_the_secrets_chain(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AIRFLOW_CONN_COMPAT_PROBE", json.dumps(
        {"conn_type": "postgres", "host": "db.example", "port": 5433, "login": "alice"}))
    found = airflow_compat.connection_from_secrets("compat_probe")
    assert (found.conn_type, found.host, found.port, found.login) == (
        "postgres", "db.example", 5433, "alice")
    assert airflow_compat.connection_from_secrets("compat_probe_never_defined") is None


def test_a_dag_serialises():
    from airflow.sdk import DAG

    assert airflow_compat.serialize_dag(DAG("compat_probe", schedule=None))["dag"]["dag_id"] == (
        "compat_probe")


def test_the_trigger_handler_takes_what_the_company_page_passes():
    from airflow.api_fastapi.core_api.datamodels.dag_run import TriggerDAGRunPostBody
    from airflow.api_fastapi.core_api.routes.public.dag_run import trigger_dag_run

    assert {"dag_id", "body", "dag_bag", "user", "session", "request"} <= set(
        inspect.signature(trigger_dag_run).parameters)
    body = TriggerDAGRunPostBody(logical_date=None, conf={"company": "acme"}, note="n")
    assert (body.conf, body.note) == ({"company": "acme"}, "n")


def test_simple_auth_manager_is_told_from_another_auth_manager():
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    class DagScoped(SimpleAuthManager):
        def is_authorized_dag(self, **kwargs):  # what FAB's does: per DAG
            return False

    assert airflow_compat.is_simple_auth_manager(SimpleAuthManager()) is True
    assert airflow_compat.is_simple_auth_manager(DagScoped()) is False


def test_the_provider_internals_exist():
    from airflow.providers.fab.auth_manager.cli_commands import utils

    assert callable(utils.get_application_builder)
    assert airflow_compat.postgres_hook_uses_psycopg3() is True
    from airflow.sdk.listener import get_listener_manager

    assert callable(get_listener_manager)


@pytest.mark.parametrize("line", [
    "from airflow.sdk._shared.module_loading import import_string",
    "from airflow.models import DagRun",
    "from airflow.sdk.definitions.deadline import DeadlineAlert",
    "from airflow.utils.session import create_session",
])
def test_ruff_fails_on_an_internal_airflow_import_outside_the_compat_module(line: str):
    source = f"{line}\n\nprint({line.split()[-1]})\n"
    ruff = str(REPO / ".venv" / "bin" / "ruff")
    outside = subprocess.run(
        [ruff, "check", "--no-cache", "--output-format", "concise", "--stdin-filename",
         "plugins/export_airflow/runtime/new_module.py", "-"],
        input=source, capture_output=True, text=True, cwd=REPO)
    assert outside.returncode == 1 and "TID251" in outside.stdout, outside.stdout
    inside = subprocess.run(
        [ruff, "check", "--no-cache", "--stdin-filename",
         "plugins/export_airflow/airflow_compat.py", "-"],
        input=source, capture_output=True, text=True, cwd=REPO)
    assert inside.returncode == 0, inside.stdout


def test_the_dag_bundle_base_class_has_the_methods_our_bundle_implements():
    from export_airflow.deploy.bundles import DagsPartBundle

    base = airflow_compat.base_dag_bundle()
    assert issubclass(DagsPartBundle, base)
    for name in ("path", "get_current_version", "refresh"):
        assert name in vars(DagsPartBundle), name
        assert hasattr(base, name), f"BaseDagBundle no longer has {name}"


def test_the_user_dependency_is_the_annotated_one_fastapi_resolves():
    import typing

    dependency = airflow_compat.get_user_dependency()
    assert typing.get_origin(dependency) is typing.Annotated
    (marker,) = dependency.__metadata__
    assert type(marker).__name__ == "Depends" and marker.dependency.__name__ == "get_user"
