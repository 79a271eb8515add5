"""Session-wide fixtures: real servers started once, stopped even when tests fail.

Airflow reads its settings at import time, so the session's AIRFLOW_HOME (a temp dir, never the
developer's) is set here, before any test module can import airflow.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="export-airflow-home-"))
# One per test session: removed when the session's process ends, not left in /tmp.
atexit.register(shutil.rmtree, _AIRFLOW_HOME, ignore_errors=True)
AIRFLOW_ENV = {
    "AIRFLOW_HOME": str(_AIRFLOW_HOME),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_AIRFLOW_HOME}/airflow.db",
    "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
    "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
    "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
    # A key long enough for HS512 (PyJWT warns below 64 bytes; warnings are errors here).
    "AIRFLOW__API_AUTH__JWT_SECRET": "test-only-" + "k" * 80,
}
os.environ.update(AIRFLOW_ENV)

from tests.services.gcs import GcsServer, start_gcs, stop_gcs  # noqa: E402
from tests.services.postgres import PostgresServer, start_postgres, stop_postgres  # noqa: E402
from tests.services.s3 import S3Server, start_s3, stop_s3  # noqa: E402

# Fixtures that start a real server: a test using one (directly or through another fixture) is
# an integration test whatever its module says.
SERVER_FIXTURES = frozenset({
    "postgres_server", "s3_server", "gcs_server", "sftp_server", "webhook_server",
    "smtp_server", "smtp_tls_server", "https_webhook_server",
})
KINDS = ("integration", "airflow", "scheduler", "soak", "cluster", "system")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test gets a kind: ``integration`` (real servers), ``airflow`` (imports Airflow or
    runs dag.test()), ``scheduler``/``soak`` (a running Airflow), or else ``unit`` (plain Python,
    no server, fast): ``pytest -m unit`` is the quick loop; ``make test`` runs them all."""
    for item in items:
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
        if "scheduler_stack" in getattr(item, "fixturenames", ()):  # tests/scheduler/
            item.add_marker(pytest.mark.scheduler)
            item.add_marker(pytest.mark.slow)
        if not any(item.get_closest_marker(kind) for kind in KINDS):
            item.add_marker(pytest.mark.unit)
    items[:] = longest_first(items)


# Kinds from the longest-running to the shortest (a cluster module is minutes per stack).
BY_LENGTH = ("cluster", "soak", "scheduler", "system", "slow", "airflow", "integration", "unit")
# Before every kind, in this order. xdist hands worker 1 test_faults.py (~9 minutes, one test)
# and worker 2 the soak (4 tests); worker 1, with one test pending, takes the next file at once:
# test_cluster.py, which so runs after the fault test on the same worker. Two Celery clusters
# at once on 2 cores slowed both (test_cluster.py was second in the order before).
FIRST = ("tests/cluster/test_faults.py", "tests/soak/test_soak.py")


def longest_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """Files whose tests start a stack first, files of unit tests last, each file's tests kept
    together and in order. ``make test`` runs ``--dist loadfile --no-loadscope-reorder``, which
    hands files out in this order, so the long modules start at once and the many short files
    fill the end of the run. (xdist's default reorder, most tests per file first, sent the
    one-test 9-minute test_faults.py out among the last files.)"""
    rank: dict[str, tuple[int, int]] = {}
    for index, item in enumerate(items):
        path = item.nodeid.split("::", 1)[0]
        kind = next(n for n, k in enumerate(BY_LENGTH) if item.get_closest_marker(k))
        kind = FIRST.index(path) - len(FIRST) if path in FIRST else kind
        first = rank.get(path, (kind, index))
        rank[path] = (min(first[0], kind), first[1])
    return sorted(items, key=lambda item: rank[item.nodeid.split("::", 1)[0]])


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = start_postgres()
    try:
        yield server
    finally:
        stop_postgres(server)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's standalone S3 server (IAM auth on), shared by the delivery and ledger tests."""
    server = start_s3()
    try:
        yield server
    finally:
        stop_s3(server)


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[GcsServer]:
    server = start_gcs()
    try:
        yield server
    finally:
        stop_gcs(server)


@pytest.fixture()
def pg_schema(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh schema per test, dropped afterwards (tests stay independent)."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    yield name
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{name}" CASCADE')


@pytest.fixture()
def pg_database(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh database per test; yields its SQLAlchemy URL (psycopg 3 driver)."""
    from tests.services.postgres import scratch_database

    with scratch_database(postgres_server) as dsn:
        yield postgres_server.sqlalchemy_url.rsplit("/", 1)[0] + "/" + dsn.rsplit("/", 1)[1]


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """Airflow's metadata DB, migrated once per session (dag.test() needs the tables)."""
    result = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], env={**os.environ, **AIRFLOW_ENV},
        capture_output=True, text=True, timeout=300,
    )
    if result.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return _AIRFLOW_HOME


@pytest.fixture()
def export_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A world (:mod:`tests.world`) under ``tmp_path`` whose environment this process uses:
    ``tmp_path/dags`` (loaders and config), ``tmp_path/home`` (ledger, demo source, exports)."""
    from tests.world import build_world

    return build_world(tmp_path, days=10).use(monkeypatch)
