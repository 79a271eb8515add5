"""``company.holidays`` as a user writes it (ADR 0019): every mistake is one line naming file,
field, value and the fix; ``exportctl validate`` warns about a calendar nothing reads or a date
list that has run out; the ad-hoc ``exportctl preview`` takes a calendar too."""

from __future__ import annotations

import json
import os
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from export_lib.config.advisories import holiday_warnings
from export_lib.config.loader import load_catalog
from tests.support.cli import exportctl as run_cli
from tests.support.time import SHIPPED

REPO = SHIPPED.parents[1]
COMPANY = """\
company:
  id: kiwi
  name: Kiwi
  timezone: Pacific/Auckland
  owner: ops@kiwi.example
  holidays: %(holidays)s
widget_exports:
  - id: revenue
    export_hour: 7
    window: {kind: %(kind)s}
    query: {table: widget_metrics, columns: [company_id], timestamp_column: event_time,
            tenant_column: company_id}
    destinations: [{id: d, type: local, path: outbox/kiwi/revenue}]
"""


def exportctl(*args: str):
    return run_cli(*args, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def write(config: Path, holidays: str, kind: str = "previous_business_day") -> Path:
    (config / "defaults.yaml").write_text((SHIPPED / "defaults.yaml").read_text())
    path = config / "kiwi.yaml"
    path.write_text(COMPANY % {"holidays": holidays, "kind": kind})
    return path


def test_country_subdivision_and_dates_together(tmp_path):
    write(tmp_path, "{country: NZ, subdivision: AUK, dates: ['2026-12-30', 2026-12-29]}")
    calendar = load_catalog(tmp_path).companies["kiwi"].holidays
    assert (calendar.country, calendar.subdivision, calendar.dates) == (
        "NZ", "AUK", (date(2026, 12, 29), date(2026, 12, 30)))
    assert calendar.summary == "NZ-AUK holidays + 2 listed dates"


@pytest.mark.parametrize(("holidays", "field", "message"), [
    pytest.param("{country: nz}", "country",
                 "unknown holiday country 'nz'; did you mean 'NZ' (New Zealand)?", id="case"),
    pytest.param("{country: NZL}", "country",
                 "unknown holiday country 'NZL'; did you mean 'NZ' (New Zealand)?", id="alpha-3"),
    pytest.param("{country: New Zealand}", "country",
                 "unknown holiday country 'New Zealand'; did you mean 'NZ' (New Zealand)?",
                 id="name"),
    pytest.param("{country: XQ}", "country",
                 "unknown holiday country 'XQ'; use the two-letter ISO 3166 code of a country "
                 "the holidays package supports, e.g. 'NZ', 'AU', 'DE', 'GB', 'US'",
                 id="unknown"),
    pytest.param("{country: 64}", "country",
                 "holidays.country must be a two-letter ISO 3166 code such as 'NZ' (got 64)",
                 id="not-text"),
    pytest.param("{country: NZ, subdivision: Auckland}", "subdivision",
                 "unknown subdivision 'Auckland' of New Zealand (NZ); did you mean 'AUK'? use "
                 "one of its codes: AUK, BOP, CAN, CIT, GIS, HKB, MBH, MWT, NSN, NTL, OTA, STL, "
                 "TAS, TKI, WGN, WKO, WTC, South Canterbury", id="subdivision-name"),
    pytest.param("{country: NZ, subdivision: AKL}", "subdivision",
                 "unknown subdivision 'AKL' of New Zealand (NZ); did you mean 'AUK'?",
                 id="subdivision-typo"),
    pytest.param("{country: IT, subdivision: ZZZ}", "subdivision",
                 ", … (114 in all)", id="long-subdivision-list-is-cut"),
    pytest.param("{country: JP, subdivision: '13'}", "subdivision",
                 "Japan (JP) has no subdivisions in the holidays package; remove "
                 "holidays.subdivision (got '13')", id="no-subdivisions"),
    pytest.param("{subdivision: AUK}", "subdivision",
                 "holidays.subdivision 'AUK' needs holidays.country, e.g. {country: NZ, "
                 "subdivision: AUK}", id="subdivision-without-country"),
    pytest.param("{}", "(holidays)",
                 "holidays needs 'country' (e.g. {country: NZ, subdivision: AUK}) and/or "
                 "'dates' (e.g. {dates: [2026-12-29]}); remove the holidays key for "
                 "Saturday-Sunday weekends only", id="empty"),
    pytest.param("{dates: ['29/12/2026']}", "dates[0]",
                 "expected a date written YYYY-MM-DD such as 2026-12-29, without a time "
                 "(got '29/12/2026')", id="date-format"),
    pytest.param("{dates: [2026-12-29T10:00:00Z]}", "dates[0]",
                 "expected a date written YYYY-MM-DD such as 2026-12-29, without a time "
                 "(got datetime.datetime(2026, 12, 29, 10, 0", id="date-with-time"),
    pytest.param("{dates: [2026-12-29, 2027-01-04, 1926-12-29]}", "dates[2]",
                 "holiday 1926-12-29 is outside the years 2000 to 2100; check the year",
                 id="date-year"),
    pytest.param("{dates: [2026-12-29, '2026-12-29']}", "dates",
                 "holiday 2026-12-29 is listed more than once in holidays.dates; keep it once",
                 id="date-twice"),
    pytest.param("{country: NZ, region: AUK}", "region",
                 "unknown key 'region'; allowed keys: country, dates, subdivision",
                 id="unknown-key"),
])
def test_every_mistake_names_file_field_value_and_fix(tmp_path, holidays, field, message):
    path = write(tmp_path, holidays)
    prefix = f"{path}: company.holidays{'' if field == '(holidays)' else '.' + field}: "
    lines = load_catalog(tmp_path).error_lines
    assert len(lines) == 1 and lines[0].startswith(prefix), lines
    assert message in lines[0][len(prefix):]


def test_an_impossible_date_is_one_line_not_a_traceback(tmp_path):
    path = write(tmp_path, "{dates: [2026-02-30]}")
    assert load_catalog(tmp_path).error_lines == [
        f"{path}: line 6 column 22: not valid YAML: '2026-02-30' is not a real date or time "
        "(day is out of range for month); write an existing one, e.g. 2026-12-29"]


def test_validate_warns_about_a_calendar_nothing_reads_and_a_list_that_ran_out(tmp_path):
    write(tmp_path, "{dates: [2026-02-06, 2026-12-29]}", kind="calendar_day")
    catalog = load_catalog(tmp_path)
    during = datetime(2026, 12, 28, 10, tzinfo=UTC)  # 29 Dec in Auckland already
    after = datetime(2026, 12, 29, 11, tzinfo=UTC)  # 30 Dec 00:00 in Auckland
    unread = ("warning: kiwi: company.holidays has no effect: no export of the company uses "
              "window kind previous_business_day (only those windows skip holidays); remove it "
              "or use that window kind")
    assert holiday_warnings(catalog.companies, catalog.schedules, now=during) == [unread]
    assert holiday_warnings(catalog.companies, catalog.schedules, now=after) == [
        unread, "warning: kiwi: company.holidays.dates ends at 2026-12-29, before today "
        "(2026-12-30): previous_business_day now skips Saturdays and Sundays only; add the "
        "coming holidays, or set holidays.country"]
    write(tmp_path, "{country: NZ, dates: [2026-02-06]}")
    catalog = load_catalog(tmp_path)
    assert holiday_warnings(catalog.companies, catalog.schedules, now=after) == []


def test_exportctl_validate_prints_the_warning_and_exits_0(tmp_path):
    write(tmp_path, "{country: NZ}", kind="calendar_day")
    result = exportctl("validate", str(tmp_path), "--no-source")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines()[-1] == (
        f"OK: 1 companies, 1 schedules in {tmp_path} (1 warning(s))")
    assert result.stdout.startswith("warning: kiwi: company.holidays has no effect")


def test_configured_preview_json_has_the_business_day_and_skipped_holidays(tmp_path):
    write(tmp_path, "{country: NZ, subdivision: AUK}")
    result = exportctl("preview", str(tmp_path), "--from", "2026-02-08T18:00Z", "--count", "1",
                       "--json")
    assert result.returncode == 0, result.stderr
    row, = json.loads(result.stdout)
    assert {k: row[k] for k in ("slot_local", "window_start_local", "window_end_local",
                                "business_day", "holidays_skipped")} == {
        "slot_local": "2026-02-09T07:00:00+13:00",
        "window_start_local": "2026-02-05T00:00:00+13:00",
        "window_end_local": "2026-02-06T00:00:00+13:00",
        "business_day": "2026-02-05",
        "holidays_skipped": [{"date": "2026-02-06", "name": "Waitangi Day"}]}


def test_adhoc_preview_takes_a_country_and_listed_dates():
    result = exportctl("preview", "--timezone", "Pacific/Auckland", "--export-hour", "7",
                       "--window", "previous_business_day", "--holidays-country", "NZ",
                       "--holiday", "2027-02-10", "--from", "2027-02-08T18:00Z", "--count", "3",
                       "--json")
    assert result.returncode == 0, result.stderr
    assert [(r["slot_local"][:10], r["business_day"], r["holidays_skipped"])
            for r in json.loads(result.stdout)] == [
        ("2027-02-09", "2027-02-05", [{"date": "2027-02-08", "name": "Waitangi Day (observed)"}]),
        ("2027-02-10", "2027-02-09", []),
        ("2027-02-11", "2027-02-09", [{"date": "2027-02-10",
                                       "name": "listed in holidays.dates"}])]


def test_adhoc_preview_reports_bad_holiday_options_at_once():
    result = exportctl("preview", "--timezone", "Pacific/Auckland", "--window",
                       "previous_business_day", "--holidays-country", "NZL", "--holiday",
                       "2027-13-01")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "exportctl: error: --holidays-country: unknown holiday country 'NZL'; did you mean 'NZ' "
        "(New Zealand)?; --holiday: expected a date written YYYY-MM-DD such as 2026-12-29, "
        "without a time (got '2027-13-01')\n")


def test_a_configured_preview_refuses_adhoc_holiday_options(tmp_path):
    write(tmp_path, "{country: NZ}")
    result = exportctl("preview", str(tmp_path), "--holiday", "2027-02-10")
    assert result.returncode == 2
    assert result.stderr == (
        "exportctl: error: use either CONFIG_DIR or the ad-hoc options (--timezone, ...); a "
        "configured company's holidays are its company.holidays\n")
