"""No runaway work and late data on a real scheduler (issue 11, items 10 and 9).

Two companies on the shared stack reading ``fixture_source`` (the shared stack's fixture
database, seeded before the companies are written, so no scheduled run ever sees a missing
table):

* ``bigco``: one widget export over ``big_metrics``, 5 M rows of one day, its renders limited
  to ``RENDER_TIMEOUT_S`` (``timeouts: {render: 30s}``). A run of that day is triggered through the REST API;
  once its COPY is active in ``pg_stat_activity`` the render task is cleared through the REST
  API, as an operator does in the UI. Airflow's supervisor sees the refused heartbeat and
  SIGTERMs the task; ``on_kill`` cancels the query.
* ``lateco``: a daily export with ``late_data: restate`` (grace 14 h by default) and one with
  ``wait_for_watermark`` (``poke_interval: 10s``) whose deadline falls ~100 s after the fixture
  wrote the config; the source's watermark never passes, so the sensor reschedules until the
  deadline, then exports. Their slot is ~12 h old (``SlotClock``): no slot falls due while the
  module runs, whatever the hour (with EXPORT_TEST_HOURS_AHEAD=1 one may; the tests follow s0's
  runs by slot).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from tests.system.scheduler.harness import HOURS_AHEAD, SchedulerStack, SlotClock, report_slot
from tests.system.soak.stack import Api, wait_for

ROWS = 5_000_000
# The render's execution_timeout. Long enough for a first try to reach its COPY on a loaded
# machine (8 s was not: on a slow CI machine at load 11 the first try spent 8 s in execute()
# before its COPY started and timed out unseen, 2 Dec); the locked second try waits it out.
RENDER_TIMEOUT_S = 30
BIG = "widget_export__bigco__full-dump"


@dataclass(frozen=True)
class Clock:
    """The slots this module works on, read when it starts (not at collection: under
    pytest-xdist a module may start many minutes after it was collected)."""

    now: datetime

    @property
    def hour(self) -> int:  # lateco's daily export hour: its latest slot ~12 h ago
        return SlotClock(self.now).hour

    @property
    def s0(self) -> datetime:  # lateco's latest daily slot (a later one may fall due mid-test)
        return SlotClock(self.now).newest

    @property
    def big_day(self) -> datetime:
        return (self.now - timedelta(days=3)).replace(hour=0, minute=0, second=0, microsecond=0)

    @property
    def big_slot(self) -> datetime:  # bigco/full-dump's slot whose calendar day is big_day
        return self.big_day + timedelta(days=1, hours=7)

    @property
    def past_slot(self) -> datetime:  # restated at once: window end + grace has passed
        return self.s0 - timedelta(days=1)


LATE_ROWS, ON_TIME_ROWS = 5, 100
# restated's grace: its on-time slot s0 is ~24 - HOURS_AHEAD h old, so s0 + grace lies ~2 h
# ahead (its restatement waits) while the slot a day before is restated at once.
GRACE_HOURS = 24 - HOURS_AHEAD + 2
# The watermark sensor's run reaches its deadline this long after its company is written (its
# DAG is parsed and its run started well before; the sensor pokes every 10 s).
WM_DEADLINE_AFTER = 100

BIGCO = """\
company: {id: bigco, name: Big Co, timezone: UTC, owner: data@bigco.example, status: active}
widget_exports:
  - id: full-dump
    export_hour: 7
    interval_hours: 24
    window: {kind: calendar_day}
    query:
      source: fixture_source
      table: big_metrics
      columns: [company_id, event_time, n, pad]
      timestamp_column: event_time
      tenant_column: company_id
    format: csv
    destinations:
      - {id: bigco-dir, type: local, path: outbox/bigco}
    deadline: 2h
    recovery: none
    timeouts: {render: RENDER_TIMEOUTs}
""".replace("RENDER_TIMEOUT", str(RENDER_TIMEOUT_S))
LATECO = """\
company: {id: lateco, name: Late Co, timezone: UTC, owner: data@lateco.example, status: active}
widget_exports:
  - id: restated
    export_hour: %(hour)d
    interval_hours: 24
    window: {kind: interval}
    query:
      source: fixture_source
      table: late_metrics
      columns: [company_id, event_time, value]
      timestamp_column: event_time
      tenant_column: company_id
      ingested_column: ingested_at
    format: csv
    destinations:
      - {id: lateco-restated, type: local, path: outbox/lateco/restated}
    deadline: 30m
    recovery: latest
    late_data: {policy: restate, grace: %(grace)dh}
  - id: watermarked
    export_hour: %(hour)d
    interval_hours: 24
    window: {kind: interval}
    query:
      source: fixture_source
      table: wm_metrics
      columns: [company_id, event_time, value]
      timestamp_column: event_time
      tenant_column: company_id
      ingested_column: ingested_at
    format: csv
    destinations:
      - {id: lateco-watermarked, type: local, path: outbox/lateco/watermarked}
    deadline: %(wm_deadline)ds
    recovery: latest
    late_data: {policy: wait_for_watermark, grace: 1m, poke_interval: 10s}
"""


def fill_big_metrics(dsn: str, big_day: datetime) -> None:
    """5 M rows of one day (~15 s; runs while the stack starts)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO big_metrics SELECT 'bigco', %s::timestamptz + g * interval '17 ms', g, "
            "md5(g::text) FROM generate_series(0, %s) g", (big_day, ROWS - 1))
        conn.execute("ANALYZE big_metrics")


def seed_fixture_source(dsn: str, clock: Clock) -> None:
    s0, past_slot = clock.s0, clock.past_slot
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE UNLOGGED TABLE big_metrics (company_id text, "
                     "event_time timestamptz, n bigint, pad text)")
        for table in ("late_metrics", "wm_metrics"):
            conn.execute(f"CREATE TABLE {table} (company_id text, event_time timestamptz, "
                         "value numeric(12, 2), ingested_at timestamptz)")
        # The past slot's window, every row in before the run registers.
        conn.execute("INSERT INTO late_metrics SELECT 'lateco', %s + g * interval '30 s', g, "
                     "%s + g * interval '30 s' + interval '1 min' FROM generate_series(1, %s) g",
                     (past_slot - timedelta(hours=1), past_slot - timedelta(hours=1),
                      ON_TIME_ROWS))
        # The watermark stays short of s0's window end + grace (s0 + 1 min) for good.
        conn.execute("INSERT INTO wm_metrics SELECT 'lateco', %s + g * interval '1 min', g, "
                     "%s + g * interval '1 min' FROM generate_series(0, 50) g",
                     (s0 - timedelta(hours=1), s0 - timedelta(hours=1)))


@pytest.fixture(scope="module")
def clock() -> Clock:
    return Clock(datetime.now(UTC))


@pytest.fixture(scope="module")
def fixture_dsn(shared_stack) -> str:
    return shared_stack.fixture_dsn


@pytest.fixture(scope="module")
def stack(shared_stack, fixture_dsn: str, clock: Clock):
    """bigco and lateco on the shared stack, their source seeded first; restatement runs held
    until the test says so (lateco's own restatement__lateco DAG, paused once it appears)."""
    stack = shared_stack.stack.scoped(["bigco", "lateco"])
    seed_fixture_source(fixture_dsn, clock)
    fill_big_metrics(fixture_dsn, clock.big_day)
    stack.add_sources(fixture_source={t: "company_id" for t in
                                      ("big_metrics", "late_metrics", "wm_metrics")})
    # The watermark never passes: the sensor reschedules until this deadline, then exports.
    wm_deadline = (datetime.now(UTC) + timedelta(seconds=WM_DEADLINE_AFTER)).replace(
        microsecond=0) - clock.s0
    try:
        stack.write_company("bigco", BIGCO, sync_loaders=False)
        stack.write_company("lateco", LATECO % {"hour": clock.hour, "grace": GRACE_HOURS,
                                                "wm_deadline": int(wm_deadline.total_seconds())})
        stack.wait_for_dags("widget_export__bigco__full-dump", "widget_export__lateco__restated",
                            "widget_export__lateco__watermarked", "restatement__lateco",
                            timeout=300)
        stack.pause("restatement__lateco")
        yield stack
    finally:
        report_slot(__name__, SlotClock(clock.now))
        stack.withdraw(["bigco", "lateco"])


@pytest.fixture(scope="module")
def api(stack: SchedulerStack) -> Api:
    return stack.api


def export_queries(dsn: str, day: str) -> list[tuple[int, str]]:
    """(leader pid, state) of every backend whose last query read this day of big_metrics,
    parallel workers counted under the client backend that leads them."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT coalesce(leader_pid, pid), state FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND datname = current_database() "
            "AND query ILIKE %s AND query LIKE %s",
            ("%big_metrics%", f"%{day}%")).fetchall()


def task_logs(stack: SchedulerStack, dag_id: str, run_id: str, task_id: str) -> str:
    folder = (Path(stack.env["AIRFLOW_HOME"]) / "logs" / f"dag_id={dag_id}"
              / f"run_id={run_id}" / f"task_id={task_id}")
    return "\n".join(p.read_text(errors="replace") for p in sorted(folder.glob("**/*.log")))


def dag_runs(api: Api, dag_id: str) -> list[dict]:
    return api.ok("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100&order_by=id")["dag_runs"]


def test_a_cleared_and_a_timed_out_render_leave_no_query_on_the_source(stack, api, fixture_dsn,
                                                                      clock):
    """Both ways Airflow stops a running render end its COPY on the source within 5 s: a clear
    (SIGTERM → on_kill), then the cleared render's next try meeting its execution_timeout
    (the export's ``timeouts: {render: 30s}``) while the table is locked, so its COPY waits
    until then."""
    run_id = api.ok("POST", f"/api/v2/dags/{BIG}/dagRuns",
                    {"logical_date": clock.big_slot.isoformat(), "conf": {}})["dag_run_id"]
    day_text = f"{clock.big_day:%Y-%m-%d}"
    active = wait_for(lambda: [p for p, s in export_queries(fixture_dsn, day_text)
                               if s == "active"],
                      180, interval=0.2, what="the render's COPY to be active on the source")
    (pid,) = set(active)
    ti = api.ok("GET", f"/api/v2/dags/{BIG}/dagRuns/{run_id}/taskInstances/render")
    assert ti["state"] == "running", ti
    api.ok("POST", f"/api/v2/dags/{BIG}/clearTaskInstances",
           {"dry_run": False, "dag_run_id": run_id, "task_ids": ["render"],
            "only_failed": False, "include_downstream": True, "reset_dag_runs": True})
    cleared = time.monotonic()

    def original_gone() -> bool:
        return all(p != pid for p, _ in export_queries(fixture_dsn, day_text))

    wait_for(original_gone, 30, interval=0.1, what=f"backend {pid} to leave pg_stat_activity")
    gone_after = time.monotonic() - cleared
    print(f"cleared a running render of {ROWS} rows: backend {pid} (and its parallel workers) "
          f"gone from pg_stat_activity {gone_after:.2f} s after the clear")
    assert gone_after <= 5.0
    # The killed try's supervisor writes its log lines after the process ends: wait for them.
    def killed_try() -> str | None:
        text = task_logs(stack, BIG, run_id, "render")
        return text if "on_kill:" in text else None

    first_try = wait_for(killed_try, 60, interval=0.5,
                         what="the cleared render's on_kill line in its log")
    assert "on_kill: cancelled 1 running source query" in first_try

    # The next try waits on a lock we hold until its execution_timeout stops it.
    locked, release = threading.Event(), threading.Event()

    def hold_lock() -> None:
        with psycopg.connect(fixture_dsn) as conn:
            conn.execute("LOCK TABLE big_metrics IN ACCESS EXCLUSIVE MODE")
            locked.set()
            release.wait(120)

    holder = threading.Thread(target=hold_lock)
    holder.start()
    try:
        assert locked.wait(30), "could not lock big_metrics after the clear"
        waiting = wait_for(lambda: [p for p, _ in export_queries(fixture_dsn, day_text)],
                           120, interval=0.2, what="the render's next try to reach the source")
        appeared = time.monotonic()
        (retry_pid,) = set(waiting)
        wait_for(lambda: all(p != retry_pid for p, _ in export_queries(fixture_dsn, day_text)),
                 60, interval=0.1, what=f"backend {retry_pid} to leave pg_stat_activity")
        gone_after = time.monotonic() - appeared
    finally:
        release.set()
        holder.join()
    print(f"timed-out render: backend {retry_pid} gone {gone_after:.2f} s after it appeared "
          f"(execution_timeout {RENDER_TIMEOUT_S} s)")
    assert gone_after <= RENDER_TIMEOUT_S + 5.0
    ti = wait_for(lambda: (t := api.ok("GET", f"/api/v2/dags/{BIG}/dagRuns/"
                                              f"{run_id}/taskInstances/render"))["state"]
                  in ("up_for_retry", "failed") and t, 60, interval=1,
                  what="the timed-out render to end its try")
    assert ti["try_number"] == 2, ti
    folder = (Path(stack.env["AIRFLOW_HOME"]) / "logs" / f"dag_id={BIG}"
              / f"run_id={run_id}" / "task_id=render")

    def timed_out_try() -> str | None:
        text = "\n".join(p.read_text(errors="replace") for p in folder.glob("**/attempt=2*"))
        return text if "AirflowTaskTimeout" in text and "on_kill:" in text else None

    second_try = wait_for(timed_out_try, 60, interval=0.5,
                          what="the timed-out try's AirflowTaskTimeout and on_kill lines in its log")
    # The timeout's exception unwinds through the COPY reader, which cancels the query itself;
    # Airflow's on_kill after a timeout then finds nothing left to cancel (its backstop).
    assert "on_kill: cancelled 0 running source queries" in second_try, second_try[-3000:]


def test_restatement_runs_apart_and_publishes_a_correction(stack, api, fixture_dsn, clock):
    s0, past_slot = clock.s0, clock.past_slot
    dag_id = "widget_export__lateco__restated"
    past = api.ok("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                  {"logical_date": past_slot.isoformat(), "conf": {}})["dag_run_id"]

    def export_runs_done() -> list[dict] | None:
        runs = dag_runs(api, dag_id)
        mine = [r for r in runs if r["dag_run_id"] == past]
        return runs if mine and all(r["state"] == "success" for r in runs) else None

    # The export runs end with their first delivery: the scheduled on-time run (restated at
    # s0 + grace, ~2 h from now) and the past slot's run (restated at once) both
    # finish, holding no max_active_runs slot.
    runs = wait_for(export_runs_done, 150, interval=2, what=f"{dag_id} runs to succeed")
    # A restatement run's conf is the run key alone (ADR 0023): the slot is its last part.
    restatements = {datetime.strptime(r["conf"]["run_key"].rsplit("/", 1)[1],
                                      "%Y-%m-%dT%H:%MZ").replace(tzinfo=UTC): r
                    for r in dag_runs(api, "restatement__lateco")
                    if r["dag_run_id"].startswith("restate__lateco_restated_")}
    assert set(restatements) >= {s0, past_slot} and len(runs) >= 2
    on_time = restatements[s0]
    assert on_time["state"] == "queued"
    assert datetime.fromisoformat(on_time["run_after"]) == s0 + timedelta(hours=GRACE_HOURS)

    # Rows arrive late, after the first delivery; then the restatement may run.
    with psycopg.connect(fixture_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO late_metrics SELECT 'lateco', %s + g * interval '1 min', "
                     "1000 + g, now() - interval '1 s' FROM generate_series(1, %s) g",
                     (past_slot - timedelta(minutes=30), LATE_ROWS))
    api.ok("PATCH", "/api/v2/dags/restatement__lateco", {"is_paused": False})
    restate_id = restatements[past_slot]["dag_run_id"]
    wait_for(lambda: api.ok("GET", f"/api/v2/dags/restatement__lateco/dagRuns/{restate_id}")
             ["state"] == "success", 150, interval=2, what="the restatement run to succeed")

    (ledger,) = [r for r in stack.ledger_runs()
                 if r["schedule"] == "lateco/restated" and r["slot_utc"].startswith(
                     f"{past_slot:%Y-%m-%dT%H:%M}")]
    v1, v2 = ledger["artifacts"]
    assert (v1["rows"], v1["correction"]) == (ON_TIME_ROWS, False)
    assert (v2["rows"], v2["correction"], v2["supersedes"]) == (ON_TIME_ROWS + LATE_ROWS, True, 1)
    assert ledger["ready_at_utc"] == v1["generated_at_utc"]  # the deadline is judged on v1
    assert sorted((d["version"], d["state"]) for d in ledger["deliveries"]) == [
        (1, "acknowledged"), (2, "acknowledged")]


def test_watermark_sensor_reschedules_then_exports_at_the_deadline(stack, api, clock):
    s0 = clock.s0
    dag_id = "widget_export__lateco__watermarked"

    def on_time_run() -> dict | None:
        runs = [r for r in dag_runs(api, dag_id)
                if r["logical_date"] and datetime.fromisoformat(r["logical_date"]) == s0]
        return runs[0] if runs and runs[0]["state"] in ("success", "failed") else None

    run = wait_for(on_time_run, 240, interval=3, what=f"{dag_id}'s run of {s0} to finish")
    assert run["state"] == "success", run
    (ledger,) = [r for r in stack.ledger_runs() if r["schedule"] == "lateco/watermarked"
                 and r["slot_utc"].startswith(f"{s0:%Y-%m-%dT%H:%M}")]
    deadline = datetime.fromisoformat(ledger["deadline_utc"])
    render = api.ok("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run['dag_run_id']}"
                           "/taskInstances/render")
    assert datetime.fromisoformat(render["start_date"]) >= deadline
    pokes = task_logs(stack, dag_id, run["dag_run_id"], "wait_for_watermark")
    waits = pokes.count("waiting for the watermark to pass")
    # At least one poke found the watermark short and rescheduled the sensor (no worker held
    # meanwhile); a later poke gave up at the deadline and the export went ahead.
    assert waits >= 1, pokes[-2000:]
    assert "reached; exporting what has arrived" in pokes
    assert "reschedul" in pokes.lower(), pokes[-2000:]
    print(f"watermark sensor: {waits} pokes waited, then gave up at the deadline {deadline}")
