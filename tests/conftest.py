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
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


def _end_worker_without_finalizing() -> None:
    """An xdist worker's last exit handler (registered first, so it runs after every other,
    the removal of its Airflow home below included): end the process without the interpreter's
    finalization. A worker's results reached the controller before its exit; what remains is
    tearing down a heap with Airflow, SQLAlchemy and a whole session's objects in it, ~4-5 s of
    CPU per worker at once on 2 cores, while the controller waits for every worker to exit
    (py-spy, 4 Dec: 6.8-7.9 s between the last test and the controller's session end, in
    every run, `make test` and `make test-fast` alike)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if os.environ.get("PYTEST_XDIST_WORKER"):
    atexit.register(_end_worker_without_finalizing)

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
    # The in-process page tests run Airflow's default SimpleAuthManager, which cannot scope
    # DAGs: the pages serve it only when told (tests/dags/test_ui.py checks the refusal; the
    # stacks of `make run` use FAB, ADR 0023).
    "EXPORT_UI_ALLOW_UNSCOPED_AUTH": "true",
}
os.environ.update(AIRFLOW_ENV)

from tests.services.gcs import GcsServer, start_gcs, stop_gcs  # noqa: E402
from tests.services.postgres import PostgresServer, start_postgres, stop_postgres  # noqa: E402
from tests.services.s3 import S3Server, start_s3, stop_s3  # noqa: E402
from tests.support.workload import path_of, plan, scheduler  # noqa: E402

# Fixtures that start a real server: a unit test may use none of them.
SERVER_FIXTURES = frozenset({
    "postgres_server", "s3_server", "gcs_server", "sftp_server", "webhook_server",
    "smtp_server", "smtp_tls_server", "https_webhook_server",
})
# The tiers, cheapest first: the folder a test lives in is its tier and its marker.
TIERS = ("unit", "integration", "dags", "system")
# tests/system/<kind>/: a second marker, so `pytest -m soak` still picks one kind.
SYSTEM_KINDS = ("scheduler", "soak", "cluster", "deploy")


# pytest-timeout's ceiling for a system test without its own (a hang still ends the run).
SYSTEM_TIMEOUT_S = 1200


class TierError(pytest.UsageError):
    """A test outside a tier folder, or a unit test that starts a server."""


def tier_of(item: pytest.Item) -> tuple[str, str | None]:
    """``("system", "scheduler")`` for tests/system/scheduler/test_x.py::test_y; raises
    :class:`TierError` for a test that lives outside ``tests/<tier>/``."""
    parts = item.nodeid.split("::", 1)[0].split("/")
    if len(parts) < 3 or parts[0] != "tests" or parts[1] not in TIERS:
        raise TierError(f"{item.nodeid}: every test lives in a tier folder, "
                        f"tests/{{{','.join(TIERS)}}}/; move it into one")
    kind = parts[2] if parts[1] == "system" and parts[2] in SYSTEM_KINDS else None
    return parts[1], kind


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The folder is the tier: ``tests/unit`` (plain Python, no server, no Airflow),
    ``tests/integration`` (real servers started by the session), ``tests/dags`` (Airflow:
    DagBag, ``dag.test()``), ``tests/system`` (real scheduler stacks, the Celery cluster, the
    soak, and in ``deploy`` what a deployment runs outside a stack: fresh venvs from the wheel
    and the lock, ``make setup`` in a copy, the parse bench's fresh processes and a real
    dag-processor's passes). ``make test-fast`` runs the first three, ``make test`` all four."""
    for item in items:
        tier, kind = tier_of(item)
        servers = sorted(SERVER_FIXTURES & set(getattr(item, "fixturenames", ())))
        if tier == "unit" and servers:
            raise TierError(f"{item.nodeid} uses {', '.join(servers)}: a test that needs a "
                            "server belongs in tests/integration")
        item.add_marker(getattr(pytest.mark, tier))
        if kind:
            item.add_marker(getattr(pytest.mark, kind))
        if tier == "system" and item.get_closest_marker("timeout") is None:
            # setup.cfg's 600 s counts fixture setup too: the first test on a stack pays its
            # start (100-330 s on a slow, loaded machine: CI, 2 Dec) before its own ceilings.
            item.add_marker(pytest.mark.timeout(SYSTEM_TIMEOUT_S))
    items[:] = plan(items, {path_of(i): tier_of(i)[0] for i in items})


_TIMELINE = os.environ.get("EXPORT_TEST_TIMELINE")


def _timeline(event: str, nodeid: str) -> None:
    """``EXPORT_TEST_TIMELINE=FILE``: one line per test start and end (time, worker, event,
    test, the worker's CPU seconds so far with its finished children), for reading where a
    slow `make test` spent its wall time and its workers' CPU."""
    if _TIMELINE:
        import time

        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(_TIMELINE, "a") as out:
            import resource
            cpu = sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF,
                      resource.RUSAGE_CHILDREN) for f in ("ru_utime", "ru_stime"))
            out.write(f"{time.time():.1f} {worker} {event} {nodeid} {cpu:.2f}\n")


def pytest_runtest_logstart(nodeid: str, location: tuple) -> None:
    _timeline("start", nodeid)


def pytest_runtest_logfinish(nodeid: str, location: tuple) -> None:
    _timeline("end", nodeid)


def pytest_sessionfinish(session: pytest.Session) -> None:
    _timeline("session-finish", "-")
    session.config.stash[_FAILED] = session.testsfailed


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile`` hands out whole files, and each group of shared-stack scheduler
    modules as one unit (tests/support/workload.py); once every group has run, the shared
    stack stops (:func:`_stop_shared_stack_early`), not at the run's end."""
    if config.getvalue("dist") != "loadfile":
        return None
    scheduling = scheduler(config, log)
    scheduling.on_shared_stack_done = lambda: _stop_shared_stack_early(config)
    return scheduling


_EARLY_STOP = pytest.StashKey[threading.Thread]()


def _stop_shared_stack_early(config: pytest.Config) -> None:
    """Stop the shared stack's processes in the background (the controller's loop goes on);
    its files stay until the run's end, kept there if a test failed."""
    from tests.system.scheduler.shared import stop_shared_stack_processes

    run_dir = Path(os.environ.get(RUN_DIR_ENV, "") or "/nonexistent")
    if not (run_dir / SHARED_STATE).is_file():
        return
    _timeline("shared-stack-done", "-")
    thread = threading.Thread(target=stop_shared_stack_processes, args=(run_dir,),
                              name="shared-stack-stop")
    config.stash[_EARLY_STOP] = thread
    thread.start()


# The run's directory, made by the controlling process (xdist's controller, or the only
# process) before any worker starts, so every worker inherits it: what the workers share.
RUN_DIR_ENV = "EXPORT_TEST_RUN_DIR"
SHARED_STATE = "shared-stack.json"  # tests/system/scheduler/shared.py: the run's shared stack
_FAILED = pytest.StashKey[int]()


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: its controller made the run's dir
        return
    os.environ[RUN_DIR_ENV] = tempfile.mkdtemp(prefix="export-test-run-")


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller ends what the workers shared: the PostgreSQL server, the run's dir."""
    if hasattr(config, "workerinput"):
        return
    run_dir = Path(os.environ.pop(RUN_DIR_ENV, "") or "/nonexistent")
    _timeline("unconfigure", "-")
    try:
        if _EARLY_STOP in config.stash:
            config.stash[_EARLY_STOP].join()
        if (run_dir / SHARED_STATE).is_file():
            from tests.system.scheduler.shared import stop_shared_stack

            stop_shared_stack(run_dir, failed=config.stash.get(_FAILED, 0) > 0)
            _timeline("shared-stack-stopped", "-")
    finally:
        _stop_run_servers(run_dir)


def _stop_run_servers(run_dir: Path) -> None:
    try:
        if (run_dir / "postgres.json").is_file():
            stop_postgres(PostgresServer.from_json((run_dir / "postgres.json").read_text()))
    finally:
        _timeline("postgres-stopped", "-")
        shutil.rmtree(run_dir, ignore_errors=True)
        _timeline("run-dir-removed", "-")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the whole run, every xdist worker included: the first worker
    that needs it starts it, the others use it, the controller stops it (pytest_unconfigure).
    A server per worker cost an ``initdb`` and a migration of the stacks' template databases
    (``airflow db migrate``, ~14 CPU-s) in every worker that ran a stack. Tests never share a
    database: each makes its own (uniquely named), and a test that reads ``pg_stat_activity``
    looks at its own database only."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    if not run_dir or not Path(run_dir).is_dir():  # not under this conftest's controller
        server = start_postgres()
        try:
            yield server
        finally:
            stop_postgres(server)
        return
    import fcntl

    state = Path(run_dir) / "postgres.json"
    with open(Path(run_dir) / "postgres.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if state.is_file():
            server = PostgresServer.from_json(state.read_text())
        else:
            server = start_postgres()
            state.with_suffix(".part").write_text(server.to_json())
            os.replace(state.with_suffix(".part"), state)
    yield server


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


@pytest.fixture()
def pg_ledger_database(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh database per test whose ledger tables are at the newest revision; yields its
    SQLAlchemy URL. A copy of a template the ledger's migrations built once per server: run
    on every test's database, they were ~0.2–0.35 s of the server's CPU each (``CREATE TABLE``
    on PostgreSQL is catalog work): the server's CPU in tests/unit + tests/integration went
    from 36.3 to 27.9 s (5 Dec). The migrations
    themselves run here once per session, and on empty databases in
    tests/unit/ledger/test_migrations.py; ``pg_database`` stays empty."""
    from tests.services.postgres import scratch_database, template_database

    template = template_database(postgres_server, "ledger_template", _upgrade_ledger)
    with scratch_database(postgres_server, "ledger", template) as dsn:
        yield postgres_server.sqlalchemy_url.rsplit("/", 1)[0] + "/" + dsn.rsplit("/", 1)[1]


def _upgrade_ledger(dsn: str) -> None:
    from export_lib.ledger import open_ledger

    ledger = open_ledger("postgresql+psycopg://" + dsn.split("://", 1)[1])
    try:
        ledger.upgrade()
    finally:
        ledger.engine.dispose()


def _migrate_airflow_db() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], env={**os.environ, **AIRFLOW_ENV},
        capture_output=True, text=True, timeout=300,
    )
    if result.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """Airflow's metadata DB (SQLite), migrated once per run (dag.test() needs the tables).

    Under xdist the first worker to need it migrates and leaves a copy for the others, keyed by
    the run (``PYTEST_XDIST_TESTRUNUID``): each worker paid `airflow db migrate` (~5 s of CPU;
    four tests/dags files at -n 4: 110.7 CPU-s before, 96.7 after) in a suite short of
    CPU. The database holds no path of its home."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:
        _migrate_airflow_db()
        _reconnect_airflow()
        return _AIRFLOW_HOME
    import fcntl

    shared = Path(tempfile.gettempdir()) / f"export-airflow-db-{run}"
    shared.mkdir(exist_ok=True)
    atexit.register(shutil.rmtree, shared, ignore_errors=True)  # a later worker migrates again
    template, target = shared / "airflow.db", _AIRFLOW_HOME / "airflow.db"
    with open(shared / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if template.is_file():
            shutil.copyfile(template, target.with_name("airflow.db.part"))
            os.replace(target.with_name("airflow.db.part"), target)
        else:
            _migrate_airflow_db()
            shutil.copyfile(target, shared / "airflow.db.part")
            os.replace(shared / "airflow.db.part", template)
    _reconnect_airflow()
    return _AIRFLOW_HOME


def _reconnect_airflow() -> None:
    """Close the connections Airflow opened in this worker before its database was there: a
    test without this fixture that touched Airflow's ORM (and so created an empty airflow.db)
    left pooled SQLite connections whose cached schema the copied database did not replace
    (tests/dags/test_schema_change.py: "no such table: task_instance", make test, 6 Dec)."""
    settings = sys.modules.get("airflow.settings")
    if settings is None:
        return
    if getattr(settings, "Session", None) is not None:
        settings.Session.remove()
    if getattr(settings, "engine", None) is not None:
        settings.engine.dispose()


@pytest.fixture()
def export_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A world (:mod:`tests.world`) under ``tmp_path`` whose environment this process uses:
    ``tmp_path/dags`` (loaders and config), ``tmp_path/home`` (ledger, demo source, exports)."""
    from tests.world import build_world

    return build_world(tmp_path, days=10).use(monkeypatch)
