"""Session-wide fixtures: real servers started once, stopped even when tests fail.

Airflow reads its settings at import time, so the session's AIRFLOW_HOME (a temp dir, never the
developer's) is set here, before any test module can import airflow.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="export-airflow-home-"))
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
for _path in (str(REPO / "plugins"), str(REPO)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from tests.services.gcs import GcsServer, start_gcs, stop_gcs  # noqa: E402
from tests.services.postgres import PostgresServer, start_postgres, stop_postgres  # noqa: E402
from tests.services.s3 import S3Server, start_s3, stop_s3  # noqa: E402


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
    import psycopg

    name = f"db_{uuid.uuid4().hex[:12]}"
    admin = postgres_server.dsn
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield postgres_server.sqlalchemy_url.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


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
