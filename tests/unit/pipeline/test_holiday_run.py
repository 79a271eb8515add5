"""A business-day export of a company with holidays, end to end through ``exportctl run``
(SQLite ledger and demo source): the Monday export after a listed Friday closure delivers
Thursday's rows under Thursday's period name (issue 22 item 6, ADR 0019)."""

from __future__ import annotations

import csv
from pathlib import Path

SCHEDULE = "kiwi-outdoors/business-day-revenue"
MONDAY = "2026-03-29T17:00Z"  # Monday 30 Mar 2026 06:00 in Auckland (NZDT, UTC+13)


def test_the_monday_export_after_a_closed_friday_delivers_thursday(export_world):
    world = export_world
    path = world.config / "kiwi-outdoors.yaml"
    text = path.read_text()
    assert "  # holidays: {country: NZ, subdivision: AUK}\n" in text
    path.write_text(text.replace("  # holidays: {country: NZ, subdivision: AUK}\n",
                                 "  holidays: {country: NZ, dates: [2026-03-27]}\n"))

    out = world.run(SCHEDULE, MONDAY)

    assert (out["state"], out["window_start_utc"], out["window_end_utc"]) == (
        "ready", "2026-03-25T11:00:00Z", "2026-03-26T11:00:00Z")
    name = "kiwi-outdoors__business-day-revenue__2026-03-26__slot-20260329T1700Z__v1.csv"
    assert Path(out["artifact"]["uri"].removeprefix("file://")).name == name
    delivered = world.outbox / "kiwi-outdoors" / "revenue" / name
    with delivered.open(newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter=";"))
    assert len(rows) == out["artifact"]["rows"] > 0
    assert {row["event_time"][:10] for row in rows} == {"2026-03-26"}  # local timestamps
    run = world.ledger().get_run(out["run_key"])
    assert run.config_snapshot["company"]["holidays"] == {
        "country": "NZ", "subdivision": None, "dates": ["2026-03-27"]}
