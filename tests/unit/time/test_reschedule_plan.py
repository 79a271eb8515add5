"""``exportctl reschedule``'s plan and file edit (issue 22 item 2): the old and the new next
slots, every period around the switch with what happens to it, and the company file written
with the new timing, effective_from and the old timing in history (comments kept; a rejected
edit writes nothing)."""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path

import pytest

from export_lib.config.edits import timing_edit_text, write_validated
from export_lib.config.loader import load_catalog
from export_lib.errors import ConfigError
from export_lib.pipeline.reschedule import new_timing, plan_reschedule
from tests.world import REPO


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(REPO / "dags" / "config")


def test_moving_the_export_hour_switches_at_the_next_slot_and_sends_each_day_once(catalog):
    daily = catalog.schedule("acme/daily-spend")  # 07:00 Berlin, calendar day
    # At 11:00 Berlin, after both hours: the switch is tomorrow's 07:00, which no longer fires.
    plan = plan_reschedule(daily, new_timing(daily, export_hour=9), now=_at("2026-12-02T10:00Z"),
                           newest_run=_at("2026-12-02T06:00Z"))
    assert plan.changes == {"export_hour": (7, 9)}
    assert plan.effective_from == _at("2026-12-03T06:00Z")
    assert plan.old_next == (_at("2026-12-03T06:00Z"), _at("2026-12-04T06:00Z"),
                             _at("2026-12-05T06:00Z"))
    assert plan.new_next == (_at("2026-12-03T08:00Z"), _at("2026-12-04T08:00Z"),
                             _at("2026-12-05T08:00Z"))
    assert [(f"{p.slot:%d %H:%M}", p.timing, p.period, p.outcome) for p in plan.periods] == [
        ("02 06:00", "old", "2026-12-01", "due before the switch (run or recovered as usual)"),
        ("03 08:00", "new", "2026-12-02", "exported"),
        ("04 08:00", "new", "2026-12-03", "exported"),
        ("05 08:00", "new", "2026-12-04", "exported")]
    assert (plan.twice, plan.holes) == ((), ())
    text = "\n".join(plan.lines())
    assert "2026-12-03 07:00 CET (06:00Z)" in text and "2026-12-03 09:00 CET (08:00Z)" in text

    # At 08:00 Berlin, between the hours: today's 09:00 is next and reports the day 07:00 sent.
    between = plan_reschedule(daily, new_timing(daily, export_hour=9),
                              now=_at("2026-12-02T07:00Z"), newest_run=_at("2026-12-02T06:00Z"))
    assert between.effective_from == _at("2026-12-02T08:00Z")
    assert [(f"{p.slot:%d %H:%M}", p.timing, p.period, p.outcome.split(":")[0])
            for p in between.periods][:2] == [
        ("02 06:00", "old", "2026-12-01", "due before the switch (run or recovered as usual)"),
        ("02 08:00", "new", "2026-12-01", "skipped")]
    assert between.periods[1].outcome == (
        "skipped: already delivered by slot 2026-12-02T06:00:00Z (sent once; `--regenerate` on "
        "that run sends it again)")
    assert "\n".join(between.lines()).endswith(
        "1 period(s) reported twice by the switch, each sent once; 0 period(s) reported by no "
        "slot")


def test_an_interval_change_tiles_time_and_a_timezone_change_moves_the_slots(catalog):
    hourly = catalog.schedule("acme/hourly-clicks")  # every hour, interval windows
    plan = plan_reschedule(hourly, new_timing(hourly, interval_hours=4),
                           now=_at("2026-12-02T10:30Z"), newest_run=_at("2026-12-02T10:00Z"))
    assert plan.effective_from == _at("2026-12-02T11:00Z")  # the next hour, 12:00 CET
    assert [f"{s:%H:%M}" for s in plan.new_next] == ["11:00", "15:00", "19:00"]
    assert [p.outcome for p in plan.periods if p.timing == "new"] == ["exported"] * 3
    assert plan.periods[0].period == "2026-12-02T1000--2026-12-02T1100"  # the last old hour
    assert plan.periods[1].period == "2026-12-02T1100--2026-12-02T1200"
    assert plan.holes == ()
    primary = catalog.schedule("acme/google-ads/primary")  # cron 0 14 * * * UTC
    moved = plan_reschedule(primary, new_timing(primary, timezone="America/New_York"),
                            now=_at("2026-12-02T15:00Z"), newest_run=_at("2026-12-02T14:00Z"))
    assert moved.effective_from == _at("2026-12-02T19:00Z")  # 14:00 in New York comes
    # before 14:00 UTC tomorrow
    assert moved.changes == {"timezone": ("UTC", "America/New_York")}


def test_a_switch_before_the_newest_run_or_a_non_change_is_refused(catalog):
    daily = catalog.schedule("acme/daily-spend")
    with pytest.raises(ConfigError, match=r"effective_from 2026-12-01T08:00:00Z is not after "
                       r"the newest run's slot 2026-12-02T06:00:00Z: the slots already run keep "
                       r"their timing"):
        plan_reschedule(daily, new_timing(daily, export_hour=9), now=_at("2026-12-02T10:00Z"),
                        newest_run=_at("2026-12-02T06:00Z"), effective_from=_at("2026-12-01T00:00Z"))
    with pytest.raises(ConfigError, match=r"acme/daily-spend already fires at 07:00 "
                       r"Europe/Berlin, every 24 h"):
        new_timing(daily, export_hour=7)
    with pytest.raises(ConfigError, match=r"is a widget export: it fires at export_hour every "
                       r"interval_hours; --cron is for data exports"):
        new_timing(daily, cron="0 9 * * *")
    with pytest.raises(ConfigError, match=r"the new timing is not valid: .*export_hour 24 is "
                       r"out of range; use an hour from 0 to 23"):
        new_timing(daily, export_hour=24)


def test_the_edit_keeps_comments_patches_history_and_validates(tmp_path: Path):
    config = tmp_path / "config"
    shutil.copytree(REPO / "dags" / "config", config)
    acme = config / "acme.yaml"
    original = acme.read_text()
    text = timing_edit_text(original, kind="widget", ident="daily-spend", data_kind=None,
                            new={"export_hour": 9}, old={"export_hour": 7},
                            effective_from=_at("2026-12-03T08:00Z"))
    assert "# ACME Corp: a Berlin company" in text  # the file's comments stay
    assert ("    export_hour: 9  # was 7 before 2026-12-03T08:00:00Z (exportctl reschedule)\n"
            "    interval_hours: 24\n"
            "    effective_from: '2026-12-03T08:00:00Z'\n"
            "    history:\n"
            "      - {export_hour: 7}\n") in text
    assert text.replace(text[text.index("  - id: daily-spend"):text.index("    window:")],
                        "") == original.replace(
        original[original.index("  - id: daily-spend"):original.index("    window:")], "")
    write_validated(config, acme, text)
    again = timing_edit_text(acme.read_text(), kind="widget", ident="daily-spend",
                             data_kind=None, new={"export_hour": 11}, old={"export_hour": 9},
                             effective_from=_at("2026-12-05T07:00Z"))
    assert ("      - {export_hour: 7}\n"
            "      - {export_hour: 9, effective_from: '2026-12-03T08:00:00Z'}\n") in again
    write_validated(config, acme, again)
    daily = load_catalog(config).schedule("acme/daily-spend")
    assert [(f"{a:%m-%d %H:%M}" if a else None, t.export_hour)
            for a, _, t in daily.timing.segments] == [(None, 7), ("12-03 08:00", 9),
                                                        ("12-05 07:00", 11)]
    # A data export whose kind is all defaults gets its own mapping; a cron is quoted.
    secondary = timing_edit_text(acme.read_text(), kind="secondary", ident="google-ads",
                                 data_kind="secondary", new={"cron": "0 2 * * *"},
                                 old={"cron": "0 0 * * *"},
                                 effective_from=_at("2026-12-04T02:00Z"))
    assert ("    secondary:\n      cron: \"0 2 * * *\"" in secondary
            and "- {cron: \"0 0 * * *\"}" in secondary), secondary
    write_validated(config, acme, secondary)
    assert load_catalog(config).schedule("acme/google-ads/secondary").timing.at(
        _at("2026-12-04T02:00Z")).cron == "0 2 * * *"


def test_an_edit_that_does_not_validate_writes_nothing(tmp_path: Path):
    config = tmp_path / "config"
    shutil.copytree(REPO / "dags" / "config", config)
    acme = config / "acme.yaml"
    before = acme.read_text()
    bad = timing_edit_text(before, kind="widget", ident="daily-spend", data_kind=None,
                           new={"export_hour": 9}, old={"export_hour": 7},
                           effective_from=_at("2200-01-01T00:00Z"))
    with pytest.raises(ConfigError, match=r"the edit of .*acme.yaml does not validate; nothing "
                       r"written:\n.*effective_from 2200-01-01T00:00:00\+00:00 is outside the "
                       r"years 2000 to 2100"):
        write_validated(config, acme, bad)
    assert acme.read_text() == before
    assert sorted(p.name for p in config.iterdir()) == sorted(
        p.name for p in (REPO / "dags" / "config").iterdir())
