"""Business days know holidays (issue 22 item 6, ADR 0019): ``previous_business_day`` windows of a
company with ``holidays`` skip its public holidays and listed dates like weekends, in the
company's timezone; a holiday edit is a new config version captured by each run."""

from __future__ import annotations

import re
from datetime import date, timedelta
from pathlib import Path

import pytest

from export_lib.config.holiday_calendar import HolidayCalendar
from export_lib.config.loader import load_catalog
from export_lib.config.models import Schedule
from export_lib.errors import WindowError
from export_lib.periods.business_days import (
    holidays_skipped,
    is_business_day,
    is_weekend_day,
    previous_business_day,
    weekend_name,
)
from export_lib.periods.preview import render_table, schedule_rows
from export_lib.periods.windows import resolve_window
from tests.support.time import SHIPPED, utc

KIWI = """\
company:
  id: kiwi
  name: Kiwi
  timezone: Pacific/Auckland
  owner: ops@kiwi.example
%(holidays)s
widget_exports:
  - id: revenue
    export_hour: 7
    window: {kind: previous_business_day}
    query: {table: widget_metrics, columns: [company_id], timestamp_column: event_time,
            tenant_column: company_id}
    destinations: [{id: d, type: local, path: outbox/kiwi/revenue}]
data_exports:
  - channel: ads
    destinations: [{id: e, type: local, path: outbox/kiwi/ads}]
    secondary: {cron: "0 19 * * *", window: {kind: previous_business_day}}
"""
NZ_AUCKLAND = "  holidays: {country: NZ, subdivision: AUK}"


def catalog_with(tmp_path: Path, holidays: str = NZ_AUCKLAND):
    (tmp_path / "defaults.yaml").write_text((SHIPPED / "defaults.yaml").read_text())
    (tmp_path / "kiwi.yaml").write_text(KIWI % {"holidays": holidays})
    catalog = load_catalog(tmp_path)
    assert catalog.errors == {}
    return catalog


def nz_day(day: str) -> tuple[str, str]:
    """The UTC bounds of one Auckland day in February (NZDT, +13:00)."""
    start = date.fromisoformat(day)
    return (f"{start - timedelta(days=1)}T11:00:00+00:00", f"{start}T11:00:00+00:00")


def bounds(schedule: Schedule, slot: str) -> tuple[str, str]:
    window = resolve_window(schedule, utc(slot))
    return window.start.isoformat(), window.end.isoformat()


@pytest.mark.parametrize(("slot", "reports"), [
    pytest.param("2026-02-05T18:00Z", "2026-02-05", id="fri-waitangi-day-reports-thursday"),
    pytest.param("2026-02-06T18:00Z", "2026-02-05", id="sat-after-waitangi-day-reports-thursday"),
    pytest.param("2026-02-07T18:00Z", "2026-02-05", id="sun-reports-thursday"),
    pytest.param("2026-02-08T18:00Z", "2026-02-05", id="mon-after-waitangi-day-reports-thursday"),
    pytest.param("2026-02-09T18:00Z", "2026-02-09", id="tue-reports-monday"),
])
def test_the_export_after_waitangi_day_covers_the_business_day_before_it(tmp_path, slot,
                                                                          reports):
    """The acceptance: Waitangi Day 2026 is Friday 6 Feb; every export until Tuesday reports
    Thursday 5 Feb (slots are 07:00 Auckland, NZDT = UTC+13)."""
    schedule = catalog_with(tmp_path).schedule("kiwi/revenue")
    assert bounds(schedule, slot) == nz_day(reports)


def test_without_holidays_the_monday_export_reports_the_holiday(tmp_path):
    schedule = catalog_with(tmp_path, holidays="").schedule("kiwi/revenue")
    assert bounds(schedule, "2026-02-08T18:00Z") == nz_day("2026-02-06")


def test_an_observed_holiday_after_a_weekend_is_skipped_too():
    """Waitangi Day 2027 is a Saturday, observed on Monday 8 Feb: Tuesday reports Friday."""
    nz = HolidayCalendar(country="NZ")
    assert previous_business_day(date(2027, 2, 9), nz) == date(2027, 2, 5)
    assert holidays_skipped(date(2027, 2, 9), nz) == (
        (date(2027, 2, 8), "Waitangi Day (observed)"),)
    assert previous_business_day(date(2027, 2, 8), nz) == date(2027, 2, 5)
    assert holidays_skipped(date(2027, 2, 8), nz) == ()  # only the weekend lies between


def test_a_chain_of_holidays_listed_dates_and_weekends():
    """Christmas to New Year in New Zealand plus a company shutdown on 29–31 Dec: the export of
    Tuesday 5 Jan 2027 reports Thursday 24 Dec 2026, and says which holidays it skipped."""
    calendar = HolidayCalendar(country="NZ", dates=(date(2026, 12, 31), date(2026, 12, 29),
                                                    date(2026, 12, 30)))
    assert calendar.dates == (date(2026, 12, 29), date(2026, 12, 30), date(2026, 12, 31))
    assert previous_business_day(date(2027, 1, 5), calendar) == date(2026, 12, 24)
    assert holidays_skipped(date(2027, 1, 5), calendar) == (
        (date(2026, 12, 25), "Christmas Day"),
        (date(2026, 12, 28), "Boxing Day (observed)"),
        (date(2026, 12, 29), "listed in holidays.dates"),
        (date(2026, 12, 30), "listed in holidays.dates"),
        (date(2026, 12, 31), "listed in holidays.dates"),
        (date(2027, 1, 1), "New Year's Day"),
        (date(2027, 1, 4), "Day after New Year's Day (observed)"))
    without_shutdown = HolidayCalendar(country="NZ")
    assert previous_business_day(date(2027, 1, 5), without_shutdown) == date(2026, 12, 31)


def test_the_subdivision_decides_the_regional_anniversary_days():
    """Wellington Anniversary Day is Monday 19 Jan 2026, Auckland's Monday 26 Jan."""
    auckland = HolidayCalendar(country="NZ", subdivision="AUK")
    wellington = HolidayCalendar(country="NZ", subdivision="WGN")
    national = HolidayCalendar(country="NZ")
    tuesdays = (date(2026, 1, 20), date(2026, 1, 27))
    assert [previous_business_day(d, auckland) for d in tuesdays] == [
        date(2026, 1, 19), date(2026, 1, 23)]
    assert [previous_business_day(d, wellington) for d in tuesdays] == [
        date(2026, 1, 16), date(2026, 1, 26)]
    assert [previous_business_day(d, national) for d in tuesdays] == [
        date(2026, 1, 19), date(2026, 1, 26)]


def test_holidays_are_days_of_the_company_timezone_whatever_the_cron_timezone(tmp_path):
    """The data export fires at 19:00 UTC, 08:00 the next day in Auckland. Its slot of Monday
    9 Feb 19:00 UTC is Tuesday in Auckland, so it reports Monday 9 Feb; by the UTC date
    (Monday) it would have skipped Waitangi Day and reported Thursday."""
    schedule = catalog_with(tmp_path).schedule("kiwi/ads/secondary")
    assert (schedule.timing.timezone, schedule.window_timezone) == ("UTC", "Pacific/Auckland")
    assert bounds(schedule, "2026-02-09T19:00Z") == nz_day("2026-02-09")
    assert bounds(schedule, "2026-02-08T19:00Z") == nz_day("2026-02-05")  # Monday in Auckland


def test_listed_dates_alone_in_another_timezone(tmp_path):
    """A Berlin company that closes on Friday 27 Mar 2026: Monday reports Thursday, in Berlin
    time (CET, UTC+1), and a week later the weekend alone applies again."""
    (tmp_path / "defaults.yaml").write_text((SHIPPED / "defaults.yaml").read_text())
    (tmp_path / "kiwi.yaml").write_text(
        (KIWI % {"holidays": "  holidays: {dates: [2026-03-27]}"})
        .replace("Pacific/Auckland", "Europe/Berlin"))
    schedule = load_catalog(tmp_path).schedule("kiwi/revenue")
    assert bounds(schedule, "2026-03-30T05:00Z") == ("2026-03-25T23:00:00+00:00",
                                                     "2026-03-26T23:00:00+00:00")
    assert bounds(schedule, "2026-04-06T05:00Z") == ("2026-04-02T22:00:00+00:00",
                                                     "2026-04-03T22:00:00+00:00")


def test_a_calendar_that_closes_every_day_is_a_window_error_not_a_hang():
    weekdays = [date(2025, 6, 2) + timedelta(days=n) for n in range(580)]
    calendar = HolidayCalendar(dates=tuple(d for d in weekdays if d.weekday() < 5))
    with pytest.raises(WindowError, match=r"no business day in the 366 days before 2027-01-01: "
                       r"every one is a weekend day \(Saturday and Sunday\) or a holiday of the "
                       r"calendar \(415 listed "
                       r"dates\); check company.holidays.dates"):
        previous_business_day(date(2027, 1, 1), calendar)


def test_preview_shows_the_business_day_and_the_holidays_it_skipped(tmp_path):
    schedule = catalog_with(tmp_path).schedule("kiwi/revenue")
    rows = schedule_rows(schedule, utc("2026-02-05T18:00Z"), 5)
    assert [(r["slot_local"], r["business_day"], r["holidays_skipped"]) for r in rows] == [
        ("2026-02-06T07:00:00+13:00", "2026-02-05", []),
        ("2026-02-07T07:00:00+13:00", "2026-02-05",
         [{"date": "2026-02-06", "name": "Waitangi Day"}]),
        ("2026-02-08T07:00:00+13:00", "2026-02-05",
         [{"date": "2026-02-06", "name": "Waitangi Day"}]),
        ("2026-02-09T07:00:00+13:00", "2026-02-05",
         [{"date": "2026-02-06", "name": "Waitangi Day"}]),
        ("2026-02-10T07:00:00+13:00", "2026-02-09", [])]
    lines = render_table(rows).splitlines()
    cells = [re.split(r"\s{2,}", line) for line in lines]
    assert cells[0] == ["slot (local)", "slot (UTC)", "window start", "window end",
                        "business day", "holidays skipped", "deadline (UTC)", "run key"]
    assert cells[3][4:6] == ["Thu 2026-02-05", "Fri 2026-02-06 Waitangi Day"]
    assert cells[6][4:6] == ["Mon 2026-02-09", "2026-02-09T20:00:00Z"]  # nothing skipped


def test_preview_of_a_schedule_without_holidays_has_no_holiday_columns():
    rows = schedule_rows(load_catalog(SHIPPED).schedule("kiwi-outdoors/business-day-revenue"),
                         utc("2026-02-05T18:00Z"), 2)
    assert not {"business_day", "holidays_skipped"} & {key for row in rows for key in row}


def test_a_holiday_edit_is_a_new_config_version(tmp_path):
    plain = catalog_with(tmp_path, holidays="").schedule("kiwi/revenue")
    assert "holidays" not in plain.snapshot()["company"]  # older configs keep their version
    nz = catalog_with(tmp_path).schedule("kiwi/revenue")
    assert nz.snapshot()["company"]["holidays"] == {"country": "NZ", "subdivision": "AUK",
                                                    "dates": []}
    listed = catalog_with(tmp_path, NZ_AUCKLAND.replace("}", ", dates: [2026-12-30, "
                                                        "2026-12-29]}"))
    reordered = catalog_with(tmp_path, NZ_AUCKLAND.replace("}", ", dates: [2026-12-29, "
                                                           "2026-12-30]}"))
    versions = {plain.config_version, nz.config_version,
                listed.schedule("kiwi/revenue").config_version}
    assert len(versions) == 3
    assert reordered.schedule("kiwi/revenue").config_version == (
        listed.schedule("kiwi/revenue").config_version)  # the list is kept sorted


def test_a_run_captures_the_holiday_window_and_the_calendar(tmp_path):
    """What a task rebuilds from the run (``schedule_of``: the snapshot) is the same calendar."""
    from export_lib.ledger import open_ledger
    from export_lib.pipeline import register_run

    (tmp_path / "config").mkdir()
    schedule = catalog_with(tmp_path / "config").schedule("kiwi/revenue")
    ledger = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.upgrade()
    slot = utc("2026-02-08T18:00Z")
    summary = register_run(ledger, schedule, slot, now=slot + timedelta(minutes=1))
    assert (summary.window.start.isoformat(), summary.window.end.isoformat()) == (
        nz_day("2026-02-05"))
    assert summary.config_version == schedule.config_version
    run = ledger.get_run(summary.run_key)
    assert run.config_snapshot["company"]["holidays"]["country"] == "NZ"
    rebuilt = Schedule.model_validate(run.config_snapshot)
    assert rebuilt.company.holidays == schedule.company.holidays
    assert rebuilt.with_version().config_version == schedule.config_version


# The country's own weekend and working-day rules (the ``holidays`` package's), each date worked
# out by hand from the law: Israel rests Friday–Saturday; Saudi Arabia Friday–Saturday (since
# 28 Jun 2013); the UAE Saturday–Sunday since 1 Jan 2022 (Friday–Saturday before); Russia moved
# the day off of Saturday 1 Nov 2025 to Monday 3 Nov, so that Saturday is a working day.
IL, SA, AE, RU, DE = (HolidayCalendar(country=c) for c in ("IL", "SA", "AE", "RU", "DE"))


@pytest.mark.parametrize(("calendar", "day", "reports"), [
    pytest.param(IL, "2026-03-01", "2026-02-26", id="il-sunday-reports-thursday"),
    pytest.param(IL, "2026-03-02", "2026-03-01", id="il-monday-reports-sunday"),
    pytest.param(IL, "2026-02-28", "2026-02-26", id="il-saturday-reports-thursday"),
    pytest.param(IL, "2026-09-14", "2026-09-10", id="il-rosh-hashanah-sat-sun-monday-reports-thu"),
    pytest.param(IL, "2025-04-14", "2025-04-10", id="il-pesach-on-sunday-monday-reports-thu"),
    pytest.param(SA, "2026-02-15", "2026-02-12", id="sa-sunday-reports-thursday"),
    pytest.param(SA, "2026-02-23", "2026-02-19", id="sa-founding-day-sunday-monday-reports-thu"),
    pytest.param(SA, "2025-02-24", "2025-02-20", id="sa-founding-day-sat-observed-sun"),
    pytest.param(AE, "2026-03-01", "2026-02-27", id="ae-sunday-reports-friday"),
    pytest.param(AE, "2026-03-02", "2026-02-27", id="ae-monday-reports-friday"),
    pytest.param(AE, "2025-12-03", "2025-11-28", id="ae-national-day-mon-tue-wed-reports-fri"),
    pytest.param(AE, "2021-03-07", "2021-03-04", id="ae-2021-friday-saturday-weekend"),
    pytest.param(RU, "2025-11-05", "2025-11-01", id="ru-working-saturday-after-two-days-off"),
    pytest.param(RU, "2025-11-02", "2025-11-01", id="ru-sunday-reports-working-saturday"),
    pytest.param(RU, "2025-11-01", "2025-10-31", id="ru-working-saturday-reports-friday"),
    pytest.param(RU, "2025-11-10", "2025-11-07", id="ru-ordinary-monday-reports-friday"),
    pytest.param(DE, "2026-04-07", "2026-04-02", id="de-easter-unchanged"),
    pytest.param(DE, "2026-03-01", "2026-02-27", id="de-sunday-reports-friday"),
    pytest.param(None, "2026-03-01", "2026-02-27", id="none-sunday-reports-friday"),
    pytest.param(HolidayCalendar(dates=(date(2026, 2, 26),)), "2026-03-01", "2026-02-27",
                 id="dates-alone-keep-saturday-sunday"),
])
def test_previous_business_day_follows_the_country_weekend(calendar, day, reports):
    assert previous_business_day(date.fromisoformat(day), calendar) == date.fromisoformat(reports)


def test_holidays_skipped_names_only_those_on_working_days():
    """A holiday on the country's weekend is left out (the weekend skipped it anyway); one on
    a working day is named, whatever its weekday."""
    assert holidays_skipped(date(2026, 9, 14), IL) == ((date(2026, 9, 13), "Rosh Hashanah"),)
    assert holidays_skipped(date(2025, 2, 24), SA) == (
        (date(2025, 2, 23), "Founding Day Holiday (observed)"),)
    assert holidays_skipped(date(2025, 12, 3), AE) == (
        (date(2025, 12, 1), "National Day"), (date(2025, 12, 2), "National Day"))
    assert holidays_skipped(date(2025, 11, 5), RU) == (
        (date(2025, 11, 3), "Day off (substituted from 11/01/2025)"),
        (date(2025, 11, 4), "Unity Day"))
    assert holidays_skipped(date(2026, 3, 1), IL) == ()  # Friday and Saturday: the weekend


def test_the_weekend_in_words():
    assert [weekend_name(date(2026, 3, 1), c) for c in (IL, SA, AE, RU, DE, None)] == [
        "Friday and Saturday", "Friday and Saturday", "Saturday and Sunday",
        "Saturday and Sunday", "Saturday and Sunday", "Saturday and Sunday"]
    assert weekend_name(date(2021, 3, 7), AE) == "Friday and Saturday"
    assert is_weekend_day(date(2025, 11, 1), RU)  # a weekend day, though worked that week
    assert is_business_day(date(2025, 11, 1), RU)
    assert not is_business_day(date(2025, 11, 8), RU)


def test_a_closed_calendar_names_the_country_weekend():
    weekdays = [date(2025, 6, 1) + timedelta(days=n) for n in range(580)]
    calendar = HolidayCalendar(country="IL", dates=tuple(d for d in weekdays
                                                         if d.weekday() not in (4, 5)))
    with pytest.raises(WindowError, match=r"no business day in the 366 days before 2027-01-01: "
                       r"every one is a weekend day \(Friday and Saturday\) or a holiday of the "
                       r"calendar \(IL holidays \+ \d+ listed dates\)"):
        previous_business_day(date(2027, 1, 1), calendar)


def test_an_israeli_company_sunday_export_reports_thursday(tmp_path):
    """Through the config: 07:00 on Sunday 1 Mar 2026 in Jerusalem (IST, UTC+2) reports
    Thursday 26 Feb; Monday's export reports Sunday, a working day there."""
    (tmp_path / "defaults.yaml").write_text((SHIPPED / "defaults.yaml").read_text())
    (tmp_path / "kiwi.yaml").write_text(
        (KIWI % {"holidays": "  holidays: {country: IL}"}).replace("Pacific/Auckland",
                                                                    "Asia/Jerusalem"))
    schedule = load_catalog(tmp_path).schedule("kiwi/revenue")
    assert bounds(schedule, "2026-03-01T05:00Z") == ("2026-02-25T22:00:00+00:00",
                                                     "2026-02-26T22:00:00+00:00")
    assert bounds(schedule, "2026-03-02T05:00Z") == ("2026-02-28T22:00:00+00:00",
                                                     "2026-03-01T22:00:00+00:00")
