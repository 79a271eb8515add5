"""Late-data policies and empty windows through the pipeline (SQLite demo source, no Airflow)."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from export_lib.config.loader import load_catalog
from export_lib.pipeline import publish_run, register_run, render_run, watermark_ready
from tests.world import acme_library_world

SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)  # acme/daily-spend, window 2026-03-28 Berlin


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    return (*acme_library_world(tmp_path, monkeypatch), tmp_path)


def _edit(config: Path, **widget_fields) -> None:
    data = yaml.safe_load((config / "acme.yaml").read_text())
    data["widget_exports"][0].update(widget_fields)
    (config / "acme.yaml").write_text(yaml.safe_dump(data))


def test_empty_window_under_skip_empty_is_recorded_skipped(world):
    config, ledger, store, _ = world
    _edit(config, skip_empty=True)
    schedule = load_catalog(config).schedule("acme/daily-spend")
    empty_slot = datetime(2026, 1, 5, 6, 0, tzinfo=UTC)  # before the demo data starts
    key = register_run(ledger, schedule, empty_slot, now=empty_slot).run_key
    result = render_run(ledger, store, key, now=empty_slot)
    assert result == {"run_key": key, "rendered": False, "rows": 0, "skipped":
                      "the window holds no rows and the export sets skip_empty; nothing is published"}
    run = ledger.get_run(key)
    assert (run.state, ledger.artifacts(key)) == ("skipped", [])
    assert not list((store.root / ".staging").glob("*"))


def test_empty_window_without_skip_empty_publishes_a_header_only_file(world):
    config, ledger, store, _ = world
    schedule = load_catalog(config).schedule("acme/daily-spend")
    empty_slot = datetime(2026, 1, 5, 6, 0, tzinfo=UTC)
    key = register_run(ledger, schedule, empty_slot, now=empty_slot).run_key
    rendered = render_run(ledger, store, key, now=empty_slot)
    published = publish_run(ledger, store, key, rendered["attempt_id"], now=empty_slot)
    path = Path(published["uri"].removeprefix("file://"))
    assert (published["rows"], path.read_text()) == (0, "company_id,widget_id,event_time,value\n")


def test_watermark_wait_until_ingestion_passes_window_end_plus_grace(world):
    config, ledger, _, tmp_path = world
    _edit(config, late_data={"policy": "wait_for_watermark", "grace": "1h"}, deadline="6h")
    schedule = load_catalog(config).schedule("acme/daily-spend")
    slot = datetime(2026, 3, 30, 5, 0, tzinfo=UTC)   # window ends 2026-03-29T22:00Z
    key = register_run(ledger, schedule, slot, now=slot).run_key
    with sqlite3.connect(tmp_path / "demo.db") as conn:  # ingestion stopped at 22:30Z
        conn.execute("DELETE FROM widget_metrics WHERE ingested_at > '2026-03-29 22:30:00'")
    assert watermark_ready(ledger, key, now=slot) == (
        False, "waiting for the watermark to pass 2026-03-29T23:00Z")
    with sqlite3.connect(tmp_path / "demo.db") as conn:
        conn.execute("INSERT INTO widget_metrics VALUES ('acme', 'late', '2026-03-29 21:59:00', "
                     "1.00, '2026-03-29 23:05:00')")
    assert watermark_ready(ledger, key, now=slot) == (True, "watermark passed 2026-03-29T23:00Z")


def test_watermark_wait_ends_at_the_deadline(world):
    config, ledger, _, tmp_path = world
    _edit(config, late_data={"policy": "wait_for_watermark", "grace": "1h"}, deadline="2h")
    schedule = load_catalog(config).schedule("acme/daily-spend")
    slot = datetime(2026, 3, 30, 5, 0, tzinfo=UTC)
    key = register_run(ledger, schedule, slot, now=slot).run_key
    with sqlite3.connect(tmp_path / "demo.db") as conn:
        conn.execute("DELETE FROM widget_metrics WHERE ingested_at > '2026-03-29 22:30:00'")
    assert watermark_ready(ledger, key, now=slot + timedelta(hours=2)) == (
        True, "deadline 2026-03-30T07:00Z reached; exporting what has arrived")


def test_restatement_publishes_a_correction_with_the_late_rows(world):
    config, ledger, store, tmp_path = world
    _edit(config, late_data={"policy": "restate", "grace": "1h"})
    schedule = load_catalog(config).schedule("acme/daily-spend")
    key = register_run(ledger, schedule, SLOT, now=SLOT).run_key
    first = render_run(ledger, store, key, now=SLOT)
    v1 = publish_run(ledger, store, key, first["attempt_id"], now=SLOT)
    with sqlite3.connect(tmp_path / "demo.db") as conn:  # a row for the period arrives late
        conn.execute("INSERT INTO widget_metrics VALUES ('acme', 'late', '2026-03-28 12:00:00', "
                     "9.99, '2026-03-29 09:00:00')")
    later = SLOT + timedelta(hours=6)
    again = render_run(ledger, store, key, now=later, regenerate=True)
    v2 = publish_run(ledger, store, key, again["attempt_id"], now=later, correction=True)
    assert (v1["rows"], v2["rows"], v2["version"], v2["created"]) == (72, 73, 2, True)
    (_, second) = ledger.artifacts(key)
    assert (second.supersedes, second.correction) == (1, 1)
    manifest = Path(second.manifest_uri.removeprefix("file://")).read_text()
    assert '"correction": true' in manifest and '"supersedes": 1' in manifest
