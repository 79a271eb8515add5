"""Config versions (ADR 0005): ``history`` keeps earlier versions, each slot gets the version in
force for it (registration and preview), and what cannot change between versions is refused."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from export_lib.config.loader import load_catalog

ANCHOR = "      - {id: acme-dir, type: local, path: outbox/acme/daily-spend}\n"
EDIT = ANCHOR + """      - {id: partner, type: local, path: outbox/acme/partner, retry_window: 2d}
    effective_from: 2026-12-01T00:00:00+01:00
    history:
      - destinations:
          - {id: acme-dir, type: local, path: outbox/acme/daily-spend}
"""
BEFORE = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)  # 07:00 Berlin, the day before the edit
AFTER = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)


@pytest.fixture()
def versioned(tmp_path: Path) -> Path:
    config = tmp_path / "config"
    repo = Path(__file__).resolve().parents[3]
    config.mkdir()
    for name in ("defaults.yaml", "acme.yaml"):
        (config / name).write_text((repo / "dags" / "config" / name).read_text())
    return config


def _edit(config: Path, new: str, old: str = ANCHOR) -> None:
    path = config / "acme.yaml"
    path.write_text(path.read_text().replace(old, new, 1))


def test_each_slot_gets_the_version_in_force_for_it(versioned: Path) -> None:
    unedited = load_catalog(versioned).schedule("acme/daily-spend")
    _edit(versioned, EDIT)
    schedule = load_catalog(versioned).schedule("acme/daily-spend")
    old, new = schedule.version_for(BEFORE), schedule.version_for(AFTER)
    assert old.config_version == unedited.config_version  # runs captured exactly this one
    assert [d.id for d in old.destinations] == ["acme-dir"]
    assert [d.id for d in new.destinations] == ["acme-dir", "partner"]
    assert new.destinations[1].retry_window == timedelta(days=2)
    assert new.config_version == schedule.config_version != old.config_version
    assert schedule.first_effective is None  # the oldest version has no start: nothing held


def test_preview_shows_the_version_of_every_slot(versioned: Path) -> None:
    _edit(versioned, EDIT)
    schedule = load_catalog(versioned).schedule("acme/daily-spend")
    rows = _preview(versioned)
    versions = [(r["slot_utc"], r["config_version"], r["effective_from"]) for r in rows]
    old = schedule.version_for(BEFORE).config_version
    assert versions == [("2026-11-30T06:00:00Z", old, None),
                        ("2026-12-01T06:00:00Z", schedule.config_version, "2026-11-30T23:00:00Z")]


def _preview(config: Path) -> list[dict]:
    import contextlib
    import io

    from export_lib.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["preview", str(config), "--schedule", "acme/daily-spend", "--from",
                     "2026-11-30T05:00Z", "--count", "2", "--json"]) == 0
    return json.loads(out.getvalue())


def test_registration_captures_the_version_in_force_for_the_slot(versioned: Path,
                                                                 tmp_path: Path) -> None:
    from export_lib.ledger import open_ledger
    from export_lib.pipeline import register_run

    _edit(versioned, EDIT)
    schedule = load_catalog(versioned).schedule("acme/daily-spend")
    ledger = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.upgrade()
    now = AFTER + timedelta(hours=1)
    backfilled = register_run(ledger, schedule, BEFORE, now=now)
    current = register_run(ledger, schedule, AFTER, now=now)
    assert backfilled.destinations == ("acme-dir",)
    assert current.destinations == ("acme-dir", "partner")
    assert backfilled.config_version == schedule.version_for(BEFORE).config_version


@pytest.mark.parametrize(("new", "message"), [
    (ANCHOR + "    history:\n      - {deadline: 3h}\n",
     "widget_exports[0]: an export with 'history' needs 'effective_from' on its current version"),
    (ANCHOR + "    effective_from: 2026-12-01T00:00:00Z\n    history:\n"
              "      - {id: old-spend, export_hour: 6}\n",
     "widget_exports[0].history[0]: id cannot change between versions (they name the export)"),
    (ANCHOR + "    effective_from: 2026-12-01T00:00:00Z\n    history:\n"
              "      - {deadline: 3h, effective_from: 2026-12-02T00:00:00Z}\n",
     "every version in 'history' needs an effective_from before the current one"),
    (ANCHOR.replace("}", ", retry_window: 45d}"),
     "retry_window 45d is out of bounds; give a duration between 1m and 30d"),
])
def test_bad_versions_are_refused_naming_file_and_field(versioned: Path, new: str,
                                                        message: str) -> None:
    _edit(versioned, new)
    catalog = load_catalog(versioned)
    lines = catalog.error_lines
    assert any(message in line and str(versioned / "acme.yaml") in line for line in lines), lines


def test_a_data_export_keeps_its_earlier_version_too(versioned: Path) -> None:
    """``history`` under a data export kind: the defaults layer under every version."""
    _edit(versioned, "      window: {days: 90}\n      effective_from: 2026-12-01T00:00:00Z\n"
                     "      history:\n        - window: {days: 30}\n",
          old="      window: {days: 90}      # refines the default trailing_days window to 90 days\n")
    catalog = load_catalog(versioned)
    assert catalog.ok, catalog.error_lines
    primary = catalog.schedule("acme/google-ads/primary")
    assert primary.version_for(BEFORE).window.days == 30
    assert primary.version_for(AFTER).window.days == 90
    assert primary.version_for(BEFORE).destinations == primary.destinations  # from defaults


# The edit above starts 2026-11-30T23:00Z; the bound is 366 days (export_lib.config.versions).
EDIT_START = datetime(2026, 11, 30, 23, 0, tzinfo=UTC)


def test_a_current_version_with_history_may_start_up_to_366_days_ahead(versioned: Path) -> None:
    _edit(versioned, EDIT)
    at_bound = EDIT_START - timedelta(days=366)
    assert load_catalog(versioned, now=at_bound).ok
    catalog = load_catalog(versioned, now=at_bound - timedelta(seconds=1))
    assert catalog.error_lines == [
        f"{versioned / 'acme.yaml'}: widget_exports[0].effective_from: 2026-11-30T23:00:00Z is "
        "more than 366 days ahead while its 'history' is in force; the file would show one "
        "version and run another. Give the version a start within a year (by "
        "2026-11-30T22:59:59Z), or add it when it is that close"]
    assert "acme" not in catalog.companies


def test_a_far_start_without_history_is_only_a_later_start(versioned: Path) -> None:
    # No earlier version runs meanwhile: the export simply exports nothing until then.
    _edit(versioned, ANCHOR + "    effective_from: 2099-01-01T00:00:00Z\n")
    assert load_catalog(versioned, now=datetime(2026, 12, 2, tzinfo=UTC)).ok
