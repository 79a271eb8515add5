"""``company.holidays`` as a user writes it (ADR 0018): every mistake is one line naming file,
field, value and the fix."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from export_lib.config.loader import load_catalog
from tests.support.time import SHIPPED

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
                 "'dates' (e.g. {dates: [2026-12-29]}); remove the holidays key for weekends "
                 "only", id="empty"),
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
