"""Config catalog: the shipped configs load, every bad input is a precise, human error."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from export_lib.config.loader import load_catalog
from export_lib.errors import ConfigError

SHIPPED = Path(__file__).resolve().parents[3] / "dags" / "config"

GOOD = """\
company: {id: %(id)s, name: Test, timezone: Europe/Berlin, owner: o@x.example}
widget_exports:
  - id: daily
    export_hour: 7
    query: {table: widget_metrics, columns: [a], timestamp_column: a, tenant_column: company_id}
    destinations: [{id: d, type: local, path: outbox/%(id)s}]
"""


@pytest.fixture()
def config_dir(tmp_path: Path) -> Path:
    shutil.copy(SHIPPED / "defaults.yaml", tmp_path / "defaults.yaml")
    return tmp_path


def write(config_dir: Path, name: str, text: str) -> str:
    path = config_dir / name
    path.write_text(text)
    return str(path)


def test_shipped_configs_are_valid():
    catalog = load_catalog(SHIPPED)
    assert catalog.errors == {}
    assert [s.schedule_id for s in catalog.schedules] == [
        "acme/daily-spend", "acme/google-ads/primary", "acme/google-ads/secondary",
        "acme/hourly-clicks", "dentsu-happiness/facebook/primary",
        "dentsu-happiness/facebook/secondary", "dentsu-happiness/tiktok/primary",
        "dentsu-happiness/tiktok/secondary", "kiwi-outdoors/business-day-revenue",
        "kiwi-outdoors/six-hourly-orders"]


def test_data_export_defaults_and_tenant_override():
    catalog = load_catalog(SHIPPED)
    primary = catalog.schedule("acme/google-ads/primary")
    assert (primary.timing.cron, primary.timing.timezone) == ("0 14 * * *", "UTC")
    assert (primary.window.kind, primary.window.days) == ("trailing_days", 90)
    assert primary.dag_id == "data_export__acme__google-ads__primary"
    assert primary.query.filters[-1].value == "google-ads"
    secondary = catalog.schedule("acme/google-ads/secondary")
    assert (secondary.timing.cron, secondary.window.days) == ("0 0 * * *", 3)
    dh = catalog.schedule("dentsu-happiness/facebook/primary")
    assert dh.timing.cron == "30 9 * * *" and dh.size == "large"
    assert catalog.schedule("dentsu-happiness/facebook/secondary").timing.cron == "30 16 * * *"
    assert dh.deadline == timedelta(hours=4) and dh.owner == "exports@dh.example"


def test_widget_schedule_fields_and_version():
    widget = load_catalog(SHIPPED).schedule("acme/daily-spend")
    assert widget.dag_id == "widget_export__acme__daily-spend"
    assert widget.timing.summary == "07:00 Europe/Berlin, every 24 h"
    assert widget.owner == "data-team@acme.example"
    assert len(widget.config_version) == 64
    assert widget.snapshot()["config_version"] == widget.config_version
    assert load_catalog(SHIPPED).schedule("acme/daily-spend").config_version == (
        widget.config_version)


def test_config_version_changes_with_content_but_not_with_pause(config_dir):
    write(config_dir, "t.yaml", GOOD % {"id": "t"})
    before = load_catalog(config_dir).schedule("t/daily").config_version
    write(config_dir, "t.yaml", (GOOD % {"id": "t"}).replace("}\n", ", status: paused}\n", 1))
    assert load_catalog(config_dir).schedule("t/daily").config_version == before
    write(config_dir, "t.yaml", (GOOD % {"id": "t"}).replace("export_hour: 7", "export_hour: 8"))
    assert load_catalog(config_dir).schedule("t/daily").config_version != before


@pytest.mark.parametrize(("old", "new", "expected"), [
    pytest.param("timezone: Europe/Berlin", "timezone: Europe/Berln",
                 "company.timezone: unknown timezone 'Europe/Berln'; did you mean "
                 "'Europe/Berlin', 'Europe/Dublin', 'Europe/Belfast'?", id="unknown-timezone"),
    pytest.param("export_hour: 7", "export_hour: 24",
                 "widget_exports[0].export_hour: export_hour 24 is out of range; use an hour "
                 "from 0 to 23 (local time in the schedule timezone)", id="export-hour-24"),
    pytest.param("export_hour: 7", "interval_hours: 25",
                 "widget_exports[0].interval_hours: interval_hours 25 is out of range; use a "
                 "whole number of hours from 1 to 24", id="interval-25"),
    pytest.param("export_hour: 7", "interval_hours: 0",
                 "widget_exports[0].interval_hours: interval_hours 0 is out of range; use a "
                 "whole number of hours from 1 to 24", id="interval-0"),
    pytest.param("export_hour: 7", "window: {kind: trailing_hours}",
                 "widget_exports[0].window: window kind 'trailing_hours' needs 'hours' (a "
                 "positive integer), e.g. {kind: trailing_hours, hours: 3}",
                 id="window-without-n"),
    pytest.param("export_hour: 7", "exprt_hour: 7",
                 "widget_exports[0].exprt_hour: unknown key 'exprt_hour'; did you mean "
                 "'export_hour'? allowed keys: at_risk, catchup, compression, csv, deadline, "
                 "destinations, dst_fold, dst_gap, effective_from, export_hour, format, history, "
                 "id, interval_hours, "
                 "late_data, late_start, legal_hold, owner, query, recovery, retention_days, "
                 "retries, schema_policy, skip_empty, timeouts, timezone, window", id="unknown-key"),
    pytest.param("export_hour: 7", "dst_fold: twice",
                 "widget_exports[0].dst_fold: Input should be 'first', 'second' or 'both' "
                 "(got 'twice')", id="bad-fold-policy"),
    pytest.param("export_hour: 7", "deadline: soon",
                 "widget_exports[0].deadline: expected a duration such as '2h', '90m', "
                 "'1h30m' or 'PT2H' (got 'soon')", id="bad-duration"),
    pytest.param("path: outbox/t}", "paht: outbox/t}",
                 "widget_exports[0].destinations[0].paht: unknown key 'paht'; did you mean "
                 "'path'? allowed keys: id, path, retry, retry_window, type", id="destination-typo"),
])
def test_bad_input_is_named_precisely(config_dir, old, new, expected):
    path = write(config_dir, "t.yaml", (GOOD % {"id": "t"}).replace(old, new))
    assert f"{path}: {expected}" in load_catalog(config_dir).errors[path]


def test_duplicate_schedule_id(config_dir):
    text = GOOD % {"id": "t"}
    path = write(config_dir, "t.yaml", text + text[text.index("  - id"):])
    assert load_catalog(config_dir).errors[path] == (
        f"{path}: widget_exports[1].id: duplicate schedule id 't/daily' (also "
        "widget_exports[0]); give each export a unique id",)


def test_file_stem_must_equal_company_id(config_dir):
    path = write(config_dir, "other.yaml", GOOD % {"id": "t"})
    assert load_catalog(config_dir).errors[path] == (
        f"{path}: company.id: 't' does not match the file name 'other.yaml'; rename the file "
        "to t.yaml or set company.id: other",)


def test_non_yaml_files(config_dir):
    broken = write(config_dir, "broken.yaml", "company: [\n  id: x")
    notes = write(config_dir, "notes.txt", "hello")
    errors = load_catalog(config_dir).errors
    assert errors[broken] == (f"{broken}: line 2 column 8: not valid YAML: expected ',' or ']', "
                              "but got '<stream end>'",)
    assert errors[notes] == (f"{notes}: (file): not a YAML config file; config files are named "
                             "<company id>.yaml (move other files elsewhere)",)


def test_duplicate_yaml_keys_are_rejected(config_dir):
    path = write(config_dir, "t.yaml", (GOOD % {"id": "t"}).replace(
        "export_hour: 7", "export_hour: 7\n    export_hour: 8"))
    assert "duplicate key 'export_hour'" in load_catalog(config_dir).errors[path][0]


def test_an_impossible_yaml_date_is_one_error_line_not_a_traceback(config_dir):
    """PyYAML raises a bare ValueError for 30 February (the loader crashed before)."""
    path = write(config_dir, "t.yaml", (GOOD % {"id": "t"}).replace(
        "export_hour: 7", "effective_from: 2026-02-30T00:00:00Z"))
    assert load_catalog(config_dir).errors[path] == (
        f"{path}: line 4 column 21: not valid YAML: '2026-02-30T00:00:00Z' is not a real date "
        "or time (day is out of range for month); write an existing one, e.g. 2026-12-29",)


def test_one_bad_file_does_not_hide_the_good_ones(config_dir):
    write(config_dir, "good.yaml", GOOD % {"id": "good"})
    bad = write(config_dir, "bad.yaml", (GOOD % {"id": "bad"}).replace("7", "24"))
    catalog = load_catalog(config_dir)
    assert [s.schedule_id for s in catalog.schedules] == ["good/daily"]
    assert list(catalog.errors) == [bad]
    with pytest.raises(ConfigError, match=r"^1 config error\(s\) in .*\n.*bad\.yaml: "
                       r"widget_exports\[0\]\.export_hour: export_hour 24") as raised:
        catalog.raise_for_errors()
    assert raised.value.issues == list(catalog.errors[bad])


def test_broken_defaults_is_an_error_for_everyone(config_dir):
    write(config_dir, "t.yaml", GOOD % {"id": "t"})
    defaults = write(config_dir, "defaults.yaml", "policies: {deadline: 0h}\n")
    errors = load_catalog(config_dir).errors
    assert errors[defaults] == (
        f"{defaults}: sources: required field is missing; add it, e.g. sources: {{demo_source: "
        "{tables: {widget_metrics: {tenant_column: company_id}}}}",
        f"{defaults}: policies.deadline: deadline must be positive (got 0:00:00)",
        f"{defaults}: data_exports: required field is missing; add it, e.g. data_exports: "
        "{primary: {cron: 0 14 * * *, window: {kind: trailing_days, days: 30}}, secondary: "
        "{cron: 0 14 * * *, window: {kind: trailing_days, days: 30}}}")
    assert errors[str(config_dir / "t.yaml")] == (
        f"{config_dir / 't.yaml'}: (file): not loaded because {defaults} is invalid; fix it "
        "first",)


def test_unknown_schedule_names_close_ids():
    with pytest.raises(ConfigError, match=r"unknown schedule 'acme/daily-spnd' in .*; did you "
                       r"mean 'acme/daily-spend'"):
        load_catalog(SHIPPED).schedule("acme/daily-spnd")


def test_effective_from_needs_an_offset(config_dir):
    path = write(config_dir, "t.yaml", (GOOD % {"id": "t"}).replace(
        "export_hour: 7", "effective_from: 2026-04-01T00:00:00"))
    assert load_catalog(config_dir).errors[path] == (
        f"{path}: widget_exports[0].effective_from: effective_from needs a UTC offset, e.g. "
        "'2026-04-01T00:00:00Z' or '2026-04-01T00:00:00+02:00'",)
