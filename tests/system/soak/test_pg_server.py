"""`make run` on an existing PostgreSQL server (issue 21 item 3): ``PG_SERVER`` instead of the
local cluster, ``PG_DB_PREFIX`` so stacks share it. No ``initdb``, the supervisor does not run
PostgreSQL, `make stop` leaves the server running, `make reset-db` drops only the stack's
databases. Without ``PG_TEMPLATE_PREFIX`` here (the other system stacks clone templates), so
the databases are created and migrated from scratch. One stack boot, its DAGs paused."""

from __future__ import annotations

import shutil

import psycopg
import pytest

from tests.services.ports import free_port
from tests.services.postgres import PostgresServer
from tests.system.soak.stack import Stack, copy_project, scratch_dir, stop_and_sweep

PREFIX = "pgsrv_"
NEIGHBOUR = "neighbour_airflow"  # another stack's database on the same server


def databases(server: str) -> set[str]:
    with psycopg.connect(server + "/postgres") as conn:
        return {row[0] for row in conn.execute("SELECT datname FROM pg_database")}


@pytest.fixture(scope="module")
def server_stack(postgres_server: PostgresServer):
    server = f"postgresql://exports:exports@127.0.0.1:{postgres_server.port}"
    with psycopg.connect(server + "/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{NEIGHBOUR}"')
    root = scratch_dir("export-pgserver-")
    # pgport None: the stack learns the port from PG_SERVER.
    stack = Stack(copy_project(root / "project"), free_port(), None,
                  {"AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
                   # Export DAGs are created unpaused (company status): no scheduled runs,
                   # nothing here needs them.
                   "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False"},
                  pg_server=server, db_prefix=PREFIX)
    try:
        stack.start()
        yield stack, server
    finally:
        try:
            stop_and_sweep(stack)
        finally:
            with psycopg.connect(server + "/postgres", autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{NEIGHBOUR}" WITH (FORCE)')
            shutil.rmtree(root, ignore_errors=True)


def test_the_stack_runs_on_its_databases_of_the_server(server_stack):
    stack, server = server_stack
    components = stack.status()["components"]
    assert "postgres" not in components
    assert all(c["state"] == "up" for c in components.values()), components
    assert not (stack.root / ".airflow" / "pg").exists()
    assert {PREFIX + db for db in ("airflow", "exports", "demo")} <= databases(server)
    remembered = stack.remembered()
    assert remembered["PG_SERVER"] == server and remembered["PG_DB_PREFIX"] == PREFIX
    assert remembered["PGPORT"] == server.rsplit(":", 1)[1]

    # `make env` without the choices on the command line: run.env remembers them.
    stack.pg_server, stack.db_prefix = None, ""
    try:
        env = stack.stack_environ()
    finally:
        stack.pg_server, stack.db_prefix = server, PREFIX
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == (
        server.replace("postgresql://", "postgresql+psycopg2://") + f"/{PREFIX}airflow")
    assert env["EXPORT_LEDGER_URL"].endswith(f"/{PREFIX}exports")
    assert env["AIRFLOW_CONN_DEMO_SOURCE"] == f"{server}/{PREFIX}demo"
    with psycopg.connect(f"{server}/{PREFIX}demo") as conn:  # exportctl demo seed wrote it
        assert conn.execute("SELECT count(*) FROM widget_metrics").fetchone()[0] > 0

    api = stack.api()
    assert api.ok("GET", "/api/v2/dags/manual_export__acme")["dag_id"] == "manual_export__acme"


def test_make_stop_leaves_the_server_running(server_stack):
    stack, server = server_stack
    result = stack.stop()
    assert result.returncode == 0, result.stderr
    assert "make run stopped." in result.stdout
    assert stack.processes() == []
    assert {PREFIX + "airflow", NEIGHBOUR} <= databases(server)  # the server answers


def test_make_reset_db_drops_only_the_stacks_databases(server_stack):
    stack, server = server_stack
    result = stack.make("reset-db", timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        f"Dropped {PREFIX}airflow, {PREFIX}exports and {PREFIX}demo on "
        f"{server.replace(':exports@', ':***@')}; the next 'make run' starts fresh.")
    left = databases(server)
    assert not {d for d in left if d.startswith(PREFIX)}
    assert NEIGHBOUR in left
    assert stack.remembered()["PG_SERVER"] == server  # the next `make run` goes there again
