"""`make run` on an existing PostgreSQL server (issue 21 item 3), on the folder's stack
(tenant_stack.py): ``PG_SERVER`` instead of the local cluster, ``PG_DB_PREFIX`` so stacks share
it: no initdb, the supervisor does not run PostgreSQL, `make stop` leaves the server running,
`make reset-db` drops only the stack's databases. These tests stop the stack, so this file is the
folder's last (pytest collects a folder's files by name).
"""

from __future__ import annotations

import psycopg

from tests.system.tenants.tenant_stack import NEIGHBOUR, PG_PREFIX, World


def _databases(server: str) -> set[str]:
    with psycopg.connect(server + "/postgres") as conn:
        return {row[0] for row in conn.execute("SELECT datname FROM pg_database")}


def test_the_stack_runs_on_its_databases_of_the_server(world: World) -> None:
    stack = world.stack
    server = stack.pg_server
    components = stack.status()["components"]
    assert "postgres" not in components
    assert all(c["state"] == "up" for c in components.values()), components
    assert not (stack.root / ".airflow" / "pg").exists()
    assert {PG_PREFIX + db for db in ("airflow", "exports", "demo")} <= _databases(server)
    remembered = stack.remembered()
    assert remembered["PG_SERVER"] == server and remembered["PG_DB_PREFIX"] == PG_PREFIX
    assert remembered["PGPORT"] == server.rsplit(":", 1)[1]

    # `make env` without the choices on the command line: run.env remembers them.
    stack.pg_server, stack.db_prefix = None, ""
    try:
        env = stack.stack_environ()
    finally:
        stack.pg_server, stack.db_prefix = server, PG_PREFIX
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == (
        server.replace("postgresql://", "postgresql+psycopg2://") + f"/{PG_PREFIX}airflow")
    assert env["EXPORT_LEDGER_URL"].endswith(f"/{PG_PREFIX}exports")
    assert env["AIRFLOW_CONN_DEMO_SOURCE"] == f"{server}/{PG_PREFIX}demo"
    with psycopg.connect(f"{server}/{PG_PREFIX}demo") as conn:  # exportctl demo seed wrote it
        assert conn.execute("SELECT count(*) FROM widget_metrics").fetchone()[0] > 0


def test_make_stop_leaves_the_server_running(world: World) -> None:
    stack = world.stack
    result = stack.stop()
    assert result.returncode == 0, result.stderr
    assert "make run stopped." in result.stdout
    assert stack.processes() == []
    assert {PG_PREFIX + "airflow", NEIGHBOUR} <= _databases(stack.pg_server)  # it answers


def test_make_reset_db_drops_only_the_stacks_databases(world: World) -> None:
    stack = world.stack
    server = stack.pg_server
    result = stack.make("reset-db", timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        f"Dropped {PG_PREFIX}airflow, {PG_PREFIX}exports and {PG_PREFIX}demo on "
        f"{server.replace(':exports@', ':***@')}; the next 'make run' starts fresh.")
    left = _databases(server)
    assert not {d for d in left if d.startswith(PG_PREFIX)}
    assert NEIGHBOUR in left
    assert stack.remembered()["PG_SERVER"] == server  # the next `make run` goes there again
