"""The catch-up, backfill and deadline tests' company on the shared stack (tests/system/scheduler).

The fixture company ``catchup-co`` (UTC) is written when the module starts, so its on-time slot
can be a few minutes ahead:

* ``google-ads`` primary: a daily cron at the on-time slot, deadline 5 min, recovery ``each``,
  with ``catchup: {lookback: 29 days}``: on its first scheduling the scheduler
  creates the newest due slot (yesterday's) and its ``recover_missed`` backfills the 29 before
  it — 30 missed daily slots recovering while the on-time slot comes due;
* ``facebook`` primary: the same slot, deadline 30 s, delivered to a webhook nobody listens
  on: its on-time run misses its deadline (Browse → Deadlines), its catch-up run does not show;
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
# Missed daily slots: yesterday's (scheduled at once) + the rest backfilled; the acceptance size
# (measured 5.5–7 min for the module on the old per-module stacks). Fewer were all exported
# before the on-time slot came due on the shared stack (10 in one run, 19 in another), so its
# start bar was not tested under catch-up.
MISSED = int(os.environ.get("CATCHUP_MISSED", "30"))
# At least this long between writing the config and the on-time slot: the dag-processor finds
# the new file (the shared stack looks every 5 s), the newest due slot runs and recover_missed
# queues the backlog (observed: all 29 queued ~40 s after the write; with 45 s, under a full
# suite's load, the last was queued 1.5 s after the slot).
LEAD = timedelta(seconds=75)

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
    primary:
      cron: "{minute} {hour} * * *"
      window: {{days: 3}}
      deadline: 5m
      recovery: each
      catchup: {{lookback: {lookback}}}
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

@dataclass
class CatchupStack:
    stack: SchedulerStack
    api: Api
    slot: datetime  # the on-time slot of ONTIME and MISSER
    written_at: datetime
    env: dict[str, str]

    def airflow(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        return self.stack.airflow(*args, timeout=timeout, check=False)

    def runs(self, dag_id: str) -> list[dict]:
        page = self.api.ok("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100&order_by=logical_date")
        return page["dag_runs"]


def adjust_edit(now: datetime) -> datetime:
    """When ``adjust``'s current version took effect: midnight UTC 8 days before ``now``."""
    return (now - ADJUST_EDIT_AGE).replace(hour=0, minute=0, second=0, microsecond=0)


def write_company(stack: SchedulerStack, now: datetime) -> datetime:
    """The fixture company, its on-time slot the first whole minute ``LEAD`` from now.

    ``adjust`` comes last, with yesterday's slot already exported (``exportctl run`` on the same
    config): its first scheduled run's ``recover_missed`` (recovery none) then records nothing
    before yesterday. Without that previous run it reaches back to the version's
    ``effective_from`` and records the slots the operator's backfill is about to run as skipped
    (recovery=none), a race the backfill lost on a quick machine."""
    slot = (now + LEAD + timedelta(seconds=59)).replace(second=0, microsecond=0)
    fields = {"minute": slot.minute, "hour": slot.hour, "far": FAR,
              "lookback": f"{(MISSED - 1) * 24}h",
              "adjust_from": f"{adjust_edit(now):%Y-%m-%dT%H:%M:%SZ}"}
    stack.write_company(COMPANY, COMPANY_YAML.format(**fields))
    stack.exportctl("demo", "seed", "--config", "dags/config")
    full = COMPANY_YAML.format(**fields) + ADJUST_YAML.format(**fields)
    with tempfile.TemporaryDirectory() as config:
        shutil.copy(stack.config_dir / "defaults.yaml", config)
        (Path(config) / f"{COMPANY}.yaml").write_text(full)
        yesterday = (now - timedelta(days=1)).replace(hour=3, minute=0, second=0, microsecond=0)
        stack.exportctl("run", config, "--schedule", f"{COMPANY}/adjust/primary", "--slot",
                        f"{yesterday:%Y-%m-%dT%H:%M:%SZ}")
    stack.write_company(COMPANY, full)
    return slot


def catchup_stack_fixture(shared_stack) -> Iterator[CatchupStack]:
    """catchup-co on the shared stack (its webhook's connection made the Airflow way, nothing
    listening there); withdrawn afterwards."""
    stack = shared_stack.stack.scoped([COMPANY])
    stack.airflow("connections", "add", "dead_hook", "--conn-uri", "http://127.0.0.1:9",
                  check=False)  # already there when the module runs twice on one stack
    try:
        written_at = now_utc()
        slot = write_company(stack, written_at)
        yield CatchupStack(stack, stack.api, slot, written_at, stack.env)
    finally:
        stack.withdraw([COMPANY])
