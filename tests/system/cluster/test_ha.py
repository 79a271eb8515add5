"""Two schedulers and two dag-processors (`make cluster SCHEDULERS=2 DAG_PROCESSORS=2`): a
scheduler SIGKILLed mid-recovery of missed slots and the other mid-burst of on-time runs, and
still every slot runs once.

``HA_COMPANIES`` generated companies (acceptance-only: ``make acceptance`` runs 8; the test is
skipped without the variable, a cluster of its own costs more than `make test` has left), split
over both DAG bundles by the stable hash of their ids (export_lib/config/bundles.py), each with
one daily data export whose slot T0 is a few minutes after they are written and
``catchup: {lookback: 24h}``. When their DAGs are parsed, each runs its newest past slot
(T0 - 24 h) and that run's ``recover_missed`` backfills the one before (T0 - 48 h): scheduler-1
is SIGKILLed while those backfills run. At T0 all companies' on-time runs fall due at once:
scheduler-2 is SIGKILLed as soon as the first of them exists. The supervisor restarts each after
its backoff; Airflow's HA schedulers share the work through PostgreSQL row locks
(``SELECT … FOR UPDATE SKIP LOCKED``), so whichever is alive carries on.

Afterwards, exactly: each company's DAG has 3 DAG runs, one per slot; the ledger has one ready
run per slot with one artifact, version 1, and one acknowledged delivery; each on-time run
started within 60 s of T0; each company's DAGs came from its bundle, and each dag-processor's
log names only its own bundle.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
import yaml

from export_lib.config.bundles import bundle_part
from export_lib.source.demo import SCHEMA, channel_rows
from tests.services.postgres import PostgresServer, start_postgres, stop_postgres
from tests.system.cluster.faults_support import descendants
from tests.system.cluster.stack import Cluster
from tests.system.scheduler.harness import keep_or_remove
from tests.system.soak.stack import scratch_dir, wait_for

COMPANIES = int(os.environ.get("HA_COMPANIES", "0"))
LEAD_S = int(os.environ.get("HA_LEAD_SECONDS", "300"))  # written -> T0: parse + recovery first
ON_TIME_S = 60
pytestmark = [pytest.mark.timeout(2400),
              pytest.mark.skipif(COMPANIES < 2, reason="make acceptance (HA_COMPANIES=8)")]

ENV = {
    "SCHEDULERS": "2",
    "DAG_PROCESSORS": "2",
    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
    "EXPORT_RETRY_DELAY_SECONDS": "5",
    "EXPORT_RENDER_LEASE_SECONDS": "10",
    # A dead scheduler's tasks are adopted once it misses its heartbeat (30 s); new files are
    # listed (and linked into their bundle) every 10 s.
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
    "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "60",
    "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
    "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
}
COMPANY_YAML = """\
company:
  id: {cid}
  name: HA company {n}
  timezone: UTC
  owner: data@{cid}.example
  authorized: [analytics@{cid}.example]

data_exports:
  - channel: facebook
    query:
      source: ha_source
      table: channel_metrics
      columns: [company_id, channel, metric_date, impressions, clicks, spend, updated_at]
      timestamp_column: updated_at
      tenant_column: company_id
      order_by: [metric_date, channel]
      filters: [{{column: channel, op: "=", value: facebook}}]
    destinations:
      - {{id: {cid}-data, type: local, path: outbox/{cid}/data}}
    primary:
      cron: "{minute} {hour} * * *"
      catchup: {{lookback: 24h}}
    secondary:  # not in this test: its DAG never starts
      cron: "0 0 * * *"
      effective_from: "2099-01-01T00:00:00Z"
"""


def company_ids(count: int) -> list[str]:
    """``count`` ids, as many in bundle dags-1 as in dags-2 (give or take one)."""
    ids, parts = [], {1: 0, 2: 0}
    n = 0
    while len(ids) < count:
        cid = f"ha{n:03d}"
        part = bundle_part(f"company_{cid}.py", 2)
        if parts[part] < (count + 1) // 2:
            ids.append(cid)
            parts[part] += 1
        n += 1
    return ids


def dag_id(cid: str) -> str:
    return f"data_export__{cid}__facebook__primary"


@pytest.fixture(scope="module")
def ha_source() -> Iterator[PostgresServer]:
    source = start_postgres()
    try:
        yield source
    finally:
        stop_postgres(source)


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, ha_source: PostgresServer) -> Iterator[Cluster]:
    failed_before = request.session.testsfailed
    stack = Cluster.in_copy(scratch_dir("export-ha-") / "project", **ENV,
                            AIRFLOW_CONN_HA_SOURCE=ha_source.dsn)
    config = stack.root / "dags" / "config"
    for path in config.glob("*.yaml"):  # the shipped companies stay, paused
        data = yaml.safe_load(path.read_text())
        if "company" in data:
            data["company"]["status"] = "paused"
            path.write_text(yaml.safe_dump(data, sort_keys=False))
    started = time.monotonic()
    try:
        stack.start()
        print(f"make cluster SCHEDULERS=2 DAG_PROCESSORS=2: up in "
              f"{time.monotonic() - started:.0f} s")
        yield stack
    finally:
        stack.stop()
        for pid in stack.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        stack.drop_databases()
        keep_or_remove(stack.root.parent, failed=request.session.testsfailed > failed_before)


def write_companies(cluster: Cluster, source: PostgresServer, ids: list[str],
                    t0: datetime) -> None:
    now = datetime.now(UTC)
    with psycopg.connect(source.dsn, autocommit=True) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        for ddl in SCHEMA:
            conn.execute(ddl)
        rows = list(channel_rows(ids, now - timedelta(days=4), now))
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO channel_metrics VALUES ({', '.join(['%s'] * 7)})",
                            rows, returning=False)
    dags = cluster.root / "dags"
    defaults_path = dags / "config" / "defaults.yaml"
    defaults = yaml.safe_load(defaults_path.read_text())
    defaults["sources"]["ha_source"] = defaults["sources"]["demo_source"]
    defaults_path.write_text(yaml.safe_dump(defaults, sort_keys=False))
    loader = (dags / "company_acme.py").read_text(encoding="utf-8")
    for n, cid in enumerate(ids):
        (dags / "config" / f"{cid}.yaml").write_text(COMPANY_YAML.format(
            cid=cid, n=n, hour=t0.hour, minute=t0.minute), encoding="utf-8")
        (dags / f"company_{cid}.py").write_text(loader.replace("acme", cid), encoding="utf-8")
    roles = cluster.make("roles", timeout=300)
    assert roles.returncode == 0, (roles.stdout[-2000:], roles.stderr[-2000:])


def sigkill(cluster: Cluster, name: str) -> int:
    """SIGKILL a scheduler and everything under it (a lost machine); returns its pid. The
    supervisor restarts it after its backoff."""
    pid = cluster.status()["components"][name]["pid"]
    for p in descendants(pid):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pid


def my_runs(api, ids: list[str]) -> list[dict]:
    return [r for r in api.dag_runs() if r["dag_id"] in {dag_id(c) for c in ids}]


def when(stamp: str | None) -> datetime | None:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None


def test_two_schedulers_one_killed_mid_recovery_and_mid_burst_every_slot_once(
        cluster: Cluster, ha_source: PostgresServer):
    status = cluster.status()["components"]
    assert [n for n in status if n.startswith(("scheduler", "dag-processor"))] == [
        "scheduler-1", "scheduler-2", "dag-processor-1", "dag-processor-2"]
    ids = company_ids(COMPANIES)
    t0 = (datetime.now(UTC) + timedelta(seconds=LEAD_S + 59)).replace(second=0, microsecond=0)
    began = time.monotonic()
    events: dict[str, float] = {}

    def mark(event: str) -> None:
        events[event] = round(time.monotonic() - began)

    write_companies(cluster, ha_source, ids, t0)
    mark("companies written")
    api = cluster.api()
    for cid in ids:
        wait_for(lambda c=cid: api.call("GET", f"/api/v2/dags/{dag_id(c)}")[0] == 200,
                 max(30.0, (t0 - datetime.now(UTC)).total_seconds() - 90), 2,
                 what=f"{dag_id(cid)} parsed at least 90 s before its slot {t0:%H:%M}Z")
    mark("parsed")

    wait_for(lambda: any(r["run_type"] == "backfill" and r["state"] == "running"
                         for r in my_runs(api, ids)), 300, 1,
             what="a recovery backfill of a missed slot to run")
    sigkill(cluster, "scheduler-1")
    mark("scheduler-1 killed mid-recovery")
    assert datetime.now(UTC) < t0 - timedelta(seconds=10), (
        f"recovery reached only at {datetime.now(UTC):%H:%M:%S}, T0 {t0:%H:%M}: raise "
        "HA_LEAD_SECONDS")

    wait_for(lambda: any(when(r["logical_date"]) == t0 for r in my_runs(api, ids)),
             (t0 - datetime.now(UTC)).total_seconds() + ON_TIME_S, 0.5,
             what=f"the first on-time run of {t0:%H:%M}Z")
    sigkill(cluster, "scheduler-2")
    mark("scheduler-2 killed mid-burst")

    expected = {f"{cid}/facebook/primary/{t0 - timedelta(days=back):%Y-%m-%dT%H:%MZ}"
                for cid in ids for back in (0, 1, 2)}

    def done() -> bool:
        runs = {r["run_key"]: r for r in cluster.ledger_runs()}
        return all(runs.get(k, {}).get("state") == "ready" and runs[k]["deliveries"] and all(
            d["state"] == "acknowledged" for d in runs[k]["deliveries"]) for k in expected)

    wait_for(done, 1200, 5, what=f"the {len(expected)} slots to be ready and delivered")
    wait_for(lambda: api.active_runs() == 0, 300, 5, what="no active DAG run")
    mark("all slots delivered")

    # Airflow: one DAG run per slot, nothing else; every on-time run started within 60 s.
    runs = my_runs(api, ids)
    per_dag = {cid: sorted(when(r["logical_date"]) for r in runs if r["dag_id"] == dag_id(cid))
               for cid in ids}
    slots = [t0 - timedelta(days=back) for back in (2, 1, 0)]
    assert per_dag == {cid: slots for cid in ids}, per_dag
    assert {r["state"] for r in runs} == {"success"}, [(r["dag_id"], r["state"]) for r in runs]
    late = {r["dag_id"]: (when(r["start_date"]) - t0).total_seconds()
            for r in runs if when(r["logical_date"]) == t0}
    assert len(late) == len(ids) and max(late.values()) <= ON_TIME_S, late

    # The ledger: one ready run per slot, one artifact version 1, one acknowledged delivery.
    ledger = {r["run_key"]: r for r in cluster.ledger_runs() if r["company"] in ids}
    assert sorted(ledger) == sorted(expected), sorted(set(ledger) ^ expected)
    for key, run in ledger.items():
        cid = key.split("/", 1)[0]
        assert [a["version"] for a in run["artifacts"]] == [1], (key, run["artifacts"])
        assert [(d["destination"], d["state"], d["version"]) for d in run["deliveries"]] == [
            (f"{cid}-data", "acknowledged", 1)], (key, run["deliveries"])
    for cid in ids:
        files = sorted((cluster.root / "exports" / "outbox" / cid / "data").glob("*.csv"))
        assert len(files) == 3, files

    # Bundles: each company's DAG from its part, and each dag-processor parsed its own only.
    bundles = cluster.check_bundles(api, {cid: dag_id(cid) for cid in ids})
    attempts = {k: cluster.ledger_attempts(k) for k in sorted(ledger)}
    restarts = {n: c["restarts"] for n, c in cluster.status()["components"].items()
                if n.startswith("scheduler")}
    print(f"ha: {len(ids)} companies over bundles {sorted(set(bundles.values()))}, T0 "
          f"{t0:%H:%M}Z, timeline (s) {events}, on-time start after slot (s) {late}, "
          f"scheduler restarts {restarts}, attempts {attempts}, "
          f"wall {time.monotonic() - began:.0f} s")
    assert restarts == {"scheduler-1": 1, "scheduler-2": 1}, restarts
