"""Outages and risk over a real ledger on PostgreSQL (ADR 0020): the median delivery time moves
the automatic risk point, ``exportctl runs`` shows the at-risk run (text and JSON), and the
outage report counts due slots from the timetable.

acme/daily-spend (07:00 Berlin, deadline 2 h): the 26 and 27 March periods delivered 80 and
100 min after their slots by the scheduler (median 90 min, later than half the deadline), the
29 March slot (05:00Z) registered and not delivered.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from tests.world import build_world

SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)
KEY = "acme/daily-spend/2026-03-29T05:00Z"
MIN = timedelta(minutes=1)


@pytest.fixture()
def world(tmp_path, monkeypatch, pg_ledger_database):
    from export_lib.cli.commands import run_one
    from export_lib.config.loader import load_catalog
    from export_lib.ledger import open_ledger
    from export_lib.ledger.schema import runs
    from export_lib.pipeline import RunContext, start_run

    world = build_world(tmp_path, pg_ledger_database, days=10).use(monkeypatch)
    config = str(world.config)
    for slot, took in (("2026-03-26T06:00Z", 80), ("2026-03-27T06:00Z", 100)):
        start = datetime.fromisoformat(slot.replace("Z", "+00:00"))
        assert run_one(config, "acme/daily-spend", slot, now=start + took * MIN)["state"] == "ready"
    led = open_ledger()
    with led.engine.begin() as conn:  # as the scheduler would have started them
        conn.execute(sa.update(runs).values(trigger="scheduled"))
    start_run(led, load_catalog(config).schedule("acme/daily-spend"), SLOT, now=SLOT + MIN,
              ctx=RunContext(origin="test", trigger="scheduled"))
    yield world, led
    led.engine.dispose()


def test_the_median_delivery_time_moves_the_automatic_risk_point(world):
    from export_lib.config.loader import load_catalog
    from export_lib.views.reports import run_filter, runs_page
    from export_lib.views.risk import RiskRule, median_delivery, risk_rules

    w, led = world
    schedules = load_catalog(w.config).schedules
    now = SLOT + 80 * MIN
    assert median_delivery(led.engine, ["acme/daily-spend"], now=now) == {
        "acme/daily-spend": 90 * MIN}
    rules = risk_rules(led.engine, schedules, now=now)
    assert rules["acme/daily-spend"] == RiskRule(None, 90 * MIN)
    page = runs_page(led.engine, run_filter(schedule_id="acme/daily-spend"), now=now, risk=rules)
    assert [(r["run_key"], r["at_risk"], r["risk_point_utc"]) for r in page.runs] == [
        (KEY, False, "2026-03-29T06:30:00Z"),
        ("acme/daily-spend/2026-03-27T06:00Z", False, "2026-03-27T07:30:00Z"),
        ("acme/daily-spend/2026-03-26T06:00Z", False, "2026-03-26T07:30:00Z")]
    later = runs_page(led.engine, run_filter(schedule_id="acme/daily-spend"),
                      now=SLOT + 95 * MIN, risk=rules)
    assert [r["at_risk"] for r in later.runs] == [True, False, False]
    # without the rules (no config): half the deadline
    bare = runs_page(led.engine, run_filter(schedule_id="acme/daily-spend"), now=now)
    assert (bare.runs[0]["at_risk"], bare.runs[0]["risk_point_utc"]) == (
        True, "2026-03-29T06:00:00Z")


def test_exportctl_runs_shows_the_run_at_risk(world, monkeypatch, capsys):
    from export_lib.cli import commands
    from export_lib.cli.main import main

    w, _ = world
    monkeypatch.setattr(commands, "_now", lambda: SLOT + 95 * MIN)
    assert main(["runs", "--schedule", "acme/daily-spend", "--config", str(w.config)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:7] == ["RUN", "STATE", "DEADLINE", "DELIVERED", "AT", "LATE", "BY"]
    assert "RISK" in lines[0]
    at_risk = [line.split()[:5] for line in lines[1:] if "AT RISK" in line]
    assert at_risk == [[KEY, "registered", "2026-03-29T07:00:00Z", "-", "-"]]
    assert main(["runs", "--json", "--schedule", "acme/daily-spend", "--config",
                 str(w.config)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["run_key"], r["at_risk"]) for r in rows] == [
        (KEY, True), ("acme/daily-spend/2026-03-27T06:00Z", False),
        ("acme/daily-spend/2026-03-26T06:00Z", False)]
    assert rows[0]["risk_point_utc"] == "2026-03-29T06:30:00Z"  # the 90 min median


def test_the_outage_report_counts_due_slots_from_the_timetable(world):
    from export_lib.config.loader import load_catalog
    from export_lib.views.risk import outage_report

    w, led = world
    daily = load_catalog(w.config).schedule("acme/daily-spend")
    # 30 March 05:00Z fell due and nothing ran (the scheduler was down): missing, then missed.
    (t,) = outage_report(led.engine, [daily], now=SLOT + timedelta(days=1, minutes=95),
                         horizon=timedelta(hours=48))
    assert (t.expected, t.missing, t.missed) == (2, 1, 1)  # 29 March: never delivered
    assert [r["slot_utc"] for r in t.at_risk] == ["2026-03-30T05:00:00Z"]
    assert t.at_risk[0]["run_key"] is None
    assert t.at_risk[0]["risk_point_utc"] == "2026-03-30T06:30:00Z"  # the median, no run
