"""The obligations page in headless Chromium against a real stack (issue 13, acceptance).

Company pageco has two daily exports whose latest slot is ~12 h ago with a 1 h deadline, so
the stack's own first runs start ~11 h late: ``late-daily`` (``late_start: finish``) exports
anyway and is delivered late; ``held-daily`` (``late_start: hold``) is held for an operator.
The test then exports late-daily's slot of two days before through the real pipeline with a
clock 30 min after that slot (on time), leaving the day between with no run at all: the
missed slot. In Chromium (Debian ``chromium`` + ``chromedriver``, Selenium): log in on
Airflow's login page, open Browse → Export obligations, see the late run and the missed slot,
filter by state and date, drill down into the late run, release the held run; the ledger
records who released it, and clearing the held task in Airflow then exports it.

Screenshots of every step go to ``test-artifacts/screenshots/`` under the project (printed).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.support.browser import headless_chromium
from tests.system.scheduler.harness import SchedulerStack, SlotClock, company_file, widget_export

LATE, HELD = "widget_export__pageco__late-daily", "widget_export__pageco__held-daily"


def COMPANIES(clock: SlotClock) -> dict[str, dict]:  # noqa: N802 (the fixture's name for it)
    return {"pageco": company_file("pageco", [
        widget_export("late-daily", export_hour=clock.hour, deadline="1h", company="pageco"),
        widget_export("held-daily", export_hour=clock.hour, deadline="1h", late_start="hold",
                      company="pageco"),
    ])}
SHOTS = Path(__file__).resolve().parents[3] / "test-artifacts" / "screenshots"
SEED = ("import sys; from datetime import datetime, timedelta; "
        "from export_lib.cli.commands import run_one; "
        "print(run_one('dags/config', 'pageco/late-daily', sys.argv[1], "
        "now=datetime.fromisoformat(sys.argv[1]) + timedelta(minutes=30))['state'])")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with headless_chromium() as driver:
        yield driver


def _slots(stack: SchedulerStack, schedule_id: str) -> list[datetime]:
    """The schedule's slots up to the module's newest due one (a later one may fall due
    mid-test: it runs on time, neither late nor held)."""
    ledger = stack.ledger()
    try:
        return [r.slot for r in ledger.list_runs(schedule_id=schedule_id)
                if r.slot <= stack.clock.newest]
    finally:
        ledger.engine.dispose()


def test_support_sees_late_and_missed_filters_drills_down_and_releases(scheduler_stack, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    stack, d = scheduler_stack, browser
    started = time.monotonic()
    stack.wait_for_run(LATE, state="success", timeout=240)
    held_run = stack.wait_for_run(HELD, state="failed", timeout=240)
    (latest,) = _slots(stack, "pageco/late-daily")
    assert _slots(stack, "pageco/held-daily") == [latest]
    before = latest - timedelta(days=2)
    seeded = stack.run_cli(str(stack.root / ".venv" / "bin" / "python"), "-c", SEED,
                           before.strftime("%Y-%m-%dT%H:%MZ"))
    assert seeded.stdout.strip() == "ready", seeded.stderr
    late_key = f"pageco/late-daily/{latest:%Y-%m-%dT%H:%MZ}"
    held_key = f"pageco/held-daily/{latest:%Y-%m-%dT%H:%MZ}"
    missed = latest - timedelta(days=1)
    SHOTS.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots in {SHOTS}; ledger ready after {time.monotonic() - started:.0f} s")

    wait = WebDriverWait(d, 30)

    def shot(name: str) -> None:
        d.save_screenshot(str(SHOTS / f"{name}.png"))

    def apply() -> None:
        """Submit the filter form and wait for the new page: until the old one is gone, a
        wait on its text may pass on the old page and the next lookup go stale (CI, 3 Dec)."""
        old = d.find_element(By.TAG_NAME, "html")
        d.find_element(By.ID, "f-apply").click()
        wait.until(ec.staleness_of(old))

    # Airflow's own login page, then Browse → Export obligations from the nav menu.
    d.get(f"http://localhost:{stack.env['PORT']}/")
    wait.until(ec.presence_of_element_located((By.NAME, "username"))).send_keys("admin")
    d.find_element(By.NAME, "password").send_keys("admin")
    shot("01-login")
    d.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "button[aria-label=Browse]"))).click()
    wait.until(ec.element_to_be_clickable(
        (By.XPATH, "//*[@role='menuitem'][normalize-space()='Export obligations']"))).click()
    wait.until(ec.frame_to_be_available_and_switch_to_it((By.TAG_NAME, "iframe")))
    wait.until(ec.presence_of_element_located((By.ID, "schedules")))
    d.switch_to.default_content()
    shot("02-obligations-in-airflow")
    d.switch_to.frame(d.find_element(By.TAG_NAME, "iframe"))

    # The late run and the missed slot, in the strip and in the runs list.
    strip = d.find_element(By.CSS_SELECTOR, "tr[data-schedule='pageco/late-daily'] .strip")
    cells = {c.get_attribute("data-slot"): c for c in strip.find_elements(By.CLASS_NAME, "cell")}
    iso = "%Y-%m-%dT%H:%M:%SZ"
    assert [cells[t.strftime(iso)].get_attribute("data-outcome")
            for t in (before, missed, latest)] == ["on_time", "no_run", "late"]
    assert "expected, no run" in cells[missed.strftime(iso)].get_attribute("title")
    # The runs list shows pageco's runs once filtered: unfiltered, its 25 newest slots come
    # from every module on the shared stack, and with EXPORT_TEST_HOURS_AHEAD=1 theirs are
    # newer than pageco's ~23 h old late run.
    Select(d.find_element(By.ID, "f-company")).select_by_value("pageco")
    apply()
    late_row = wait.until(ec.presence_of_element_located(
        (By.CSS_SELECTOR, f"#runs tr[data-run='{late_key}']")))
    # ~24 - HOURS_AHEAD - 1 h late: ~11 h by default
    assert "delivered late" in late_row.text and re.search(r"late by \d+ h", late_row.text), \
        late_row.text
    held_row = d.find_element(By.CSS_SELECTOR, f"#runs tr[data-run='{held_key}']")
    assert held_row.get_attribute("data-outcome") == "held"

    # Filters: pageco's runs (kept from above) by state, then by date range (the latest slot's
    # day only).
    assert Select(d.find_element(By.ID, "f-company")).first_selected_option.get_attribute(
        "value") == "pageco"
    Select(d.find_element(By.ID, "f-state")).select_by_value("late")
    apply()
    wait.until(ec.text_to_be_present_in_element((By.ID, "shown"), "runs 1–1 of 1"))
    assert [r.get_attribute("data-run") for r in d.find_elements(
        By.CSS_SELECTOR, "#runs tr[data-run]")] == [late_key]
    shot("03-filtered-late")
    Select(d.find_element(By.ID, "f-state")).select_by_value("")
    day = latest.strftime("%m%d%Y")  # Chromium's date input takes the digits of mm/dd/yyyy
    d.find_element(By.ID, "f-since").send_keys(day)
    d.find_element(By.ID, "f-until").send_keys(day)
    apply()
    wait.until(ec.text_to_be_present_in_element((By.ID, "shown"), "runs 1–2 of 2"))
    assert sorted(r.get_attribute("data-run") for r in d.find_elements(
        By.CSS_SELECTOR, "#runs tr[data-run]")) == [held_key, late_key]
    assert f"since={latest:%Y-%m-%d}" in d.current_url
    shot("04-filtered-by-date")

    # Drill down into the late run: window, artifact manifest, the delivery and its receipt.
    d.find_element(By.CSS_SELECTOR, f"#runs tr[data-run='{late_key}'] a").click()
    facts = wait.until(ec.presence_of_element_located((By.ID, "facts"))).text
    assert f"{latest - timedelta(days=1):%Y-%m-%dT00:00:00Z} → {latest:%Y-%m-%dT00:00:00Z}" \
        in facts and "late by" in facts
    (artifact,) = d.find_elements(By.CSS_SELECTOR, "#artifacts tr:not(:first-child)")
    sha = stack.ledger().latest_artifact(late_key).sha256
    assert sha in artifact.text
    assert "to box (local), artifact v1: acknowledged" in d.page_source
    assert "delivered" in d.find_element(By.ID, "da-box").text
    shot("05-late-run-details")

    # Release the held run from its page; the ledger records who.
    d.find_element(By.LINK_TEXT, "← all obligations").click()
    Select(wait.until(ec.presence_of_element_located((By.ID, "f-state")))).select_by_value("held")
    apply()
    wait.until(ec.text_to_be_present_in_element((By.ID, "shown"), "runs 1–1 of 1"))
    d.find_element(By.CSS_SELECTOR, f"#runs tr[data-run='{held_key}'] a").click()
    wait.until(ec.element_to_be_clickable((By.ID, "do-release")))
    shot("06-held-run")
    d.find_element(By.ID, "do-release").click()
    note = wait.until(ec.presence_of_element_located((By.ID, "note"))).text
    assert note.startswith("Released")
    shot("07-released")
    ledger = stack.ledger()
    try:
        assert ledger.get_run(held_key).reason == "released by admin (obligations page)"
        assert ledger.is_released(held_key)
    finally:
        ledger.engine.dispose()

    # Clearing the held task (as the page says) exports the released run.
    print(f"browser steps done after {time.monotonic() - started:.0f} s")
    stack.clear(HELD, held_run["dag_run_id"], ["resolve_window"], downstream=True)
    stack.wait_for_clear(HELD, held_run["dag_run_id"])
    ledger = stack.ledger()
    try:
        assert ledger.get_run(held_key).state == "ready"  # the reason moved on; the history keeps who
        assert "released by operator admin (obligations page)" in [
            e["detail"] for e in ledger.events(held_key)]
    finally:
        ledger.engine.dispose()
    print(f"held run released and exported after {time.monotonic() - started:.0f} s")
    d.execute_script("location.reload()")  # the iframe's page, not Airflow's
    # held-daily's only run was registered after its deadline (the stack started past it): a
    # first catch-up, delivered without a verdict (ADR 0029), where late-daily's run is late
    # because the seeded run of two days before had deployed that schedule.
    facts = wait.until(lambda drv: (t := drv.find_element(By.ID, "facts").text)
                       and "after a deadline that passed before the schedule was deployed" in t
                       and t)
    assert "not tracked" in facts and "delivered late" not in facts, facts
    shot("08-released-run-delivered")
    print(f"done after {time.monotonic() - started:.0f} s")


def test_the_manual_export_trigger_form_renders_the_draft7_params(scheduler_stack, browser):
    """Airflow's trigger form (the "Trigger" button on the DAG's page) builds its fields from
    the params' JSON Schema, which declares Draft 7 (export_airflow/building/params.py, issue 25 item 3):
    every param a field with its title, description and required mark, the company and the
    base export preset to this company's values, the missing window and reason shown
    as required, the Trigger button disabled until they are filled; no schema text leaks."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    stack, d = scheduler_stack, browser
    wait = WebDriverWait(d, 30)
    d.get(f"http://localhost:{stack.env['PORT']}/dags/manual_export__pageco")
    if d.find_elements(By.NAME, "username"):  # run alone: log in first
        d.find_element(By.NAME, "username").send_keys("admin")
        d.find_element(By.NAME, "password").send_keys("admin")
        d.find_element(By.CSS_SELECTOR, "[type=submit]").click()
        d.get(f"http://localhost:{stack.env['PORT']}/dags/manual_export__pageco")
    wait.until(ec.element_to_be_clickable(
        (By.XPATH, "//button[normalize-space()='Trigger']"))).click()
    wait.until(ec.presence_of_element_located((By.ID, "element_reason")))
    SHOTS.mkdir(parents=True, exist_ok=True)
    d.save_screenshot(str(SHOTS / "09-manual-export-trigger-form.png"))

    labels = d.execute_script("return Array.from(document.querySelectorAll("
                              "'[role=dialog] label')).map(l => l.innerText.trim())")
    start = labels.index("Company\n*")
    assert labels[start:start + 9] == [f"{title}\n*" for title in (
        "Company", "Based on export", "Window start", "Window end", "Columns", "Format",
        "Destinations", "Reason", "Regenerate")]

    def value(name: str) -> str:
        return d.find_element(By.CSS_SELECTOR, f"input[name='element_{name}']").get_attribute(
            "value")

    assert (value("company"), value("format")) == ("pageco", "csv")
    assert value("base_export") in {"pageco/late-daily", "pageco/held-daily"}
    dialog = d.find_element(By.TAG_NAME, "body").text
    assert "This DAG exports this company's data only." in dialog
    assert "Why this export is needed (kept in the run's history)." in dialog
    assert dialog.count("This field is required") == 3  # window start, window end, reason
    assert "$schema" not in d.page_source and "draft-07" not in d.page_source
    # The page's own Trigger button opened the form; the form's is the last one, disabled.
    triggers = [b for b in d.find_elements(By.TAG_NAME, "button") if b.text.strip() == "Trigger"]
    assert len(triggers) == 2 and triggers[-1].get_attribute("disabled") is not None
