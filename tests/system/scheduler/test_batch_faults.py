"""Batched recovery under faults on a real scheduler (ADR 0032; the shared stack, LocalExecutor).

Two companies, each with one daily data export (``tiktok`` primary, ``recovery: each``) that
misses ``BATCH_FAULT_MISSED`` daily periods before its newest due slot: the scheduler runs the
newest slot, its ``recover_missed`` asks for runs of ``recovery_batch__<company>`` (50 periods
each). Both read ``bfault_metrics`` in the fixture database: 4 rows a day per company behind a
view whose check function raises on a company's "unreadable" windows and waits while its
"gated" windows are closed.

* ``bfault-co`` delivers to a local directory and a webhook (a receiver in this process). The
  middle period's rows are unreadable, and the webhook answers 503 to the first delivery of
  three early periods (down for that part of the batch). The export retries once, 5 s later.
  Each failing period fails alone, every other one is delivered once on the first try; the
  retry delivers the three and fails the unreadable one again, alone; once its rows are fixed,
  a clear of the batch task (the REST API, as the UI's Clear) exports it, once.
* ``bkill-co`` delivers Parquet to a local directory. Its middle period's read waits at the
  gate, and the batch task's process is SIGKILLed there: mid-batch, mid-render, the period's
  attempt holding its lease and its staging file. Airflow retries the task (5 s later): every period
  delivered exactly once, each file's sha256 that of a clean render of its window (rendered
  here with export_lib), and after ``exportctl ledger gc`` no staging object left.

Acceptance-only: ``make acceptance`` runs 365 periods (``BATCH_FAULT_MISSED=365``); skipped in
make test, which has no time left for it (the retry after the kill waits out the killed
attempt's render lease, 5 minutes, whatever the size).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from tests.services.http import WebhookReceiver, start_receiver, stop_receiver
from tests.system.scheduler.harness import SchedulerStack, SlotClock
from tests.system.soak.stack import wait_for

MISSED = int(os.environ.get("BATCH_FAULT_MISSED", "0"))
pytestmark = [pytest.mark.timeout(3600),
              pytest.mark.skipif(MISSED < 10, reason="make acceptance (BATCH_FAULT_MISSED=365)")]

FAULTS, KILLED = "bfault-co", "bkill-co"
TASK = "export_periods"
BATCH_SIZE = 50  # EXPORT_BATCH_RECOVERY_SIZE's default
HOOK_CONN = "bfault_hook"
GATE_MAX_S = 1200  # a gated read gives up waiting after this (a run of the faults test alone)
# Files of one period at a local destination: the artifact and its sha256 sidecar.
DESTINATIONS = {
    FAULTS: ("        - {id: bfault-dir, type: local, path: outbox/bfault-co/tiktok}\n"
             "        - {id: bfault-hook, type: webhook, conn_id: bfault_hook, "
             "endpoint: /hooks/exports}\n"),
    KILLED: "        - {id: bkill-dir, type: local, path: outbox/bkill-co/tiktok}\n",
}
RETRIES = {FAULTS: 1, KILLED: 2}
# bfault-co's CSV periods would share one range scan (ADR 0038): its unreadable period fails
# that scan before its first row, so every period is read on its own and fails alone. bkill-co
# writes Parquet, read per period, so the kill lands mid-render (the attempt holding its
# lease), not in a scan that has not begun any period.
FORMATS = {FAULTS: "csv", KILLED: "parquet"}
COMPANY_YAML = """\
company:
  id: {company}
  name: Batch faults {company}
  timezone: UTC
  owner: data@{company}.example
  status: active

data_exports:
  - channel: tiktok
    format: {format}
    query:
      source: fixture_source
      table: bfault_metrics
      columns: [company_id, channel, metric_date, impressions, clicks, spend, updated_at]
      timestamp_column: updated_at
      tenant_column: company_id
      order_by: [updated_at]
    primary:
      cron: "0 {hour} * * *"
      window: {{days: 1}}
      deadline: 20h
      recovery: each
      catchup: {{lookback: {lookback}h}}
      retries: {{count: {retries}, delay: 5s, max_delay: 5s}}
      destinations:
{destinations}    secondary:
      effective_from: "2030-01-01T00:00:00Z"
      # recovery: each too (the default), so its retries are the batch task's as well
      retries: {{count: {retries}, delay: 5s, max_delay: 5s}}
"""


def schedule_id(company: str) -> str:
    return f"{company}/tiktok/primary"


def run_key(company: str, slot: datetime) -> str:
    return f"{schedule_id(company)}/{slot:%Y-%m-%dT%H:%MZ}"


def window(slot: datetime) -> tuple[datetime, datetime]:
    """``window: {days: 1}`` (trailing_days 1) of a UTC slot: the calendar day before it."""
    end = slot.replace(hour=0, minute=0, second=0, microsecond=0)
    return end - timedelta(days=1), end


def _naive(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(tzinfo=None)


@dataclass
class World:
    stack: SchedulerStack
    dsn: str
    hook: WebhookReceiver
    newest: datetime  # the newest due slot: its own scheduled run
    started: float = 0.0  # time.monotonic() when the companies were written

    @property
    def slots(self) -> list[datetime]:
        """The missed slots the batches export, oldest first."""
        return [self.newest - timedelta(days=d) for d in range(MISSED, 0, -1)]

    @property
    def middle(self) -> datetime:
        """bfault-co's unreadable period, and bkill-co's gated one."""
        return self.slots[MISSED // 2]

    @property
    def down(self) -> list[datetime]:
        """The periods whose first webhook delivery the receiver answers 503."""
        return self.slots[2:5]

    def open_gate(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("UPDATE bfault_gate SET open = true")


def create_source(dsn: str, now: datetime, days: int) -> None:
    """``bfault_rows`` (4 rows a day per company, 6 h apart, ``days`` back from ``now``) behind
    the view ``bfault_metrics``, whose check raises for a row in ``bfault_unreadable`` and
    waits while a row is in a closed ``bfault_gate`` window (VOLATILE: each check sees the
    gate as it is now)."""
    base = _naive(now).replace(second=0, microsecond=0)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP VIEW IF EXISTS bfault_metrics")  # the module run twice
        conn.execute("DROP TABLE IF EXISTS bfault_rows, bfault_unreadable, bfault_gate")
        conn.execute("DROP FUNCTION IF EXISTS bfault_check(text, timestamp)")
        conn.execute("CREATE TABLE bfault_rows (company_id text, channel text, metric_date date, "
                     "impressions bigint, clicks bigint, spend numeric(12, 2), "
                     "updated_at timestamp)")
        for company in (FAULTS, KILLED):
            conn.execute(
                "INSERT INTO bfault_rows SELECT %s, 'tiktok', (%s::timestamp - g * interval "
                "'6 hours')::date, 1000 + g, g, g / 4.0, %s::timestamp - g * interval '6 hours' "
                "FROM generate_series(1, %s) g", (company, base, base, days * 4))
        conn.execute("CREATE TABLE bfault_unreadable (company_id text, lo timestamp, "
                     "hi timestamp)")
        conn.execute("CREATE TABLE bfault_gate (company_id text, lo timestamp, hi timestamp, "
                     "open boolean NOT NULL DEFAULT false)")
        conn.execute(
            "CREATE FUNCTION bfault_check(c text, t timestamp) RETURNS boolean VOLATILE "
            "LANGUAGE plpgsql AS $$ DECLARE began timestamptz := clock_timestamp(); BEGIN "
            "IF EXISTS (SELECT 1 FROM bfault_unreadable u WHERE u.company_id = c AND t >= u.lo "
            "AND t < u.hi) THEN RAISE EXCEPTION 'row of % at % is unreadable (test fault)', c, "
            "t; END IF; "
            "WHILE EXISTS (SELECT 1 FROM bfault_gate g WHERE g.company_id = c AND t >= g.lo "
            "AND t < g.hi AND NOT g.open) AND clock_timestamp() < began + interval "
            f"'{GATE_MAX_S} seconds' LOOP PERFORM pg_sleep(0.2); END LOOP; "
            "RETURN true; END $$")
        conn.execute("CREATE VIEW bfault_metrics AS SELECT * FROM bfault_rows "
                     "WHERE bfault_check(company_id, updated_at)")


@pytest.fixture(scope="module")
def world(shared_stack) -> Iterator[World]:
    clock = SlotClock.starting_now()
    stack = shared_stack.stack.scoped([FAULTS, KILLED], clock)
    hook = start_receiver()
    found = World(stack, shared_stack.fixture_dsn, hook, clock.newest)
    create_source(found.dsn, clock.now, MISSED + 4)
    with psycopg.connect(found.dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO bfault_unreadable VALUES (%s, %s, %s)",
                     (FAULTS, *map(_naive, window(found.middle))))
        conn.execute("INSERT INTO bfault_gate VALUES (%s, %s, %s, false)",
                     (KILLED, *map(_naive, window(found.middle))))
    hook.fail_runs([run_key(FAULTS, s) for s in found.down], 503)
    stack.add_sources(fixture_source={"bfault_metrics": "company_id"})
    stack.airflow("connections", "delete", HOOK_CONN, check=False)  # the module run twice
    stack.airflow("connections", "add", HOOK_CONN, "--conn-uri", f"http://127.0.0.1:{hook.port}")
    stack.grant_connection(HOOK_CONN, "webhook", [FAULTS])
    try:
        for company in (FAULTS, KILLED):
            stack.write_company(company, COMPANY_YAML.format(
                company=company, hour=clock.hour, lookback=MISSED * 24,
                retries=RETRIES[company], destinations=DESTINATIONS[company],
                format=FORMATS[company]),
                sync_loaders=False)
        stack.sync_loaders()
        found.started = time.monotonic()
        stack.wait_for_dags(*(dag for company in (FAULTS, KILLED) for dag in (
            f"recovery_batch__{company}", f"data_export__{company}__tiktok__primary")),
            timeout=300)
        yield found
    finally:
        found.open_gate()
        stack.withdraw([FAULTS, KILLED])
        stop_receiver(hook)


# -- reading Airflow, the ledger, the destination ----------------------------------------------

def batch_runs(world: World, company: str, timeout: float) -> list[dict]:
    """The company's batch runs, oldest first, once every one of them has finished."""
    want = math.ceil(MISSED / BATCH_SIZE)
    dag = f"recovery_batch__{company}"

    def finished() -> list[dict] | None:
        runs = world.stack.api.ok("GET", f"/api/v2/dags/{dag}/dagRuns?limit=100"
                                         "&order_by=run_after")["dag_runs"]
        return runs if len(runs) == want and all(
            r["state"] in ("success", "failed") for r in runs) else None

    return wait_for(finished, timeout, interval=5, what=f"the {want} batch run(s) of {dag}")


def run_of(runs: list[dict], slot: datetime) -> dict:
    (found,) = [r for r in runs if f"{slot:%Y-%m-%dT%H:%MZ}" in r["conf"]["periods"]]
    return found


def try_of(world: World, company: str, run: dict) -> tuple[str, int]:
    ti = world.stack.task_instance(f"recovery_batch__{company}", run["dag_run_id"], TASK)
    return ti["state"], ti["try_number"]


def ledger(world: World, company: str) -> dict[datetime, dict]:
    """``exportctl runs --json`` of the company's export, by slot."""
    return {datetime.fromisoformat(r["slot_utc"].replace("Z", "+00:00")): r
            for r in world.stack.ledger_runs()
            if r["schedule"] == schedule_id(company)}


def attempts(world: World, company: str) -> dict[str, list[str]]:
    """Each run's render attempts' states, oldest first."""
    import sqlalchemy as sa

    found: dict[str, list[str]] = {}
    handle = world.stack.ledger()
    try:
        with handle.engine.connect() as conn:
            for key, state in conn.execute(sa.text(
                    "SELECT r.run_key, a.state FROM export_attempts a JOIN export_runs r ON "
                    "a.run_id = r.id WHERE r.company = :c ORDER BY r.run_key, a.generation"),
                    {"c": company}):
                found.setdefault(key, []).append(state)
    finally:
        handle.engine.dispose()
    return found


def attempt_ids(world: World, company: str) -> set[str]:
    import sqlalchemy as sa

    handle = world.stack.ledger()
    try:
        with handle.engine.connect() as conn:
            return set(conn.execute(sa.text(
                "SELECT a.attempt_id FROM export_attempts a JOIN export_runs r ON "
                "a.run_id = r.id WHERE r.company = :c"), {"c": company}).scalars())
    finally:
        handle.engine.dispose()


def window_rows(world: World, company: str, run: dict) -> int:
    with psycopg.connect(world.dsn) as conn:
        return conn.execute(
            "SELECT count(*) FROM bfault_rows WHERE company_id = %s AND updated_at >= "
            "%s::timestamptz AT TIME ZONE 'UTC' AND updated_at < %s::timestamptz AT TIME ZONE "
            "'UTC'", (company, run["window_start_utc"], run["window_end_utc"])).fetchone()[0]


def artifact_name(run: dict) -> str:
    (artifact,) = run["artifacts"]
    return Path(urlsplit(artifact["uri"]).path).name


def destination_files(world: World, company: str) -> dict[str, str]:
    """Every file in the company's local destination directory → its sha256."""
    folder = world.stack.root / "exports" / "outbox" / company / "tiktok"
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def clean_render(world: World, run_key_: str) -> str:
    """The sha256 of the period rendered afresh here from the ledger run's captured query,
    window and cutoff, as the render stage renders it."""
    from export_lib.pipeline.stages import render_options, schedule_of
    from export_lib.render.engine import render
    from export_lib.source.connections import parse_connection
    from export_lib.source.database import open_source

    handle = world.stack.ledger()
    try:
        run = handle.get_run(run_key_)
    finally:
        handle.engine.dispose()
    schedule = schedule_of(run)
    options = render_options(run, schedule)
    sink = io.BytesIO()
    with open_source(parse_connection("fixture_source", world.dsn)) as source:
        render(source, schedule.query, company_id=run.company, window_start=run.window_start,
               window_end=run.window_end, cutoff=run.source_cutoff, options=options, sink=sink,
               schedule_id=run.schedule_id)
    return hashlib.sha256(sink.getvalue()).hexdigest()


def gc(world: World) -> None:
    """``exportctl ledger gc``, as an operator runs it (for the whole ledger: another module's
    gc may have collected this module's garbage already, so the tests read the ledger)."""
    world.stack.exportctl("ledger", "gc", "--config", "dags/config")


def garbage(world: World, company: str) -> list[tuple[str, str, bool]]:
    """The company's failed and abandoned attempts: (run key, state, staging cleaned)."""
    import sqlalchemy as sa

    handle = world.stack.ledger()
    try:
        with handle.engine.connect() as conn:
            return [(key, state, bool(cleaned)) for key, state, cleaned in conn.execute(sa.text(
                "SELECT r.run_key, a.state, a.staging_cleaned FROM export_attempts a JOIN "
                "export_runs r ON a.run_id = r.id WHERE r.company = :c AND a.state IN "
                "('failed', 'abandoned') ORDER BY r.run_key, a.generation"), {"c": company})]
    finally:
        handle.engine.dispose()


def staging_left(world: World, company: str) -> list[str]:
    staging = world.stack.artifact_root / ".staging"
    mine = attempt_ids(world, company)
    return sorted(p.name for p in staging.iterdir()
                  if p.name.split(".", 1)[0] in mine) if staging.exists() else []


def announced(world: World, company: str) -> list[tuple[str, int]]:
    """Every event on the schedule's asset (``export:<schedule id>``): (run key, version)."""
    api = world.stack.api
    (asset,) = [a for a in api.ok("GET", "/api/v2/assets?limit=100&name_pattern="
                                         f"{schedule_id(company)}")["assets"]
                if a["name"] == f"export:{schedule_id(company)}"]
    events: list[dict] = []
    while True:
        page = api.ok("GET", f"/api/v2/assets/events?asset_id={asset['id']}&limit=100"
                             f"&offset={len(events)}")
        events += page["asset_events"]
        if not page["asset_events"] or len(events) >= page["total_entries"]:
            return sorted((e["extra"]["run_key"], e["extra"]["version"]) for e in events)


def blocked_read(world: World, company: str) -> int | None:
    """The source backend of the company's render waiting at the gate, if there is one."""
    with psycopg.connect(world.dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND "
            "application_name = %s AND wait_event = 'PgSleep' AND query ILIKE "
            "'%%bfault_metrics%%'", (f"export_lib render {company}",)).fetchone()
    return row[0] if row else None


def assert_delivered_once(world: World, company: str, runs: dict[datetime, dict],
                          destinations: tuple[str, ...]) -> None:
    """Every period: ready, artifact v1 with its window's rows, one acknowledged delivery of
    v1 per destination; the destination directory holds exactly each period's file (and its
    sidecar), byte for byte the artifact."""
    assert sorted(runs) == [*world.slots, world.newest]
    assert {r["state"] for r in runs.values()} == {"ready"}
    assert {runs[s]["trigger"] for s in world.slots} == {"batch"}
    assert runs[world.newest]["trigger"] != "batch"
    assert [[a["version"] for a in r["artifacts"]] for r in runs.values()] == [[1]] * (MISSED + 1)
    for run in runs.values():
        assert run["artifacts"][0]["rows"] == window_rows(world, company, run) == 4, \
            run["run_key"]
        assert sorted((d["destination"], d["state"], d["version"]) for d in run["deliveries"]) \
            == [(d, "acknowledged", 1) for d in destinations], run["run_key"]
    files = destination_files(world, company)
    expected = {}
    for run in runs.values():
        name, sha = artifact_name(run), run["artifacts"][0]["sha256"]
        expected[name] = sha
        expected[f"{name}.sha256"] = hashlib.sha256(f"{sha}  {name}\n".encode()).hexdigest()
    assert files == expected  # no other file, no partial one
    # Each period's version announced once on the schedule's asset, as its own run would: a
    # consumer scheduled on it runs once per period.
    assert announced(world, company) == sorted((r["run_key"], 1) for r in runs.values())


# -- the tests ---------------------------------------------------------------------------------

def test_a_sigkill_mid_batch_then_airflows_retry_delivers_every_period_once_as_a_clean_run(
        world):
    stack, gated = world.stack, world.middle
    dag = f"recovery_batch__{KILLED}"
    backend = wait_for(lambda: blocked_read(world, KILLED), 900, interval=2,
                       what=f"{KILLED}'s batch to reach the gated period {gated:%Y-%m-%d}")
    reached = time.monotonic() - world.started
    (run,) = [r for r in stack.api.ok("GET", f"/api/v2/dags/{dag}/dagRuns?limit=100")["dag_runs"]
              if f"{gated:%Y-%m-%dT%H:%MZ}" in r["conf"]["periods"]]
    ti = stack.task_instance(dag, run["dag_run_id"], TASK)
    assert (ti["state"], ti["try_number"]) == ("running", 1)
    before = ledger(world, KILLED)
    # Mid-batch: every period before the gated one exported, the gated one rendering, those
    # after it in its batch registered (a batch registers its periods first, ADR 0038), none
    # after it begun.
    assert [s for s in world.slots if s in before and before[s]["state"] == "ready"] == [
        s for s in world.slots if s < gated]
    assert before[gated]["state"] == "rendering"
    assert {before[s]["state"] for s in world.slots if s > gated and s in before} == {
        "registered"}
    assert [s for s in world.slots if s > gated and s not in before] == [
        s for s in world.slots if s > gated
        and f"{s:%Y-%m-%dT%H:%MZ}" not in run["conf"]["periods"]]
    pid = int(ti["pid"])
    assert Path(f"/proc/{pid}").exists(), f"task instance pid {pid} is not a process here"
    os.kill(pid, signal.SIGKILL)
    world.open_gate()  # the retry's read goes through (the killed one's backend ends too)

    runs = batch_runs(world, KILLED, 1800)
    recovered = time.monotonic() - world.started
    print(f"\n{KILLED}: {MISSED} periods; the gated one reached {reached:.0f} s after the "
          f"companies were written (source backend {backend}), every batch done after "
          f"{recovered:.0f} s")
    assert [r["state"] for r in runs] == ["success"] * len(runs)
    assert [p for r in runs for p in r["conf"]["periods"]] == [
        f"{s:%Y-%m-%dT%H:%MZ}" for s in world.slots]  # oldest first, each once
    assert [try_of(world, KILLED, r) for r in runs] == [
        ("success", 2 if r["dag_run_id"] == run["dag_run_id"] else 1) for r in runs]
    after = ledger(world, KILLED)
    assert_delivered_once(world, KILLED, after, ("bkill-dir",))
    assert {d["attempts"] for r in after.values() for d in r["deliveries"]} == {1}
    # One render attempt per period; the gated period's killed one abandoned when its lease
    # lapsed, the retry's published.
    tried = attempts(world, KILLED)
    assert tried == {r["run_key"]: (["abandoned", "published"] if s == gated else ["published"])
                     for s, r in after.items()}
    for r in after.values():
        assert clean_render(world, r["run_key"]) == r["artifacts"][0]["sha256"], r["run_key"]
    # The killed attempt's staging object is garbage until gc; nothing is left after it.
    gc(world)
    assert garbage(world, KILLED) == [(run_key(KILLED, gated), "abandoned", True)]
    assert staging_left(world, KILLED) == []


def test_a_failing_period_and_a_destination_down_fail_alone_and_the_fixed_period_is_delivered_once(
        world):
    stack, broken = world.stack, world.middle
    dag = f"recovery_batch__{FAULTS}"
    runs = batch_runs(world, FAULTS, 1800)
    first_pass = time.monotonic() - world.started
    assert [p for r in runs for p in r["conf"]["periods"]] == [
        f"{s:%Y-%m-%dT%H:%MZ}" for s in world.slots]
    failing, hooked = run_of(runs, broken), run_of(runs, world.down[0])
    # The batch with the unreadable period failed after its retry; every other succeeded, the
    # one whose webhook was down on its retry.
    assert [(r["state"], *try_of(world, FAULTS, r)) for r in runs] == [
        ("failed", "failed", 2) if r is failing else
        ("success", "success", 2 if r is hooked else 1) for r in runs]
    before = ledger(world, FAULTS)
    assert sorted(before) == [*world.slots, world.newest]
    assert before[broken]["state"] == "failed"
    assert "is unreadable (test fault)" in (before[broken]["reason"] or "")
    assert (before[broken]["artifacts"], before[broken]["deliveries"]) == ([], [])
    for slot, run in before.items():
        if slot == broken:
            continue
        assert (run["state"], [a["version"] for a in run["artifacts"]]) == ("ready", [1])
        assert sorted((d["destination"], d["state"], d["attempts"]) for d in run["deliveries"]
                      ) == [("bfault-dir", "acknowledged", 1),
                            ("bfault-hook", "acknowledged", 2 if slot in world.down else 1)]
    assert attempts(world, FAULTS) == {
        r["run_key"]: (["failed", "failed"] if s == broken else ["published"])
        for s, r in before.items()}
    posts = Counter(json.loads(r["body"])["run_key"] for r in world.hook.state.requests
                    if r["method"] == "POST")
    assert posts == {r["run_key"]: 2 if s in world.down else 1
                     for s, r in before.items() if s != broken}
    assert len(world.hook.state.processed) == MISSED  # each period once, but the broken one

    # The fault clears; support clears the failed batch's task (REST, as the UI's Clear).
    with psycopg.connect(world.dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM bfault_unreadable")
    assert stack.clear(dag, failing["dag_run_id"], [TASK]) == [TASK]
    stack.wait_for_clear(dag, failing["dag_run_id"], timeout=900)
    print(f"\n{FAULTS}: {MISSED} periods; batches finished (seen) {first_pass:.0f} s after the "
          f"companies were written, the cleared one {time.monotonic() - world.started:.0f} s")

    assert try_of(world, FAULTS, failing) == ("success", 3)
    after = ledger(world, FAULTS)
    assert_delivered_once(world, FAULTS, after, ("bfault-dir", "bfault-hook"))
    assert {(s, d["destination"]): d["attempts"] for s, r in after.items()
            for d in r["deliveries"]} == {
        (s, d): 2 if (s in world.down and d == "bfault-hook") else 1
        for s in after for d in ("bfault-dir", "bfault-hook")}
    assert attempts(world, FAULTS) == {
        r["run_key"]: (["failed", "failed", "published"] if s == broken else ["published"])
        for s, r in after.items()}
    posts = Counter(json.loads(r["body"])["run_key"] for r in world.hook.state.requests
                    if r["method"] == "POST")
    assert posts == {r["run_key"]: 2 if s in world.down else 1 for s, r in after.items()}
    assert len(world.hook.state.processed) == MISSED + 1
    # The unreadable period's two failed attempts discarded their staging objects; gc marks
    # them cleaned and nothing of the company is left in staging.
    gc(world)
    assert garbage(world, FAULTS) == [(run_key(FAULTS, broken), "failed", True)] * 2
    assert staging_left(world, FAULTS) == []
