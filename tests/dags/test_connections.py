"""The Airflow resolver (export_airflow.runtime.connections): Airflow's connections become export_lib's
value objects, with the provider hooks' clients, and never show a secret.

Outside a task the Task SDK looks connections up in ``AIRFLOW_CONN_*`` (its environment
backend); the metadata-DB path (``airflow connections add``) is covered on the real scheduler in
tests/system/scheduler/test_connections.py."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest

from export_lib.errors import ConfigError
from tests.services.gcs import PROJECT as GCS_PROJECT
from tests.services.gcs import GcsServer
from tests.services.postgres import PostgresServer
from tests.services.s3 import REGION, S3Server

SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)
NOW = datetime(2026, 3, 29, 5, 5, tzinfo=UTC)


def _airflow_conn(**fields):
    from airflow.sdk import Connection as AirflowConnection

    return AirflowConnection(**fields)


def test_an_airflow_connection_keeps_its_fields_and_hides_its_secrets():
    from export_airflow.runtime.connections import from_airflow

    conn = from_airflow(_airflow_conn(
        conn_id="pg", conn_type="postgres", host="db.example", port=5433, login="alice",
        password="pa55word", schema="reports",
        extra=json.dumps({"sslmode": "require", "private_token": "t0ken"})))

    assert (conn.conn_type, conn.host, conn.port, conn.login, conn.password, conn.schema) == (
        "postgres", "db.example", 5433, "alice", "pa55word", "reports")
    assert conn.extra == {"sslmode": "require", "private_token": "t0ken"}
    assert set(conn.clients) == {"postgres"}
    shown = repr(conn) + conn.masked_uri()
    assert "pa55word" not in shown and "t0ken" not in shown
    assert conn.masked_uri() == "postgres://db.example:5433"  # scheme, host and port only


def test_the_postgres_client_is_the_hooks_psycopg3_connection(postgres_server: PostgresServer):
    import psycopg
    from export_airflow.runtime.connections import from_airflow

    from export_lib.source.database import LIBPQ_DEFAULTS

    def opened(extra: dict) -> tuple[str, str]:
        conn = from_airflow(_airflow_conn(
            conn_id="pg", conn_type="postgres", host="127.0.0.1", port=postgres_server.port,
            login=postgres_server.user, password=postgres_server.password,
            schema=postgres_server.database, extra=json.dumps(extra)))
        pg = conn.clients["postgres"](**LIBPQ_DEFAULTS)
        try:
            assert isinstance(pg, psycopg.Connection)
            return pg.execute("SELECT current_setting('application_name'), "
                              "current_database()").fetchone()
        finally:
            pg.close()

    assert opened({}) == ("export_lib", postgres_server.database)  # our default applies
    assert opened({"application_name": "team-etl"})[0] == "team-etl"  # the connection's wins
    # export_lib's own extra is applied per session, never handed to libpq through the hook.
    assert opened({"statement_timeout": "5min"}) == ("export_lib", postgres_server.database)


def test_render_through_the_airflow_resolver_goes_through_the_postgres_hook(
        export_world, postgres_server: PostgresServer, monkeypatch):
    """The acme demo query, re-pointed at a PostgreSQL copy of the demo rows Airflow names."""
    import sqlite3

    import psycopg
    from export_airflow.runtime.connections import airflow_resolver

    from export_lib.pipeline import register_run, render_run

    name = f"af_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        rows = sqlite3.connect(export_world.demo_source).execute(
            "SELECT company_id, widget_id, event_time, value, ingested_at FROM widget_metrics "
            "WHERE company_id = 'acme'").fetchall()
        dsn = postgres_server.dsn.rsplit("/", 1)[0] + f"/{name}"
        with psycopg.connect(dsn) as pg:
            # With time zone, as the demo's (acme's daily-spend shows local time); the SQLite
            # demo's text is UTC.
            pg.execute("SET TIME ZONE 'UTC'")
            pg.execute("CREATE TABLE widget_metrics (company_id TEXT, widget_id TEXT, "
                       "event_time TIMESTAMPTZ, value NUMERIC(14, 2), ingested_at TIMESTAMPTZ)")
            with pg.cursor() as cur:
                cur.executemany("INSERT INTO widget_metrics VALUES (%s, %s, %s, %s, %s)", rows)
        monkeypatch.setenv("AIRFLOW_CONN_AF_SOURCE", json.dumps({
            "conn_type": "postgres", "host": "127.0.0.1", "port": postgres_server.port,
            "login": postgres_server.user, "password": postgres_server.password,
            "schema": name, "extra": {"application_name": "via-hook"}}))
        schedule = export_world.schedule()
        ledger, store = export_world.ledger(), export_world.store

        def render(schedule_id: str, resolver) -> dict:
            moved = schedule.model_copy(update={
                "query": schedule.query.model_copy(update={"source": "af_source"}),
                "schedule_id": schedule_id})
            key = register_run(ledger, moved, SLOT, now=NOW).run_key
            return render_run(ledger, store, key, now=NOW, resolver=resolver)

        resolver = airflow_resolver()
        via_hook = render("acme/via-hook", resolver)
        via_env = render("acme/via-env", None)  # export_lib's own psycopg connect

        assert set(resolver("af_source").clients) == {"postgres"}
        assert via_hook["rows"] == via_env["rows"] == 72  # one Berlin day x 3 widgets
        assert via_hook["sha256"] == via_env["sha256"]  # same session settings, same bytes
    finally:
        with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_the_s3_client_is_the_hooks_and_the_connections_config_wins(
        s3_server: S3Server, monkeypatch):
    """The hook's session, endpoint and config, not ``get_client_type()``, which named its
    caller by ``inspect.stack()`` (~0.3 s of CPU per task): with it refused, all still works."""
    import inspect

    from export_airflow.runtime.connections import USER_AGENT, airflow_resolver

    from export_lib.storage.clients import s3_client

    bucket = f"hook-{uuid.uuid4().hex[:10]}"
    s3_server.client().create_bucket(Bucket=bucket)
    monkeypatch.setenv("AIRFLOW_CONN_HOOK_S3", s3_server.connection_uri())
    monkeypatch.setenv("AIRFLOW_CONN_TUNED_S3", json.dumps({
        "conn_type": "aws", "login": s3_server.access_key, "password": s3_server.secret_key,
        "extra": {"endpoint_url": s3_server.endpoint, "region_name": REGION,
                  "config_kwargs": {"connect_timeout": 7}}}))
    resolver = airflow_resolver()

    def no_stack(*args, **kwargs):
        raise AssertionError("inspect.stack() called while building an S3 client")

    monkeypatch.setattr(inspect, "stack", no_stack)
    client = s3_client(resolver("hook_s3"), connect_timeout=3, read_timeout=9, max_attempts=2)
    client.put_object(Bucket=bucket, Key="k", Body=b"via S3Hook")
    tuned = s3_client(resolver("tuned_s3"), connect_timeout=3, read_timeout=9, max_attempts=2)

    assert set(resolver("hook_s3").clients) == {"s3"}
    config = client.meta.config  # botocore counts the first call: 2 retries = 3 attempts
    assert (config.connect_timeout, config.read_timeout, config.retries) == (
        3, 9, {"total_max_attempts": 3, "mode": "standard"})
    assert tuned.meta.config.connect_timeout == 7
    assert tuned.get_object(Bucket=bucket, Key="k")["Body"].read() == b"via S3Hook"
    assert client.meta.config.user_agent_extra == USER_AGENT
    assert (client.meta.endpoint_url, client.meta.region_name) == (s3_server.endpoint, REGION)


def test_an_id_airflow_does_not_know_falls_back_to_the_embedded_defaults_then_says_how():
    from export_airflow.runtime.connections import resolve_through_airflow

    assert resolve_through_airflow("demo_source").conn_type == "sqlite"  # make run's default
    with pytest.raises(ConfigError, match=r"connection 'nowhere' is not defined: set "
                                          r"AIRFLOW_CONN_NOWHERE .* 'airflow connections add "
                                          r"nowhere --conn-uri \.\.\.'"):
        resolve_through_airflow("nowhere")



def test_a_gcs_connection_is_read_with_the_google_providers_extras(gcs_server: GcsServer,
                                                                     monkeypatch):
    """No Google provider (it requires ray, google-ads, Vertex AI): export_lib builds the client
    from the connection's extras as the provider names them. ``is_anonymous`` against the
    emulator the way google-cloud-storage itself allows (STORAGE_EMULATOR_HOST)."""
    from export_airflow.runtime.connections import airflow_resolver

    from export_lib.storage.clients import gcs_client

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server.endpoint)
    monkeypatch.setenv("AIRFLOW_CONN_ANON_GCS", json.dumps({
        "conn_type": "google_cloud_platform", "extra": {"is_anonymous": True,
                                                        "project": GCS_PROJECT}}))
    resolver = airflow_resolver()
    bucket = f"anon-{uuid.uuid4().hex[:10]}"
    gcs_server.client().create_bucket(bucket)

    client = gcs_client(resolver("anon_gcs"))
    client.bucket(bucket).blob("k").upload_from_string(b"anonymous")

    assert resolver("anon_gcs").clients == {}
    # is_anonymous honoured: without it the builder would have asked ADC (none here)
    assert type(client._credentials).__name__ == "AnonymousCredentials"
    assert client.project == GCS_PROJECT
    assert gcs_server.client().bucket(bucket).blob("k").download_as_bytes() == b"anonymous"


def test_a_secrets_backend_that_denies_access_fails_the_task_for_good():
    """Airflow's own chain with a custom backend; a subprocess, so the configured backend
    (cached per process by the SDK) does not leak into other tests."""
    import os
    import subprocess
    import sys

    from tests.world import REPO

    code = ("from export_airflow.runtime.connections import resolve_through_airflow\n"
            "from export_lib.errors import ExportError\n"
            "try:\n    resolve_through_airflow('vault_pg')\n"
            "except ExportError as exc:\n"
            "    print(type(exc).__name__, exc.retryable, exc, sep='|')\n")
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'plugins'}",
           "AIRFLOW__SECRETS__BACKEND": "tests.support.secrets.DenyingBackend",
           "AIRFLOW_CONN_VAULT_PG": "postgresql://u:p@db.example/x"}  # denied before env
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout.strip().splitlines()[-1]

    assert out == ("ConfigError|False|connection 'vault_pg': the secrets backend denied access "
                   "(policy denies reading vault_pg); grant the workers read access to it, "
                   "then clear the task")


@pytest.mark.parametrize("uri", [
    "postgresql://alice:p%40ss@db.example:5433/reports?sslmode=require",
    "sqlite:////srv/exports/demo_source.db",
    "aws://AKIA:s%2Fecret@/?endpoint_url=http%3A%2F%2F127.0.0.1%3A9000&region_name=eu-west-1",
    "google-cloud-platform://?project=acme&key_path=%2Fsecrets%2Fsa.json",
    "sftp://alice:pw@sftp.example:2222/?host_key=ssh-ed25519%20AAAAC3Nz",
    "smtps://user:pw@relay.example:465/?from=exports%40example.com",
    "https://user:pw@hooks.example.com:8443/in/bound?token=abc",
])
def test_a_uri_means_the_same_to_exportctl_and_to_airflow(uri: str):
    """AIRFLOW_CONN_* read by exportctl (export_lib's parser) and by a task (Airflow's) give the
    same connection, so a config runs the same from a shell and from a DAG."""
    from export_airflow.runtime.connections import from_airflow

    from export_lib.source.connections import parse_connection

    ours = parse_connection("c", uri)
    theirs = from_airflow(_airflow_conn(conn_id="c", uri=uri))
    fields = ("host", "port", "login", "password", "schema", "extra")
    assert {f: getattr(theirs, f) for f in fields} == {f: getattr(ours, f) for f in fields}
    same_type = {"postgresql": "postgres"}.get(ours.conn_type, ours.conn_type)
    assert theirs.conn_type == same_type


def test_a_uri_without_scheme_read_by_airflow_is_refused_without_showing_it():
    """Airflow reads ``reader:pw@db:5432/x`` as type 'reader', no host, schema 'w@db:5432/x'
    (issue 23): refused, and neither the login nor any of the password is shown."""
    from airflow.sdk import Connection as AirflowConnection
    from export_airflow.runtime.connections import from_airflow

    found = AirflowConnection.from_uri("reader:Pl4nted-pw@db.internal:5432/reporting",
                                       conn_id="leaky")
    assert found.host in (None, "") and "@" in found.schema  # Airflow's reading, as described
    with pytest.raises(ConfigError, match=r"^connection 'leaky': Airflow read it without a host "
                       r"and with an '@' in its schema, i.e\. a URI without scheme:// \(the value "
                       r"is not shown\)") as info:
        from_airflow(found)
    assert "l4nted" not in str(info.value) and "reader" not in str(info.value)
