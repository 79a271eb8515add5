"""Timing edits from an explicit slot, end to end (issue 22 item 2 acceptance, library side;
the running-stack side is tests/system/scheduler/test_reschedule.py).

Three periods of acme/daily-spend go out at 07:00 Berlin; support moves the export to 09:00 with
``exportctl reschedule … --apply``: validate passes, the first 09:00 slot (whose day went out at
07:00) is skipped as delivered, the next one exports, the gap audit plans nothing, and no period
has two files. The same edit made by hand without ``effective_from`` is refused by ``exportctl
validate`` with the lines to add. ``interval_hours`` 6 → 4 and a timezone change likewise send
no period twice.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from export_lib.config.loader import load_catalog
from export_lib.periods.slots import is_slot, next_slots
from tests.world import DAILY, build_world

OLD_SLOTS = ("2026-03-26T06:00Z", "2026-03-27T06:00Z", "2026-03-28T06:00Z")  # 07:00 CET
SIX_HOURLY = "kiwi-outdoors/six-hourly-orders"


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture()
def world(tmp_path, monkeypatch):
    world = build_world(tmp_path / "w", days=6).use(monkeypatch)
    for slot in OLD_SLOTS:
        assert world.run(DAILY, slot)["state"] == "ready"
    return world


def _periods(world, schedule: str) -> Counter[tuple[str, str]]:
    """Ready runs per period (window) of a schedule."""
    return Counter((r["window_start_utc"], r["window_end_utc"]) for r in world.runs()
                   if r["schedule"] == schedule and r["state"] == "ready")


def _files(world, schedule: str) -> list[str]:
    company, export = schedule.split("/", 1)
    return sorted(p for p in world.visible_files() if p.endswith((".csv", ".parquet"))
                  and "/outbox/" in p
                  and f"{company}__{export.replace('/', '__')}__" in p)


def test_reschedule_apply_moves_the_hour_and_sends_no_period_twice(world):
    planned = world.exportctl("reschedule", DAILY, "--config", str(world.config),
                              "--export-hour", "9", "--from", "2026-03-28T07:00Z", "--apply")
    assert planned.returncode == 0, planned.stderr
    out = planned.stdout
    assert "acme/daily-spend: export_hour 7 → 9" in out
    assert "effective_from: 2026-03-28T08:00:00Z (2026-03-28 09:00 Europe/Berlin)" in out
    assert ("2026-03-27               slot 2026-03-28T08:00:00Z (new): skipped: already "
            "delivered by slot 2026-03-28T06:00:00Z") in out, out
    # (these slots are long past on the real clock: catch-up's to export, recovery each)
    assert ("2026-03-28               slot 2026-03-29T07:00:00Z (new): already due: exported by "
            "catch-up per the recovery policy") in out, out
    assert "wrote " in out and "acme.yaml" in out
    # Recorded like a change made on the company page: who, when, before and after.
    import getpass

    from export_lib.ledger import open_ledger
    from export_lib.ledger.controls import list_actions

    (action,) = list_actions(open_ledger(world.ledger_url), company="acme")
    assert (action.who, action.action, action.target_id, action.outcome) == (
        f"{getpass.getuser()} (exportctl)", "reschedule", DAILY,
        "acme/daily-spend: export_hour 7 → 9 from 2026-03-28T08:00:00Z; wrote acme.yaml")
    validated = world.exportctl("validate", str(world.config))
    assert validated.returncode == 0, validated.stdout + validated.stderr

    daily = load_catalog(world.config).schedule(DAILY)
    assert next_slots(daily.timing, _at("2026-03-28T06:00:01Z"), 3) == (
        _at("2026-03-28T08:00Z"), _at("2026-03-29T07:00Z"), _at("2026-03-30T07:00Z"))
    assert not is_slot(daily.timing, _at("2026-03-29T05:00Z"))  # 07:00 CEST: no more
    skipped = world.run(DAILY, "2026-03-28T08:00Z")
    assert skipped["state"] == "skipped" and skipped["skipped"].startswith(
        "already delivered: period 2026-03-27 Europe/Berlin of acme/daily-spend"), skipped
    first = world.run(DAILY, "2026-03-29T07:00Z")
    assert (first["state"], first["window_start_utc"], first["window_end_utc"]) == (
        "ready", "2026-03-27T23:00:00Z", "2026-03-28T23:00:00Z")
    refused = world.exportctl("run", str(world.config), "--schedule", DAILY, "--slot",
                              "2026-03-29T05:00Z")
    assert refused.returncode == 2, refused.stderr
    assert "2026-03-29T05:00:00Z is not a slot of acme/daily-spend (09:00 Europe/Berlin" in \
        refused.stderr, refused.stderr

    from export_lib.pipeline.audit_apply import run_audit

    now = _at("2026-03-29T09:00Z")
    result = run_audit(load_catalog(world.config, only="acme"), world.ledger(),
                       since=_at("2026-03-25T00:00Z"), until=now, now=now, company="acme",
                       dry_run=True)
    assert [a for a in result.plan.actions if a.gap.schedule_id == DAILY
            and a.action != "skip"] == []
    assert not result.plan.backfills.get("widget_export__acme__daily-spend")
    periods = _periods(world, DAILY)
    assert len(periods) == 4 and set(periods.values()) == {1}, periods
    assert len(_files(world, DAILY)) == 4, _files(world, DAILY)


def test_a_hand_edit_without_effective_from_is_refused_with_the_lines_to_add(world):
    acme = world.config / "acme.yaml"
    text = acme.read_text()
    acme.write_text(text.replace("    export_hour: 7 ", "    export_hour: 9 ", 1))
    started = datetime.now(UTC)
    refused = world.exportctl("validate", str(world.config))
    assert refused.returncode == 1, refused.stdout
    (line,) = [ln for ln in refused.stdout.splitlines() if "acme/daily-spend" in ln]
    assert line.startswith(f"{acme}: widget_exports[0]: the timing of acme/daily-spend changed "
                           "(export_hour 7 → 9) but it already ran under the old timing (newest "
                           "run acme/daily-spend/2026-03-28T06:00Z)"), line
    found = re.search(r"add 'effective_from: (\S+)' \(the next slot after now, (\S+ \S+) "
                      r"Europe/Berlin: the old timing fires no more\) and the history entry "
                      r"'- \{export_hour: 7\}' to the export, or run 'exportctl reschedule "
                      r"acme/daily-spend --export-hour 9 --apply' on the file as it was$", line)
    assert found, line
    suggested = _at(found[1])  # the next 07:00 or 09:00 Berlin, whichever comes first
    nine = load_catalog(world.config).schedule(DAILY).timing.plain  # 09:00 Berlin, as edited
    seven = nine.model_copy(update={"export_hour": 7})
    assert started < suggested < started + timedelta(days=1)
    assert suggested == min(next_slots(seven, started, 1)[0], next_slots(nine, started, 1)[0])
    assert found[2] == f"{suggested.astimezone(nine.zone):%Y-%m-%d %H:%M}"

    # The lines it names, added by hand, make the file valid.
    acme.write_text(acme.read_text().replace(
        "    interval_hours: 24\n", f"    interval_hours: 24\n    effective_from: {found[1]}\n"
        "    history:\n      - {export_hour: 7}\n", 1))
    fixed = world.exportctl("validate", str(world.config))
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    skipped = world.exportctl("validate", str(world.config), "--no-ledger")
    assert skipped.returncode == 0


def test_six_hourly_to_four_hourly_sends_no_period_twice(world):
    for slot in ("2026-03-27T13:00Z", "2026-03-27T19:00Z", "2026-03-28T01:00Z"):  # 02/08/14 NZDT
        assert world.run(SIX_HOURLY, slot)["state"] == "ready"
    moved = world.exportctl("reschedule", SIX_HOURLY, "--config", str(world.config),
                            "--interval-hours", "4", "--from", "2026-03-28T02:00Z", "--apply",
                            "--json")
    assert moved.returncode == 0, moved.stderr
    plan = json.loads(moved.stdout)
    assert plan["effective_from"] == "2026-03-28T05:00:00Z"  # 18:00 NZDT
    assert {p["outcome"] for p in plan["periods"] if p["timing"] == "new"} == {
        "already due: exported by catch-up per the recovery policy"}
    for slot in ("2026-03-28T05:00Z", "2026-03-28T09:00Z"):
        assert world.run(SIX_HOURLY, slot)["state"] == "ready"
    periods = _periods(world, SIX_HOURLY)
    assert len(periods) == 5 and set(periods.values()) == {1}, periods



def test_a_timezone_change_sends_no_period_twice(world):
    """The daily export's slots move to 07:00 New York (its own ``timezone``, ADR 0005 decision
    5); its windows stay Berlin calendar days, so the first New York slot reports the day the
    last Berlin slot sent: skipped; the next one exports."""
    moved = world.exportctl("reschedule", DAILY, "--config", str(world.config), "--timezone",
                            "America/New_York", "--from", "2026-03-28T07:00Z", "--apply", "--json")
    assert moved.returncode == 0, moved.stderr
    plan = json.loads(moved.stdout)
    assert plan["effective_from"] == "2026-03-28T11:00:00Z"  # 07:00 EDT
    assert plan["changes"] == {"timezone": {"old": "Europe/Berlin", "new": "America/New_York"}}
    assert world.exportctl("validate", str(world.config)).returncode == 0
    assert "timezone: America/New_York" in (world.config / "acme.yaml").read_text()
    same_day = world.run(DAILY, "2026-03-28T11:00Z")
    assert same_day["state"] == "skipped", same_day
    assert world.run(DAILY, "2026-03-29T11:00Z")["state"] == "ready"
    periods = _periods(world, DAILY)
    assert len(periods) == 4 and set(periods.values()) == {1}, periods
