"""`make run` as root in a checkout the `postgres` user cannot enter (issue 21 item 7).

A new user's first try: root, the project in a mode-700 directory (like /root). PostgreSQL
refuses to run as root, so it runs as `postgres`, which cannot reach ``.airflow/pg`` there; the
first setup puts the cluster in postgres's home and links it from ``.airflow/pg``. The stack must
come up on that cluster (the supervisor once got the unreachable path and restarted PostgreSQL
forever), and `make stop` / `make reset-db` must stop and delete it there. One stack boot; its
DAGs stay paused (they only need to be parsed), so nothing but the layout is under test.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg
import pytest

from tests.services.ports import free_port
from tests.system.soak.stack import Stack, copy_project, stop_and_sweep

pytestmark = [

    pytest.mark.skipif(os.geteuid() != 0, reason="only root runs PostgreSQL as `postgres`, "
                                                 "whose reach decides where the cluster lives"),
]


def relocated_dir(airflow_home: Path) -> Path:
    """Where scripts/pg.sh (pg_relocated_dir) puts the cluster of ``airflow_home``."""
    key = hashlib.sha1(str(airflow_home).encode()).hexdigest()[:12]
    return Path(pwd.getpwnam("postgres").pw_dir) / "airflow-scheduled-exports" / key


def postgres_can_enter(path: Path) -> bool:
    return subprocess.run(["runuser", "-u", "postgres", "--", "test", "-x", str(path)],
                          cwd="/", check=False).returncode == 0


def cmdlines_naming(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline}")
    return found


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def home_stack():
    """`make run` in a copy of the project inside a mode-700 directory; always stopped, and its
    relocated cluster deleted, whatever the tests did."""
    scratch = Path(tempfile.mkdtemp(prefix="export-home-")).resolve()
    os.chmod(scratch, 0o700)
    stack = Stack(copy_project(scratch / "project"), free_port(), free_port(),
                  {"AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
                   # Export DAGs are created unpaused (company status): no scheduled runs,
                   # nothing here needs them.
                   "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False"})
    cluster = relocated_dir(stack.root / ".airflow")
    assert not cluster.exists(), f"{cluster} is left from another run"
    try:
        stack.start()
        yield stack, cluster
    finally:
        try:
            stop_and_sweep(stack)
            stack.make("reset-db", timeout=120)
        finally:
            shutil.rmtree(cluster, ignore_errors=True)
            shutil.rmtree(scratch, ignore_errors=True)


def test_the_stack_runs_on_the_cluster_in_postgres_home(home_stack):
    stack, cluster = home_stack
    assert not postgres_can_enter(stack.root), "the copy must be out of postgres's reach"
    assert os.readlink(stack.root / ".airflow" / "pg") == str(cluster)

    components = stack.status()["components"]
    assert {name: c["state"] for name, c in components.items()} == {
        name: "up" for name in ("postgres", "api-server", "scheduler", "dag-processor",
                                "triggerer")}
    assert components["postgres"]["restarts"] == 0, components["postgres"]["last_restart"]
    server = Path(f"/proc/{components['postgres']['pid']}")
    assert server.stat().st_uid == pwd.getpwnam("postgres").pw_uid
    argv = (server / "cmdline").read_bytes().split(b"\0")
    assert argv[argv.index(b"-D") + 1].decode() == str(cluster)

    with psycopg.connect(host="127.0.0.1", port=stack.pgport, user="exports",
                         password="exports", dbname="exports", connect_timeout=10) as conn:
        assert conn.execute("SHOW data_directory").fetchone()[0] == str(cluster)
        names = {row[0] for row in conn.execute("SELECT datname FROM pg_database")}
    assert {"airflow", "exports", "demo"} <= names

    api = stack.api()  # logs in and waits for the DAGs to be parsed
    status, version = api.call("GET", "/api/v2/version")
    assert status == 200 and version["version"].startswith("3.")
    assert api.ok("GET", "/api/v2/dags/manual_export__acme")["dag_id"] == "manual_export__acme"


def test_make_stop_leaves_nothing(home_stack):
    stack, cluster = home_stack
    result = stack.stop()
    assert result.returncode == 0, result.stderr
    assert "make run stopped." in result.stdout
    assert stack.processes() == []
    assert cmdlines_naming(str(stack.root)) == []
    assert cmdlines_naming(str(cluster)) == []
    assert not (cluster / "postmaster.pid").exists()
    assert not stack.postgres_running()
    for port in (stack.port, stack.pgport):
        assert not listening(port), f"something still listens on {port}"


def test_make_reset_db_deletes_the_relocated_cluster(home_stack):
    stack, cluster = home_stack
    assert (cluster / "PG_VERSION").is_file()
    result = stack.make("reset-db", timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        f"Deleted the make run databases in {stack.root / '.airflow'} and the cluster in "
        f"{cluster}; the next 'make run' starts fresh.")
    assert not cluster.exists()
    assert not os.path.lexists(stack.root / ".airflow" / "pg")
