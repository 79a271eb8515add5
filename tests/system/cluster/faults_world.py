"""The issue-14 fault scenario's world, run on test_cluster.py's `make cluster` after the
cluster's own checks (one Celery cluster for both; the shipped companies stay, untouched).

``FAULT_COMPANIES`` generated companies (2 in ``make test``, the victims of the two kills;
``make acceptance`` runs issue 14's 20 with a 120 s outage, ``FAULT_OUTAGE_SECONDS``), each with
a daily widget export and a daily data export (channel facebook, primary schedule), read a
*separate* source PostgreSQL server this module starts (``AIRFLOW_CONN_FAULT_SOURCE``), seeded
with 3 days of rows. Every newest slot is a few minutes old; ``catchup: {lookback: 24h}`` in
each export makes each scheduled run's ``recover_missed`` backfill the day before: 2 simulated
days, 2 periods per schedule, the backfills under the catch-up budget (``export_catchup`` pool,
``max_active_runs`` 2).

Every export query holds the source 1.5 s (so concurrent queries are sampled); company fc000's
data channel is large (``exports_large``, worker-large) and its query holds it 20 s; fc001's is
large and produces ~40 MB (a multipart upload to S3). While the 80 runs go: worker-large is
SIGKILLed in the middle of fc000's render, the scheduler and Redis are SIGKILLed (and restarted
by the supervisor), the source PostgreSQL is stopped (``pg_ctl stop -m fast``; 45 s, 120 s in
``make acceptance``)
and started again, and worker-large is SIGKILLed while fc001's artifact is being uploaded (a
multipart upload to the artifact's final key in progress; it may come before the render kill).

Afterwards, exactly: every expected slot has a ready run; one artifact version per period in
the ledger and one object per period in the bucket; one acknowledged delivery per destination
and one file per period in each destination directory; no staging object (nor unfinished
multipart upload) after ``exportctl ledger gc``; each run's deadline as configured (slot + 2 h
for widgets, + 4 h for primary data exports); at most 4 export queries at once on the source
(sampled from ``pg_stat_activity``) and at most 2 of one company; and per period, the source's
statement log shows exactly 1 scan + one per attempt that was killed (``abandoned`` in the
ledger) + one per scan the source's shutdown cut short (its backend's next log line is the
shutdown's FATAL).

Every fault kind runs at either size; only the volume changes. Measured on the shared 2-core
machine at 20 companies: 8.3 to 16.6 min (load from other work varies), most of it the 80
runs' ~440 Airflow tasks (executor parallelism 6, ~8 s per task process here) and the 2-minute
outage; at 2 companies (8 runs) see README.md's test section.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import psycopg
import yaml

from export_lib.checksums import sha256_stream
from export_lib.source.demo import SCHEMA, channel_rows, widget_rows
from tests.services.postgres import PostgresServer
from tests.system.cluster.faults_support import (
    RENDER_APP,
    SourceSampler,
    scans,
    sigkill_component,
)
from tests.system.cluster.stack import Cluster

COMPANIES = int(os.environ.get("FAULT_COMPANIES", "2"))  # at least 2: fc000 and fc001
SLOW, BIG = "fc000", "fc001"  # the render kill's and the upload kill's victims
SLOW_RENDER_S = 20
HOLD_S = 1.5  # every export query's minimum time on the source
BIG_ROWS = 600_000  # ~40 MB of CSV: a multipart upload (boto3's threshold is 8 MB)
OUTAGE_S = int(os.environ.get("FAULT_OUTAGE_SECONDS", "25"))
WIDGET = "daily-widgets"
COMPANY_YAML = """\
company:
  id: {cid}
  name: Fault company {n}
  timezone: UTC
  owner: data@{cid}.example
  authorized: [analytics@{cid}.example]

widget_exports:
  - id: {widget}
    export_hour: {hour}
    window: {{kind: calendar_day}}
    query:
      source: fault_source
      table: widget_metrics
      columns: [company_id, widget_id, event_time, value]
      timestamp_column: event_time
      tenant_column: company_id
    catchup: {{lookback: 24h}}
    destinations:
      - {{id: {cid}-widgets, type: local, path: outbox/{cid}/widgets}}

data_exports:
  - channel: facebook
    size: {size}
    query:
      source: fault_source
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


def company_ids() -> list[str]:
    return [f"fc{n:03d}" for n in range(COMPANIES)]


def write_companies(root: Path, ids: list[str], at: datetime) -> None:
    """Add the generated companies to the copy (bench/cluster.py's way), beside the ones there:
    ``fault_source`` allowed first (defaults.yaml), then each company's file and loader; their
    newest slots are ``at`` (data) and ``at``'s hour (widgets)."""
    dags = root / "dags"
    defaults_path = dags / "config" / "defaults.yaml"
    defaults = yaml.safe_load(defaults_path.read_text())
    defaults["sources"]["fault_source"] = defaults["sources"]["demo_source"]
    defaults_path.write_text(yaml.safe_dump(defaults, sort_keys=False))
    template = (dags / "company_acme.py").read_text(encoding="utf-8")
    for n, cid in enumerate(ids):
        (dags / "config" / f"{cid}.yaml").write_text(COMPANY_YAML.format(
            cid=cid, n=n, widget=WIDGET, hour=at.hour, minute=at.minute,
            size="large" if cid in (SLOW, BIG) else "small"), encoding="utf-8")
        (dags / f"company_{cid}.py").write_text(template.replace("acme", cid), encoding="utf-8")


def seed(server: PostgresServer, ids: list[str], now: datetime) -> None:
    """3 days of rows per company; fc001's channel with ~600,000 extra rows (one per past day,
    all updated inside both windows)."""
    start = now - timedelta(days=3)
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("SET log_statement = 'none'")
        conn.execute("SET TIME ZONE 'UTC'")  # the demo rows' text is UTC (their columns have zones)
        for ddl in SCHEMA:
            conn.execute(ddl)
        with conn.cursor() as cur:
            for table, rows in (("widget_metrics", widget_rows(ids, start, now)),
                                ("channel_metrics", channel_rows(ids, start, now))):
                rows = list(rows)
                marks = ", ".join(["%s"] * len(rows[0]))
                cur.executemany(f"INSERT INTO {table} VALUES ({marks})", rows, returning=False)
        conn.execute(
            "INSERT INTO channel_metrics SELECT %s, 'facebook', DATE '2000-01-01' - n, "
            "1000 + n %% 9000, n %% 100, (n %% 5000) / 100.0, %s FROM generate_series(0, %s) AS n",
            (BIG, (now - timedelta(days=2)).replace(hour=3, minute=0, tzinfo=None), BIG_ROWS))
        for table, slow in (("widget_metrics", HOLD_S), ("channel_metrics", SLOW_RENDER_S)):
            # Every export query holds the source a moment (so concurrent ones are sampled),
            # fc000's channel query for 20 s (a render to kill in the middle of).
            conn.execute(f"ALTER TABLE {table} RENAME TO {table}_base")
            conn.execute(
                f"CREATE VIEW {table} AS SELECT * FROM {table}_base WHERE (SELECT 1 FROM "
                "pg_sleep(CASE WHEN current_setting('application_name') LIKE "
                f"'%{SLOW}' THEN {slow} WHEN current_setting('application_name') LIKE "
                f"'{RENDER_APP}%' THEN {HOLD_S} ELSE 0 END)) = 1")


class World:
    def __init__(self, cluster: Cluster, source: PostgresServer, ids: list[str],
                 at: datetime, sampler: SourceSampler) -> None:
        self.cluster, self.source, self.ids, self.at = cluster, source, ids, at
        self.sampler, self.began = sampler, time.monotonic()
        self.lock = threading.Lock()  # one SIGKILL of worker-large at a time
        self.uploads = UploadKiller(cluster, self.lock)

    def expected(self) -> dict[str, tuple[datetime, timedelta]]:
        """run key → (slot, deadline after the slot): today's slot and the day before's."""
        widget = self.at.replace(minute=0)
        keys = {}
        for cid in self.ids:
            for back in (0, 1):
                w, d = widget - timedelta(days=back), self.at - timedelta(days=back)
                keys[f"{cid}/{WIDGET}/{w:%Y-%m-%dT%H:%MZ}"] = (w, timedelta(hours=2))
                keys[f"{cid}/facebook/primary/{d:%Y-%m-%dT%H:%MZ}"] = (d, timedelta(hours=4))
        return keys


class UploadKiller:
    """SIGKILLs worker-large once while BIG's artifact is being uploaded in parts."""

    def __init__(self, cluster: Cluster, lock: threading.Lock) -> None:
        self.cluster, self.lock, self.upload, self.at = cluster, lock, None, None
        self.began = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        s3 = self.cluster.s3()
        while not self._stop.is_set():
            try:
                uploads = s3.list_multipart_uploads(Bucket="exports").get("Uploads", [])
            except Exception:  # noqa: BLE001 - moto busy; look again
                uploads = []
            # The render's upload to the artifact's final key (ADR 0031). It is created at the
            # first 16 MB part (the COPY is streaming) and stays pending after the render ends,
            # until publication completes it; BIG has two periods, so an upload of one may be
            # pending while the other's attempt has only started. Kill only while the attempt
            # that recorded this very upload is running: the kill interrupts a render that has
            # read the source (the ledger then shows an abandoned attempt and one more scan).
            mine = [u for u in uploads if f"/{BIG}/" in f"/{u['Key']}"]
            rendering = next((u for u in mine if self._rendering(u["UploadId"])), None)
            if rendering is not None:
                with self.lock:
                    sigkill_component(self.cluster, "worker-large")
                self.upload, self.at = rendering["Key"], round(time.monotonic() - self.began)
                return
            time.sleep(0.1)  # an upload of ~40 MB in 16 MB parts lasts seconds

    def _rendering(self, upload_id: str) -> bool:
        try:
            with psycopg.connect(self.cluster.database_url("exports")) as conn:
                return conn.execute(
                    "SELECT count(*) FROM export_attempts a JOIN export_runs r ON r.id = a.run_id "
                    "WHERE r.run_key LIKE %s AND a.state = 'running' AND a.staging_uri LIKE %s",
                    (f"{BIG}/facebook/%", f"%?upload={quote(upload_id, safe='')}&%"),
                ).fetchone()[0] > 0
        except psycopg.Error:  # the ledger busy; look again
            return False

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=150)


def slow_render_reading(source: PostgresServer) -> bool:
    """fc000's channel query (20 s, on worker-large) is running: not its widget query."""
    with psycopg.connect(source.dsn, autocommit=True) as conn:
        conn.execute("SET log_statement = 'none'")
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND "
            "application_name = %s AND query LIKE %s",
            (f"{RENDER_APP}{SLOW}", "%channel_metrics%")).fetchone()[0] > 0


def ready(cluster: Cluster, expected: dict) -> list[dict] | None:
    runs = {r["run_key"]: r for r in cluster.ledger_runs()}
    if all(runs.get(k, {}).get("state") == "ready" and runs[k]["deliveries"] and all(
            d["state"] == "acknowledged" for d in runs[k]["deliveries"]) for k in expected):
        return list(runs.values())
    return None


def check_ledger(world: World, exported: dict[str, dict]) -> None:
    """No missing period and nothing more: each expected slot has one ready run, its deadline
    as configured, one artifact version and one acknowledged delivery."""
    expected = world.expected()
    assert sorted(exported) == sorted(expected), sorted(set(exported) ^ set(expected))
    for key, run in exported.items():
        slot, after = expected[key]
        assert run["slot_utc"].startswith(f"{slot:%Y-%m-%dT%H:%M}"), (key, run["slot_utc"])
        assert run["deadline_utc"].startswith(f"{slot + after:%Y-%m-%dT%H:%M}"), (
            key, run["deadline_utc"])
        assert [a["version"] for a in run["artifacts"]] == [1], (key, run["artifacts"])
        dests = [(d["destination"], d["state"], d["version"]) for d in run["deliveries"]]
        cid = key.split("/", 1)[0]
        kind = "widgets" if f"/{WIDGET}/" in key else "data"
        assert dests == [(f"{cid}-{kind}", "acknowledged", 1)], (key, dests)


def check_destinations(world: World, exported: dict[str, dict]) -> None:
    cluster = world.cluster
    # At the destinations themselves: one object per period in the bucket, no staging object
    # nor unfinished upload, one file per period in each destination directory.
    s3 = cluster.s3()
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket="exports")
            for o in page.get("Contents", [])]
    artifacts = sorted(k for k in keys if not k.endswith(".json") and "/.staging/" not in f"/{k}"
                       and k.split("/")[1] in world.ids)
    assert artifacts == sorted(r["artifacts"][0]["uri"].removeprefix("s3://exports/")
                               for r in exported.values()), artifacts
    assert [k for k in keys if "/.staging/" in f"/{k}"] == []
    assert s3.list_multipart_uploads(Bucket="exports").get("Uploads", []) == []
    for key, run in exported.items():
        cid = key.split("/", 1)[0]
        kind = "widgets" if f"/{WIDGET}/" in key else "data"
        files = list((cluster.root / "exports" / "outbox" / cid / kind).glob(
            f"*{run['period']}*.csv"))
        assert len(files) == 1, (key, files)
        with open(files[0], "rb") as fh:
            assert sha256_stream(fh)[0] == run["artifacts"][0]["sha256"], key
    for cid in world.ids:
        for kind in ("widgets", "data"):  # 2 periods: 2 files and their .sha256 sidecars
            names = sorted(p.name for p in (cluster.root / "exports" / "outbox" / cid / kind
                                            ).iterdir())
            assert len(names) == 4 and names[1] == names[0] + ".sha256", names


def check_source(world: World, exported: dict[str, dict]) -> str:
    """The render budget held on the source, and no period was scanned more than its attempts:
    per period, 1 scan + one per attempt killed (``abandoned``) + one per scan the outage cut
    short. Returns a line for the log."""
    cluster, sampler = world.cluster, world.sampler
    total, per_company = sampler.peaks()
    assert total <= 4 and per_company <= 2, (total, per_company)
    logged = scans(world.source.datadir.parent / "server.log")
    per_period, cut = Counter(), Counter()
    for company, stamps, ended_by_outage in logged:
        for key, run in exported.items():
            bounds = {datetime.fromisoformat(run[f"window_{b}_utc"].replace("Z", "+00:00"))
                      for b in ("start", "end")}
            if key.startswith(f"{company}/") and bounds <= stamps:
                per_period[key] += 1
                cut[key] += ended_by_outage
    assert sum(per_period.values()) == len(logged), "a scan matched no period"
    attempts = {k: cluster.ledger_attempts(k) for k in exported}
    for key in exported:
        states = attempts[key]
        assert states[-1] == "published" and "published" not in states[:-1], (key, states)
        assert set(states[:-1]) <= {"abandoned", "failed"}, (key, states)
        assert per_period[key] == 1 + states.count("abandoned") + cut[key], (
            key, per_period[key], cut[key], states)
    for victim in (SLOW, BIG):
        assert any("abandoned" in attempts[k] for k in exported
                   if k.startswith(f"{victim}/facebook/")), victim
    retried = {k: (per_period[k], attempts[k]) for k in exported if len(attempts[k]) > 1}
    return (f"{len(exported)} periods, {len(logged)} source scans, peaks {total} / "
            f"{per_company} per company, retried {retried}")
