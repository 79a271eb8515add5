"""The catch-up, backfill and deadline tests' company on the shared stack (tests/system/scheduler).

The fixture company ``catchup-co`` (UTC) is written when the module starts, so its on-time slot
can be a few minutes ahead:

* ``google-ads`` primary: a daily cron at the on-time slot, deadline 5 min, recovery ``each``,
  with ``catchup: {lookback: (MISSED - 1) days}``: on its first scheduling the scheduler
  creates the newest due slot (yesterday's) and its ``recover_missed`` backfills the ones before
  it — ``MISSED`` daily slots recovering while the on-time slot comes due. It reads
  ``catchup_metrics`` in the shared stack's fixture database, a view whose every read waits
  for a gate (:class:`Gate`) the test opens once the on-time run has started: the backlog is
  still there when the slot comes due by construction, however fast or loaded the machine
  (counting on the backlog's size raced both ways on the shared stack);
* ``facebook`` primary: the same slot, deadline 30 s, delivered to a webhook nobody listens
  on: its on-time run misses its deadline (Browse → Deadlines), its catch-up run does not show;
* ``tiktok`` primary: the same slot and source, recovery ``each`` with ``BATCH_MISSED`` daily
  slots missed, more than the batch threshold: its ``recover_missed`` asks for batches of
  ``recovery_batch__catchup-co`` (ADR 0032), held at the same gate while the on-time slot
  comes due;
* ``adjust`` primary: 03:00 daily, recovery ``none``: backfilled by the tests over 10–7 days ago.
  Its current version (window 3 days) is in force from ``ADJUST_EDIT_AGE`` ago; ``history``
  keeps the one before (window 2 days), which the backfill's older slots must get.

Secondaries start in 2030 (``effective_from``) so they create no runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from tests.system.scheduler.harness import SchedulerStack
from tests.system.soak.stack import Api, now_utc

COMPANY = "catchup-co"
ONTIME = f"data_export__{COMPANY}__google-ads__primary"
MISSER = f"data_export__{COMPANY}__facebook__primary"
BACKFILLED = f"data_export__{COMPANY}__adjust__primary"
# Missed daily slots: yesterday's (scheduled at once) + the rest backfilled. The gate keeps them
# waiting, so their number only needs to exceed the catch-up budget (2) a few times over for
# "oldest first, never more than the budget at once" to mean something; CATCHUP_MISSED=30 is
# the size the module had before the gate (5.5–7 min on its own stack).
MISSED = int(os.environ.get("CATCHUP_MISSED", "8"))
BATCHED = f"data_export__{COMPANY}__tiktok__primary"
BATCH_DAG = f"recovery_batch__{COMPANY}"
# tiktok's missed daily slots (yesterday's scheduled + the rest in batches): 20 in make test,
# a year (CATCHUP_BATCH_MISSED=365) in make acceptance.
BATCH_MISSED = int(os.environ.get("CATCHUP_BATCH_MISSED", "20"))
# At least this long between writing the config and the on-time slot: the dag-processor finds
# the new file (the shared stack looks every 5 s), the newest due slot runs and recover_missed
# queues the backlog (observed: 29 queued ~40 s after the write; with 45 s, under a full
# suite's load, the last of 29 was queued 1.5 s after the slot; with 75 s, on a machine half as
# fast at load 12, the 8 were queued a minute after it: CI, 2 Dec).
LEAD = timedelta(seconds=150)
# The longest a read of catchup_metrics waits for the gate: a run of a single test (which never
# opens it) still finishes.
GATE_MAX_S = 240

ADJUST_EDIT_AGE = timedelta(days=8)
FAR = '{effective_from: "2030-01-01T00:00:00Z"}'
COMPANY_YAML = """\
company:
  id: catchup-co
  name: Catch-up Co
  timezone: UTC
  owner: data@catchup.example
  status: active

data_exports:
  - channel: google-ads
    query:
      source: fixture_source
      table: catchup_metrics
      columns: [company_id, channel, metric_date, impressions, clicks, spend, updated_at]
      timestamp_column: updated_at
      tenant_column: company_id
    primary:
      cron: "{minute} {hour} * * *"
      window: {{days: 3}}
      deadline: 5m
      recovery: each
      catchup: {{lookback: {lookback}}}
    secondary: {far}
  - channel: tiktok
    query:
      source: fixture_source
      table: catchup_metrics
      columns: [company_id, channel, metric_date, impressions, clicks, spend, updated_at]
      timestamp_column: updated_at
      tenant_column: company_id
    primary:
      cron: "{minute} {hour} * * *"
      window: {{days: 1}}
      deadline: 5m
      recovery: each
      catchup: {{lookback: {batch_lookback}}}
    secondary: {far}
  - channel: facebook
    primary:
      cron: "{minute} {hour} * * *"
      window: {{days: 3}}
      deadline: 30s
      recovery: none
      destinations:
        - {{id: nobody-listens, type: webhook, conn_id: dead_hook, endpoint: /hooks/exports}}
    secondary: {far}
"""
ADJUST_YAML = """\
  - channel: adjust
    primary:
      cron: "0 3 * * *"
      window: {{days: 3}}
      recovery: none
      effective_from: "{adjust_from}"
      history:
        - window: {{days: 2}}
    secondary: {far}
"""

class Gate:
    """``catchup_metrics`` (google-ads' source) in the fixture database: catchup-co's rows of
    the last ``MISSED`` + 3 days behind a view whose reads wait until the gate is open (or
    ``GATE_MAX_S`` passed). Every name is catchup-co's."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def create(self, now: datetime) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("DROP VIEW IF EXISTS catchup_metrics")  # the module run twice
            conn.execute("DROP TABLE IF EXISTS catchupco_rows, catchupco_gate")
            conn.execute("DROP FUNCTION IF EXISTS catchupco_wait()")
            conn.execute("CREATE TABLE catchupco_rows (company_id text, channel text, "
                         "metric_date date, impressions bigint, clicks bigint, "
                         "spend numeric(12, 2), updated_at timestamp)")
            conn.execute(
                "INSERT INTO catchupco_rows SELECT %s, 'google-ads', (%s::timestamp - g * "
                "interval '6 hours')::date, 1000 + g, g, g / 4.0, %s::timestamp - g * "
                "interval '6 hours' FROM generate_series(1, %s) g",
                (COMPANY, now.replace(tzinfo=None), now.replace(tzinfo=None),
                 (max(MISSED, BATCH_MISSED) + 3) * 4))
            conn.execute("CREATE TABLE catchupco_gate (open boolean NOT NULL)")
            conn.execute("INSERT INTO catchupco_gate VALUES (false)")
            conn.execute(
                "CREATE FUNCTION catchupco_wait() RETURNS boolean VOLATILE LANGUAGE plpgsql AS $$ "
                "DECLARE began timestamptz := clock_timestamp(); BEGIN "
                "WHILE NOT (SELECT open FROM catchupco_gate) AND clock_timestamp() < began + "
                f"interval '{GATE_MAX_S} seconds' LOOP PERFORM pg_sleep(0.5); END LOOP; "
                "RETURN true; END $$")
            conn.execute("CREATE VIEW catchup_metrics AS SELECT * FROM catchupco_rows "
                         "WHERE (SELECT catchupco_wait())")

    def open(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("UPDATE catchupco_gate SET open = true")


@dataclass
class CatchupStack:
    stack: SchedulerStack
    api: Api
    slot: datetime  # the on-time slot of ONTIME and MISSER
    written_at: datetime
    env: dict[str, str]
    gate: Gate

    def airflow(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        return self.stack.airflow(*args, timeout=timeout, check=False)

    def runs(self, dag_id: str) -> list[dict]:
        page = self.api.ok("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100&order_by=logical_date")
        return page["dag_runs"]


def adjust_edit(now: datetime) -> datetime:
    """When ``adjust``'s current version took effect: midnight UTC 8 days before ``now``."""
    return (now - ADJUST_EDIT_AGE).replace(hour=0, minute=0, second=0, microsecond=0)


def write_company(stack: SchedulerStack, now: datetime) -> datetime:
    """The fixture company, its on-time slot the first whole minute ``LEAD`` after the slow
    preparation below is done.

    Prepared on a copy of the config first (demo rows, and ``adjust``'s yesterday exported by
    ``exportctl run``): its first scheduled run's ``recover_missed`` (recovery none) then
    records nothing before yesterday. Without that previous run it reaches back to the version's
    ``effective_from`` and records the slots the operator's backfill is about to run as skipped
    (recovery=none), a race the backfill lost on a quick machine. Only then is the slot chosen
    and the file written to the stack, so ``LEAD`` covers the scheduler's own work alone (two
    exportctl processes inside it took the lead away on a slow machine: CI, 2 Dec)."""
    fields = {"far": FAR, "lookback": f"{(MISSED - 1) * 24}h",
              "batch_lookback": f"{(BATCH_MISSED - 1) * 24}h",
              "adjust_from": f"{adjust_edit(now):%Y-%m-%dT%H:%M:%SZ}"}

    def full(slot: datetime) -> str:
        timing = {"minute": slot.minute, "hour": slot.hour}
        return COMPANY_YAML.format(**fields, **timing) + ADJUST_YAML.format(**fields, **timing)

    with tempfile.TemporaryDirectory() as config:
        shutil.copy(stack.config_dir / "defaults.yaml", config)
        (Path(config) / f"{COMPANY}.yaml").write_text(full(now))
        stack.exportctl("demo", "seed", "--config", config)
        yesterday = (now - timedelta(days=1)).replace(hour=3, minute=0, second=0, microsecond=0)
        stack.exportctl("run", config, "--schedule", f"{COMPANY}/adjust/primary", "--slot",
                        f"{yesterday:%Y-%m-%dT%H:%M:%SZ}")
    slot = (now_utc() + LEAD + timedelta(seconds=59)).replace(second=0, microsecond=0)
    stack.write_company(COMPANY, full(slot))
    return slot


def catchup_stack_fixture(shared_stack) -> Iterator[CatchupStack]:
    """catchup-co on the shared stack (its webhook's connection made the Airflow way, nothing
    listening there); withdrawn afterwards."""
    stack = shared_stack.stack.scoped([COMPANY])
    stack.airflow("connections", "add", "dead_hook", "--conn-uri", "http://127.0.0.1:9",
                  check=False)  # already there when the module runs twice on one stack
    gate = Gate(shared_stack.fixture_dsn)
    gate.create(now_utc())
    stack.add_sources(fixture_source={"catchup_metrics": "company_id"})
    stack.grant_connection("dead_hook", "webhook", [COMPANY])
    try:
        written_at = now_utc()
        slot = write_company(stack, written_at)
        yield CatchupStack(stack, stack.api, slot, written_at, stack.env, gate)
    finally:
        gate.open()
        stack.withdraw([COMPANY])
