"""``exportctl migrate-legacy`` (issue 13 item 8, seed 000): ``export_time`` morning (03:00 UTC) /
evening (11:00 UTC) → ``export_hour`` in the company timezone + ``effective_from``; never a
guess across DST."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from export_lib.periods.legacy import convert, find_legacy

START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
EXPORT = {"id": "daily", "export_time": "morning"}


def test_a_zone_without_dst_keeps_the_utc_time_all_year():
    conv = convert(Path("co.yaml"), EXPORT, "Asia/Tokyo", start=START, preserve=None)
    assert conv.problem is None and conv.hour == 12  # 03:00 UTC = 12:00 JST
    assert conv.effective_from == datetime(2026, 12, 2, 3, 0, tzinfo=UTC)
    assert conv.before == conv.after  # the same instants before and after
    assert conv.lines()[0] == (
        "co.yaml: widget_exports[daily]: export_time morning (03:00 UTC) -> export_hour 12 "
        "(Asia/Tokyo) from 2026-12-02T03:00:00Z; keeps 03:00 UTC all year (Asia/Tokyo has no "
        "daylight saving time)")
    assert conv.lines()[1] == ("  next runs before: 12-02 12:00 JST = 03:00 UTC, 12-03 12:00 "
                               "JST = 03:00 UTC, 12-04 12:00 JST = 03:00 UTC")
    evening = convert(Path("co.yaml"), {**EXPORT, "export_time": "evening"}, "UTC",
                      start=START, preserve=None)
    assert evening.hour == 11


def test_a_zone_with_dst_is_refused_until_the_operator_chooses():
    conv = convert(Path("co.yaml"), EXPORT, "Europe/Berlin", start=START, preserve=None)
    assert conv.hour is None
    assert conv.problem == (
        "Europe/Berlin observes daylight saving time: 03:00 UTC is 04:00 local in standard time "
        "and 05:00 in daylight time, and export_hour keeps one local hour all year. Choose: "
        "--preserve standard (export_hour 4: 03:00 UTC in winter, 02:00 UTC in summer) or "
        "--preserve daylight (export_hour 5: 03:00 UTC in summer, 04:00 UTC in winter)")
    winter = convert(Path("co.yaml"), EXPORT, "Europe/Berlin", start=START, preserve="standard")
    assert winter.hour == 4 and winter.after[0] == datetime(2026, 12, 2, 3, 0, tzinfo=UTC)
    assert "keeps 03:00 UTC in standard time only" in winter.lines()[0]
    summer = convert(Path("co.yaml"), EXPORT, "Europe/Berlin", start=START, preserve="daylight")
    assert summer.hour == 5 and summer.after[0] == datetime(2026, 12, 2, 4, 0, tzinfo=UTC)


def test_a_half_hour_offset_or_an_unknown_value_is_refused():
    india = convert(Path("co.yaml"), EXPORT, "Asia/Kolkata", start=START, preserve=None)
    assert india.problem.startswith("Asia/Kolkata is 5:30:00 from UTC, not a whole number of "
                                    "hours: no export_hour fires at 03:00 UTC")
    odd = convert(Path("co.yaml"), {**EXPORT, "export_time": "noon"}, "UTC", start=START,
                  preserve=None)
    assert odd.problem.startswith("export_time 'noon' is not a legacy value")
    both = convert(Path("co.yaml"), {**EXPORT, "export_hour": 7}, "UTC", start=START,
                   preserve=None)
    assert both.problem == ("it has both export_time and export_hour 7; check the hour and "
                            "delete export_time")


LEGACY_FILE = """\
# Tokyo company, still on the old export_time
company:
  id: tokyo-co
  name: Tokyo Co
  timezone: Asia/Tokyo
  owner: ops@tokyo.example
widget_exports:
  - id: daily
    export_time: morning   # the old 03:00 UTC slot
    window: {kind: calendar_day}
    query:
      source: demo_source
      table: widget_metrics
      columns: [company_id, widget_id, event_time, value]
      timestamp_column: event_time
      tenant_column: company_id
    destinations:
      - {id: box, type: local, path: outbox/tokyo-co/daily}
"""


@pytest.fixture()
def legacy_world(tmp_path):
    from tests.world import build_world

    world = build_world(tmp_path / "w")
    (world.config / "tokyo-co.yaml").write_text(LEGACY_FILE)
    berlin = LEGACY_FILE.replace("tokyo-co", "berlin-co").replace("Asia/Tokyo", "Europe/Berlin")
    (world.config / "berlin-co.yaml").write_text(berlin)
    return world


def test_exportctl_migrate_legacy_previews_then_writes_a_valid_config(legacy_world):
    world = legacy_world
    from export_lib.config.loader import load_catalog

    assert "export_time" in " ".join(load_catalog(world.config).error_lines)
    preview = world.exportctl("migrate-legacy", "--config", str(world.config), "--from",
                              "2026-12-01T12:00Z")
    assert preview.returncode == 1  # Berlin needs a decision
    assert "berlin-co.yaml: widget_exports[daily]: NOT converted: Europe/Berlin observes " \
           "daylight saving time" in preview.stdout
    assert "tokyo-co.yaml: widget_exports[daily]: export_time morning (03:00 UTC) -> " \
           "export_hour 12 (Asia/Tokyo) from 2026-12-02T03:00:00Z" in preview.stdout
    assert preview.stdout.strip().endswith("1 convertible, 1 refused; nothing written (add "
                                           "--write)")
    assert (world.config / "tokyo-co.yaml").read_text() == LEGACY_FILE

    written = world.exportctl("migrate-legacy", "--config", str(world.config), "--from",
                              "2026-12-01T12:00Z", "--write")
    assert written.returncode == 1 and "wrote 1 file(s); 1 export(s) left for you to decide" \
        in written.stdout
    text = (world.config / "tokyo-co.yaml").read_text()
    assert "    export_hour: 12  # was export_time: morning (03:00 UTC)\n" \
           "    effective_from: \"2026-12-02T03:00:00Z\"\n" in text
    assert text.startswith("# Tokyo company, still on the old export_time\n")
    catalog = load_catalog(world.config, only="tokyo-co")
    assert catalog.ok, catalog.error_lines
    schedule = catalog.schedule("tokyo-co/daily")
    assert (schedule.timing.export_hour, schedule.effective_from) == (
        12, datetime(2026, 12, 2, 3, 0, tzinfo=UTC))

    chosen = world.exportctl("migrate-legacy", "--config", str(world.config), "--from",
                             "2026-12-01T12:00Z", "--preserve", "standard", "--write")
    assert chosen.returncode == 0, chosen.stdout + chosen.stderr
    assert yaml.safe_load((world.config / "berlin-co.yaml").read_text())["widget_exports"][0][
        "export_hour"] == 4
    assert load_catalog(world.config).ok
    again = world.exportctl("migrate-legacy", "--config", str(world.config))
    assert again.stdout.strip().endswith("carries export_time; nothing to migrate")
    assert find_legacy(world.config, start=START, preserve=None) == []
