"""The obligations read model on PostgreSQL: outcomes computed, filtered and paginated in SQL,
the per-schedule strip with its missing slot, the drill-down, and the release of a held run.

The ledger is filled by the real pipeline (``run_one``, ``start_run``) at chosen ``now``s:
acme/daily-spend (07:00 Berlin, deadline 2 h) delivered on time on 27 March, nothing on 28
March, late by 3 h on 29 March; acme/hourly-clicks (deadline 30 min) under ``late_start: hold``
started 1 h 30 min after its deadline, so held.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from export_lib.errors import ConfigError, RunHeldError, WindowError
from tests.world import build_world

D27, D28, D29 = (datetime(2026, 3, d, h, 0, tzinfo=UTC) for d, h in ((27, 6), (28, 6), (29, 5)))
HELD = datetime(2026, 3, 29, 3, 0, tzinfo=UTC)
NOW = D29 + timedelta(hours=6)


@pytest.fixture()
def ledger(tmp_path, monkeypatch, pg_ledger_database):
    from export_lib.cli.commands import run_one
    from export_lib.config.loader import load_catalog
    from export_lib.ledger import open_ledger
    from export_lib.pipeline import RunContext, start_run

    world = build_world(tmp_path, pg_ledger_database, days=10).use(monkeypatch)
    acme = world.config / "acme.yaml"
    acme.write_text(acme.read_text().replace("    deadline: 30m\n",
                                             "    deadline: 30m\n    late_start: hold\n", 1))
    config = str(world.config)
    assert run_one(config, "acme/daily-spend", "2026-03-27T06:00Z",
                   now=D27 + timedelta(minutes=30))["state"] == "ready"
    assert run_one(config, "acme/daily-spend", "2026-03-29T05:00Z",
                   now=D29 + timedelta(hours=5))["state"] == "ready"
    led = open_ledger()
    hourly = load_catalog(config).schedule("acme/hourly-clicks")
    with pytest.raises(RunHeldError, match="late_start=hold: started 1 h 30 min after"):
        start_run(led, hourly, HELD, now=HELD + timedelta(hours=2),
                  ctx=RunContext(origin="test", trigger="scheduled"))
    yield led
    led.engine.dispose()


def _selects(engine, call):
    seen: list[str] = []

    def record(conn, cursor, statement, *rest):
        seen.append(statement)

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        result = call()
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    return seen, result


def test_runs_newest_first_with_outcomes_filtered_and_paginated_in_sql(ledger):
    from export_lib.views.obligations import obligation_filter, obligations_page

    page = obligations_page(ledger.engine, obligation_filter(), now=NOW)
    assert [(r["run_key"], r["outcome"], r["lateness"]) for r in page["runs"]] == [
        ("acme/daily-spend/2026-03-29T05:00Z", "late", "late by 3 h 00 min"),
        ("acme/hourly-clicks/2026-03-29T03:00Z", "held", "deadline passed 7 h 30 min ago"),
        ("acme/daily-spend/2026-03-27T06:00Z", "on_time", "1 h 30 min before the deadline"),
    ]
    assert page["runs"][0]["slot_local"] == "2026-03-29 07:00 CEST"
    statements, second = _selects(ledger.engine, lambda: obligations_page(
        ledger.engine, obligation_filter(limit=1, offset=1), now=NOW))
    assert len(statements) == 2 and "LIMIT" in statements[1] and "OFFSET" in statements[1]
    assert (second["total"], [r["outcome"] for r in second["runs"]]) == (3, ["held"])
    late = obligations_page(ledger.engine, obligation_filter(outcome="late"), now=NOW)
    assert [r["run_key"] for r in late["runs"]] == ["acme/daily-spend/2026-03-29T05:00Z"]
    ranged = obligations_page(ledger.engine, obligation_filter(
        schedule_id="acme/daily-spend", since=datetime(2026, 3, 27, tzinfo=UTC),
        until=datetime(2026, 3, 28, tzinfo=UTC)), now=NOW)
    assert [r["outcome"] for r in ranged["runs"]] == ["on_time"]
    hidden = obligation_filter(visible_companies=frozenset({"kiwi-outdoors"}))
    assert obligations_page(ledger.engine, hidden, now=NOW)["total"] == 0
    with pytest.raises(ConfigError, match="unknown state 'done'; valid: on_time, late, missed"):
        obligation_filter(outcome="done")


def test_the_strip_shows_the_missing_slot_and_the_next_runs(ledger):
    from export_lib.config.loader import load_catalog
    from export_lib.views.obligations import schedule_strips

    daily = load_catalog(ledger_config()).schedule("acme/daily-spend")
    statements, (strip,) = _selects(ledger.engine, lambda: schedule_strips(
        ledger.engine, [daily], now=NOW, slots=4))
    assert len(statements) == 3  # runs of the slots shown, last delivered, first run
    assert [(c["slot_utc"], c["outcome"]) for c in strip["strip"]] == [
        ("2026-03-26T06:00:00Z", "untracked"), ("2026-03-27T06:00:00Z", "on_time"),
        ("2026-03-28T06:00:00Z", "no_run"), ("2026-03-29T05:00:00Z", "late")]
    assert strip["strip"][2]["lateness"] == "deadline passed 1 d 3 h ago"
    assert strip["owner"] == "data-team@acme.example"
    assert strip["last_delivered_period"] == "2026-03-28"  # the 29 March slot's window
    assert strip["next_runs"][0] == {"local": "2026-03-30 07:00 CEST",
                                     "utc": "2026-03-30T05:00:00Z"}


def ledger_config() -> str:
    import os

    return os.environ["EXPORT_CONFIG_DIR"]


def test_drill_down_and_release_of_the_held_run(ledger):
    from export_lib.views.run_detail import available_actions, release_held, run_detail

    late = run_detail(ledger.engine, "acme/daily-spend/2026-03-29T05:00Z", now=NOW)
    (artifact,) = late["artifacts"]
    (delivery,) = late["deliveries"]
    assert (artifact["version"], artifact["supersedes"], len(artifact["sha256"])) == (1, None, 64)
    assert artifact["rows"] > 0 and late["window_start_utc"] == "2026-03-27T23:00:00Z"
    assert (delivery["destination"], delivery["state"], delivery["receipt"] is not None) == (
        "acme-dir", "acknowledged", True)
    assert [a["outcome"] for a in delivery["history"]] == ["delivered"]
    assert [a["state"] for a in late["attempts"]] == ["published"]
    assert available_actions(late) == {"release": [], "requeue": [], "revoke": ["1"],
                                       "cancel": [], "pause": ["acme/daily-spend"],
                                       "unpause": []}
    assert available_actions({**late, "paused": "company acme paused by x"})["unpause"] == [
        "acme/daily-spend"]
    with pytest.raises(WindowError, match="is not held \\(it is delivered late\\); nothing"):
        release_held(ledger, late["run_key"], who="ana", now=NOW)
    key = "acme/hourly-clicks/2026-03-29T03:00Z"
    actions = available_actions(run_detail(ledger.engine, key, now=NOW))
    assert (actions["release"], actions["cancel"], actions["revoke"]) == (["run"], ["run"], [])
    release_held(ledger, key, who="ana", now=NOW)
    held = run_detail(ledger.engine, key, now=NOW)
    assert (held["outcome"], held["reason"]) == ("released", "released by ana")
    assert held["events"][-1]["detail"] == "released by operator ana"
    assert ledger.is_released(key)


def test_an_exhausted_delivery_is_unresolved_until_requeued(ledger):
    from export_lib.views.obligations import obligation_filter, obligations_page
    from export_lib.views.run_detail import available_actions, requeue_delivery, run_detail

    key = "acme/daily-spend/2026-03-27T06:00Z"
    with ledger.engine.begin() as conn:  # the delivery gave up, whatever decided it
        conn.execute(sa.text("UPDATE deliveries SET state = 'exhausted', acknowledged_at = NULL, "
                             "last_error = '550 mailbox gone' WHERE run_key = :k"), {"k": key})
    unresolved = obligations_page(ledger.engine, obligation_filter(outcome="unresolved"), now=NOW)
    assert [r["run_key"] for r in unresolved["runs"]] == [key]
    assert available_actions(run_detail(ledger.engine, key, now=NOW))["requeue"] == ["acme-dir"]
    with pytest.raises(ConfigError, match="has no destination 'nowhere'"):
        requeue_delivery(ledger, key, "nowhere", who="ana", why="x", now=NOW)
    requeue_delivery(ledger, key, "acme-dir", who="ana", why="mailbox restored", now=NOW)
    after = run_detail(ledger.engine, key, now=NOW)
    assert (after["outcome"], after["deliveries"][0]["state"]) == ("missed", "pending")
    assert after["events"][-1]["detail"].endswith("by ana: mailbox restored")
    with pytest.raises(WindowError, match="nothing to requeue: the delivery of .* is not exhausted"):
        requeue_delivery(ledger, key, "acme-dir", who="ana", why="again", now=NOW)


def test_the_strip_marks_where_a_new_timing_starts(ledger, tmp_path):
    """issue 22: after ``exportctl reschedule`` (09:00 from 30 March) the strip shows the new
    slots and a blue bar at the first one, naming the version and the new timing."""
    import shutil

    from export_lib.config.edits import timing_edit_text, write_validated
    from export_lib.config.loader import load_catalog
    from export_lib.views.obligations import schedule_strips
    from plugins.export_airflow.pages.obligations_html import schedules_table

    config = tmp_path / "edited"
    shutil.copytree(ledger_config(), config)
    acme = config / "acme.yaml"
    write_validated(config, acme, timing_edit_text(
        acme.read_text(), kind="widget", ident="daily-spend", data_kind=None,
        new={"export_hour": 9}, old={"export_hour": 7},
        effective_from=datetime(2026, 3, 30, 7, 0, tzinfo=UTC)))
    daily = load_catalog(config).schedule("acme/daily-spend")
    later = datetime(2026, 3, 31, 12, 0, tzinfo=UTC)
    (strip,) = schedule_strips(ledger.engine, [daily], now=later, slots=4)
    cells = strip["strip"]
    # 07:00 CEST (05:00Z) on 30 March is still the old timing's: the switch is at 07:00Z
    assert [c["slot_utc"] for c in cells] == [
        "2026-03-29T05:00:00Z", "2026-03-30T05:00:00Z", "2026-03-30T07:00:00Z",
        "2026-03-31T07:00:00Z"]
    assert [c.get("version_change") for c in cells] == [
        None, None, f"config version {daily.config_version[:12]} from 2026-03-30T07:00:00Z: "
        "new timing 09:00 Europe/Berlin, every 24 h", None]
    html = schedules_table([strip])
    assert html.count("vchange") == 1 and "data-version-change='config version" in html
    assert strip["next_runs"][0]["local"] == "2026-04-01 09:00 CEST"


def test_the_demo_first_screen_after_its_first_catch_up_shows_no_miss(tmp_path, monkeypatch,
                                                                       pg_ledger_database):
    """``make run`` on a fresh ledger, as the DAGs do it (ADR 0006): every shipped schedule runs
    its newest due slot at once (04:11, a minute after the stack starts), and the ``recovery:
    each`` ones backfill the 48 h behind it a minute later — nothing delivered yet. Every
    deadline that had passed when the stack started is not tracked (ADR 0029): no red M, no
    missed figure; the one deadline still ahead (acme's hourly 04:00, due 04:30) is waiting."""
    from export_lib.config.loader import load_catalog
    from export_lib.ledger import open_ledger
    from export_lib.pipeline import RunContext, register_run
    from export_lib.views.obligations import schedule_strips
    from export_lib.views.risk import due_slots, outage_report

    world = build_world(tmp_path, pg_ledger_database, days=3).use(monkeypatch)
    started = datetime(2026, 3, 30, 4, 10, tzinfo=UTC)
    catalog = load_catalog(world.config)
    led = open_ledger()
    for s in catalog.schedules:
        *older, newest = due_slots(s, started - timedelta(hours=48), started)
        register_run(led, s, newest, now=started + timedelta(minutes=1),
                     ctx=RunContext(origin="test", trigger="scheduled"))
        for slot in older if s.policies.recovery == "each" else ():
            register_run(led, s, slot, now=started + timedelta(minutes=2),
                         ctx=RunContext(origin="test", trigger="backfill"))
    now = started + timedelta(minutes=5)
    try:
        strips = schedule_strips(led.engine, catalog.schedules, now=now)
        tallies = outage_report(led.engine, catalog.schedules, now=now)
    finally:
        led.engine.dispose()
    shown = {(strip["schedule"], c["slot_utc"], c["outcome"]) for strip in strips
             for c in strip["strip"] if c["outcome"] != "untracked"}
    assert shown == {("acme/hourly-clicks", "2026-03-30T04:00:00Z", "waiting")}, shown
    assert len(strips) == len(catalog.schedules) >= 8
    assert [(t.schedule_id, t.missed) for t in tallies if t.missed] == []


def test_a_not_tracked_period_shows_whether_it_was_delivered():
    """A first catch-up's period (not tracked, ADR 0029) keeps its grey colour, never a verdict;
    the square says whether a file went out: a grey check when delivered, a dash when not."""
    from plugins.export_airflow.pages.obligations_html import _cell, legend

    base = {"kind": "run", "outcome": "untracked", "run_key": "acme/daily-spend/k",
            "slot_local": "2026-03-29 07:00 CEST", "slot_utc": "2026-03-29T05:00:00Z"}
    delivered = _cell({**base, "delivered_at_utc": "2026-03-30T04:12:00Z"})
    nothing = _cell({**base, "delivered_at_utc": None})
    assert "class='cell o-untracked'" in delivered and delivered.endswith(">✓</a>")
    assert "class='cell o-untracked'" in nothing and nothing.endswith(">–</a>")
    assert "✓</span> not tracked, delivered" in legend()
