"""Connections the Airflow way, on a real scheduler: connections made with
``airflow connections add`` (stored in Airflow's metadata DB, no ``AIRFLOW_CONN_*`` anywhere) are
the source an export reads and the SFTP server it delivers to (the SFTP provider's hook reads
the connection's ``key_file``, ``no_host_key_check`` and pinned ``host_key``); ``exportctl run``
keeps working from ``AIRFLOW_CONN_*`` alone."""

from __future__ import annotations

import csv
import json
import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from tests.fixtures.delivery import sftp_server  # noqa: F401 - a fixture used by name
from tests.services.postgres import PostgresServer
from tests.services.sftp import USER, SftpServer
from tests.system.scheduler.harness import SchedulerStack, SlotClock, report_slot
from tests.system.soak.stack import wait_for

COMPANY = "conn-co"
CONN_ID = "cli_source"
SFTP_CONN_ID = "cli_sftp"
SFTP_PATH = f"/{COMPANY}/daily"
DAG_ID = f"widget_export__{COMPANY}__daily"
MARKER = "from-cli-connection"  # a widget id only the second source holds
CONFIG = """\
company:
  id: %(company)s
  name: Connection Co
  timezone: UTC
  owner: data@conn-co.example
  status: active

widget_exports:
  - id: daily
    export_hour: %(hour)d
    interval_hours: 24
    window: {kind: calendar_day}
    query:
      source: %(conn)s
      table: widget_metrics
      columns: [company_id, widget_id, event_time, value]
      timestamp_column: event_time
      tenant_column: company_id
      order_by: [event_time, widget_id]
    format: csv
    destinations:
      - {id: outbox, type: local, path: outbox/%(company)s/daily}
      - {id: partner-sftp, type: sftp, conn_id: %(sftp)s, path: %(sftp_path)s}
    recovery: latest
"""


def _seed_second_source(server: PostgresServer, database: str) -> None:
    """A database the stack knows nothing about: 24 hourly rows a day for 4 days up to today."""
    import psycopg

    with psycopg.connect(server.dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    rows = [(COMPANY, MARKER, today - timedelta(days=3) + timedelta(hours=h), 42 + h / 100)
            for h in range(4 * 24)]
    dsn = server.dsn.rsplit("/", 1)[0] + f"/{database}"
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE widget_metrics (company_id TEXT, widget_id TEXT, "
                     "event_time TIMESTAMP, value NUMERIC(14, 2))")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO widget_metrics VALUES (%s, %s, %s, %s)", rows)


def _write_config(stack: SchedulerStack, clock: SlotClock) -> None:
    """The company file, and its source table on the ``sources:`` allowlist of defaults.yaml
    (a query may read only allowlisted tables, issue 12)."""
    stack.add_sources(**{CONN_ID: {"widget_metrics": "company_id"}})
    stack.grant_connection(SFTP_CONN_ID, "sftp", [COMPANY])
    stack.write_company(COMPANY, CONFIG % {"company": COMPANY, "conn": CONN_ID,
                                           "sftp": SFTP_CONN_ID, "sftp_path": SFTP_PATH,
                                           "hour": clock.hour}, sync_loaders=False)


def _sftp_connection(server: SftpServer) -> str:
    """The Airflow JSON form: a key file, host key checking on, the server's real key pinned."""
    return json.dumps({"conn_type": "sftp", "host": "127.0.0.1", "port": server.port,
                       "login": USER, "extra": {"key_file": str(server.client_key_file),
                                                "no_host_key_check": False,
                                                "host_key": server.host_public_key}})


def _run(stack: SchedulerStack, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=stack.root, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.fixture(scope="module")
def stack(postgres_server: PostgresServer, shared_stack, sftp_server: SftpServer,  # noqa: F811
          ) -> Iterator[tuple[SchedulerStack, str]]:
    """The shared stack, which knows nothing of conn-co yet (the test adds it as an operator
    does), and the second source's URI."""
    database = f"second_{uuid.uuid4().hex[:8]}"
    _seed_second_source(postgres_server, database)
    uri = f"postgresql://{postgres_server.user}:{postgres_server.password}@127.0.0.1:" \
          f"{postgres_server.port}/{database}"
    stack = shared_stack.stack.scoped([COMPANY])
    try:
        yield stack, uri
    finally:
        if CLOCKS:
            report_slot(__name__, CLOCKS[0])
        try:
            stack.withdraw([COMPANY])
        finally:
            import psycopg

            with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


@pytest.fixture(scope="module")
def clock(stack) -> SlotClock:
    """Read just before the first test writes conn-co's file."""
    CLOCKS.append(SlotClock.starting_now())
    return CLOCKS[-1]


CLOCKS: list[SlotClock] = []


def test_a_connection_added_with_the_cli_is_the_source_an_export_reads(
        stack, clock, sftp_server: SftpServer):  # noqa: F811
    stack, uri = stack
    env = stack.env
    assert not any(k in (f"AIRFLOW_CONN_{CONN_ID.upper()}", f"AIRFLOW_CONN_{SFTP_CONN_ID.upper()}")
                   for k in env)
    added = _run(stack, env, "airflow", "connections", "add", CONN_ID, "--conn-uri", uri)
    assert added.returncode == 0, added.stdout + added.stderr
    added = _run(stack, env, "airflow", "connections", "add", SFTP_CONN_ID, "--conn-json",
                 _sftp_connection(sftp_server))
    assert added.returncode == 0, added.stdout + added.stderr
    # An operator adds a company whose export reads that connection; the dag-processor picks
    # up the new loader and the scheduler runs the latest slot (recovery: latest).
    _write_config(stack, clock)
    loaders = _run(stack, env, "exportctl", "loaders", "dags")
    assert loaders.returncode == 0, loaders.stdout + loaders.stderr
    api = stack.api

    def finished() -> list[dict]:  # of the newest due slot: a later one may fall due mid-test
        status, page = api.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns?state=success"
                                       "&state=failed")
        return [r for r in page["dag_runs"] if r["logical_date"]
                and datetime.fromisoformat(r["logical_date"]) == clock.newest
                ] if status == 200 else []

    runs = wait_for(finished, 150, interval=3, what=f"a finished run of {DAG_ID}")
    assert [r["state"] for r in runs] == ["success"], runs

    files = sorted((stack.outbox / COMPANY / "daily").glob(
        f"*slot-{clock.newest:%Y%m%dT%H%MZ}*.csv"))
    assert len(files) == 1, files
    with files[0].open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 24  # one calendar day of the second source's hourly rows
    assert {r["widget_id"] for r in rows} == {MARKER}
    assert {r["company_id"] for r in rows} == {COMPANY}
    (run,) = [r for r in stack.ledger_runs() if r["company"] == COMPANY
              and r["slot_utc"] == f"{clock.newest:%Y-%m-%dT%H:%M:%SZ}"]
    assert run["state"] == "ready" and [a["rows"] for a in run["artifacts"]] == [24]
    # Delivered through SFTPHook with the connection's key file and pinned host key.
    landed = sftp_server.root / SFTP_PATH.lstrip("/") / files[0].name
    assert landed.read_bytes() == files[0].read_bytes()
    assert landed.with_name(f"{files[0].name}.sha256").exists()


def test_exportctl_run_reads_the_same_id_from_the_environment_alone(
        stack, clock, sftp_server: SftpServer):  # noqa: F811
    """exportctl never asks Airflow: without AIRFLOW_CONN_* it names both ways to define it."""
    stack, uri = stack
    env = stack.env
    config = stack.config_dir / f"{COMPANY}.yaml"
    if not config.exists():  # when run alone
        _write_config(stack, clock)
    slot = f"{clock.newest - timedelta(days=1):%Y-%m-%dT%H:%MZ}"  # a day before the DAG's own
    args = ("exportctl", "run", "dags/config", "--schedule", f"{COMPANY}/daily", "--slot", slot,
            "--json")
    outbox = stack.outbox / COMPANY / "daily"
    before = set(outbox.glob("*.csv"))

    missing = _run(stack, env, *args)
    assert missing.returncode == 1, missing.stdout + missing.stderr
    assert f"set AIRFLOW_CONN_{CONN_ID.upper()}" in missing.stderr
    assert f"'airflow connections add {CONN_ID} --conn-uri ...'" in missing.stderr

    ran = _run(stack, {**env, f"AIRFLOW_CONN_{CONN_ID.upper()}": uri,
                       f"AIRFLOW_CONN_{SFTP_CONN_ID.upper()}": _sftp_connection(sftp_server)},
               *args)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (produced,) = set(outbox.glob("*.csv")) - before
    with produced.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 24 and {r["widget_id"] for r in rows} == {MARKER}
