"""One shared scheduler stack per test run, whichever pytest workers run its modules.

Each stack costs ~30-40 CPU-s to start and ~0.1 of a core for as long as it is up, whatever it
runs (scheduler loop, dag-processor, api-server, triggerer; measured 3 Dec); the suite is
CPU-bound on 2 cores. So the scheduler modules no longer get a stack per group of modules:
``EXPORT_TEST_SHARED_STACKS`` groups (tests/support/workload.py) run on as many workers at
once, all against this one stack.

The first worker that needs it starts it (under a lock in the run's directory, like the
session's PostgreSQL) and writes what the others need to attach: the project copy, the
stack's ports and databases, the SMTP relay and StatsD listener (processes of their own that
keep what they receive on disk: tests/services/spool.py) and the fixture source's DSN. The
controlling process stops it at the end of the run (:func:`stop_shared_stack`, from
tests/conftest.py's ``pytest_unconfigure``). Modules running at the same time keep out of each
other's way by construction: each names its own companies, scopes its ledger reads, audits and
validations to them, and edits ``defaults.yaml`` only under a lock
(``harness.grant_connection``); the two
modules that saturate the ``export_catchup`` pool are never in different groups.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path

from tests.services.ports import free_port
from tests.services.postgres import PostgresServer
from tests.services.spool import (
    SpoolRelay,
    SpoolStatsd,
    start_spool_relay,
    start_spool_statsd,
    stop_spooled,
)
from tests.system.scheduler.harness import SchedulerStack, keep_or_remove
from tests.system.soak.stack import Stack, scratch_dir, stop_and_sweep

RUN_DIR_ENV = "EXPORT_TEST_RUN_DIR"
STATE = "shared-stack.json"


@dataclass
class SharedStack:
    """The run's stack and the servers it was started with."""

    stack: SchedulerStack
    relay: SpoolRelay
    statsd: SpoolStatsd
    fixture_dsn: str


def _environment(relay: SpoolRelay, statsd: SpoolStatsd, fixture_dsn: str) -> dict[str, str]:
    return {
        "AIRFLOW_CONN_SMTP_DEFAULT": f"smtp://127.0.0.1:{relay.port}/?from_email=airflow"
                                    "%40example.com&disable_ssl=true&disable_tls=true"
                                    "&retry_limit=0&timeout=10",
        "AIRFLOW_CONN_BROKEN_SOURCE": f"postgresql://exports:exports@127.0.0.1:"
                                      f"{free_port()}/demo?connect_timeout=3",
        "AIRFLOW_CONN_FIXTURE_SOURCE": fixture_dsn,
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port),
        "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
        # New files are found within 5 s; a changed company's loader is touched
        # (harness.write_company; every loader when defaults.yaml changes). Otherwise every
        # 30 s as in make run: re-parsing every file every 10 s cost CPU the suite is short
        # of. 300 s failed test_delivery_window (3 Dec: "the edited config to be parsed" not
        # within 60 s): the touch alone does not bring the re-parse.
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        # Our task log lines carry company/schedule/run/period as keys of Airflow's records
        # (issue 22 item 5; test_clear_and_retry reads them back). The messages stay as in
        # text mode, so every other module reads the same logs.
        "EXPORT_LOG_FORMAT": "json",
        # Modules write companies into the running stack: under FAB each would wait for its
        # roles (python -m export_airflow.access sync). Company scoping is tested on the FAB
        # stacks of tests/system/tenants and the cluster.
        "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple."
                                       "simple_auth_manager.SimpleAuthManager",
        "EXPORT_UI_ALLOW_UNSCOPED_AUTH": "true",
    }


def shared_stack_for_run(postgres_server: PostgresServer) -> SharedStack:
    """The run's shared stack: started by the first caller, attached to by the others."""
    run_dir = Path(os.environ.get(RUN_DIR_ENV) or "/nonexistent")
    if not run_dir.is_dir():
        raise RuntimeError(f"{RUN_DIR_ENV} is not set to the run's directory: run the "
                           "scheduler tests through pytest with tests/conftest.py")
    state = run_dir / STATE
    with open(run_dir / "shared-stack.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not state.is_file():
            _start(state, postgres_server)
        data = json.loads(state.read_text())
    if data.get("status") != "up":
        raise RuntimeError("the run's shared scheduler stack did not start (the worker that "
                           f"started it reported: {data.get('error') or data.get('status')}); "
                           f"its files: {data.get('root')}")
    relay, statsd = SpoolRelay(**_paths(data["relay"])), SpoolStatsd(**_paths(data["statsd"]))
    stack = SchedulerStack.attach(Stack(**_paths(data["stack"])))
    return SharedStack(stack, relay, statsd, data["fixture_dsn"])


def _paths(fields: dict) -> dict:
    return {k: Path(v) if k in ("root", "spool") else v for k, v in fields.items()}


def _fields(server: object) -> dict:
    return {k: str(v) if isinstance(v, Path) else v
            for k, v in dataclasses.asdict(server).items()}  # type: ignore[call-overload]


def _write(state: Path, data: dict) -> None:
    part = state.with_suffix(".part")
    part.write_text(json.dumps(data))
    os.replace(part, state)


def _start(state: Path, postgres_server: PostgresServer) -> None:
    """Start the stack; every step is recorded first, so the controller stops whatever
    started even when this worker dies half-way."""
    import psycopg

    root = scratch_dir("export-shared-")
    data: dict = {"status": "starting", "root": str(root)}
    try:
        data["relay"] = _fields(start_spool_relay(root / "smtp"))
        _write(state, data)
        data["statsd"] = _fields(start_spool_statsd(root / "statsd"))
        _write(state, data)
        name = f"fixtures_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        data["fixture_dsn"] = postgres_server.dsn.rsplit("/", 1)[0] + f"/{name}"
        relay = SpoolRelay(**_paths(data["relay"]))
        statsd = SpoolStatsd(**_paths(data["statsd"]))
        harness = SchedulerStack.prepare(root / "project", {},
                                         _environment(relay, statsd, data["fixture_dsn"]))
        harness.add_sources(broken_source={"widget_metrics": "company_id"})
        data["stack"] = _fields(harness.stack)
        _write(state, data)
        harness.start()
        data["status"] = "up"
    except BaseException as exc:
        data["status"], data["error"] = "failed", "".join(
            traceback.format_exception_only(exc)).strip()[-2000:]
        raise
    finally:
        _write(state, data)


def stop_shared_stack(run_dir: Path, *, failed: bool) -> None:
    """Stop the run's shared stack if one was started and is still up (the controlling
    process, at the end); its files stay for a post-mortem when a test failed (or
    ``SCHEDULER_KEEP``)."""
    state = run_dir / STATE
    if not state.is_file():
        return
    data = json.loads(state.read_text())
    try:
        stop_shared_stack_processes(run_dir)
    finally:
        keep_or_remove(Path(data["root"]), failed=failed or data.get("status") != "up")


def stop_shared_stack_processes(run_dir: Path) -> None:
    """Stop the shared stack's processes and its servers, once (the controller calls this as
    soon as every shared-stack group has run: tests/support/workload.py); the files stay."""
    state = run_dir / STATE
    data = json.loads(state.read_text())
    if data.get("stopped"):
        return
    try:
        if "stack" in data:
            stop_and_sweep(Stack(**_paths(data["stack"])))
    finally:
        for server in ("relay", "statsd"):
            if server in data:
                stop_spooled(int(data[server]["pid"]))
        _write(state, {**data, "stopped": True})
