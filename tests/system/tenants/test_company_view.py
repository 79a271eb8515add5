"""The company view in headless Chromium on a real `make run` stack (issue 47, acceptance).

On the folder's stack (tenant_stack.py: the FAB auth manager with a viewer and an operator role
per company and the demo users of ``.airflow/demo-users.json``; the shared scheduler stack runs
SimpleAuthManager, which cannot scope a user to one company). The browser opens the UI at
``http://127.0.0.1:<port>``, not at ``localhost``: the export pages must work at whichever
address a person uses.

* acme's operator, from Browse → Export companies, finds daily-spend's next runs in UTC, moves
  its export hour from 07:00 to 09:00 (plan first, then Apply): the company file says 9, the
  history shows the change under the operator's name (and the ledger records it), and the
  timetable Airflow holds for the DAG fires at 09:00 once it re-parses;
* Export now (preset "yesterday") creates exactly one run of ``manual_export__acme`` with
  yesterday's Berlin day as its window, which exports it;
* acme's viewer sees the page with no working change control: no form, and a direct POST is
  refused with 403, nothing written;
* kiwi-outdoors' operator gets 404 for acme's page and its JSON, and a POST changes nothing.

Screenshots go to ``test-artifacts/screenshots/company-*.png``.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from tests.support.browser import headless_chromium
from tests.system.soak.stack import Api, now_utc, wait_for
from tests.system.tenants.tenant_stack import OPERATOR, OTHER, VIEWER, World

DAILY, DAG = "acme/daily-spend", "widget_export__acme__daily-spend"
SHOTS = Path(__file__).resolve().parents[3] / "test-artifacts" / "screenshots"
BERLIN = ZoneInfo("Europe/Berlin")


def _post(world: World, user: str, path: str, form: dict[str, str]) -> tuple[int, str]:
    api = Api(world.base).login(user, world.users[user]["password"])
    request = urllib.request.Request(
        world.base + path, data=urlencode(form).encode(), method="POST",
        headers={"Authorization": f"Bearer {api.token}",
                 "Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _get(world: World, user: str, path: str) -> tuple[int, str]:
    api = Api(world.base).login(user, world.users[user]["password"])
    status, body = api.call("GET", path)
    return status, body if isinstance(body, str) else json.dumps(body)


def _actions(world: World) -> list[dict]:
    engine = sa.create_engine(world.stack.stack_environ()["EXPORT_LEDGER_URL"])
    try:
        with engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(sa.text(
                "SELECT who, action, target_id, outcome FROM operator_actions "
                "WHERE company = 'acme' ORDER BY id"))]
    finally:
        engine.dispose()


def _sign_in(d, wait, base: str, user: str, password: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    d.delete_all_cookies()
    d.get(base + "/")
    wait.until(ec.presence_of_element_located((By.NAME, "username"))).send_keys(user)
    d.find_element(By.NAME, "password").send_keys(password)
    d.find_element(By.CSS_SELECTOR, "input[type=submit], button[type=submit]").click()
    wait.until(lambda drv: "/auth/login" not in drv.current_url)
    # Whatever address the person used, they stay on it.
    assert d.current_url.startswith(base), d.current_url


def test_support_moves_the_export_hour_exports_now_and_nobody_else_can(world: World) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    SHOTS.mkdir(parents=True, exist_ok=True)
    base, acme_file = world.base, world.stack.root / "dags" / "config" / "acme.yaml"
    assert base.startswith("http://127.0.0.1:")
    started = time.monotonic()
    with headless_chromium() as d:
        wait = WebDriverWait(d, 60)

        def shot(name: str) -> None:
            d.save_screenshot(str(SHOTS / f"company-{name}.png"))

        # -- the operator: Browse → Export companies → acme, next runs in UTC ----------------
        _sign_in(d, wait, base, OPERATOR, world.users[OPERATOR]["password"])
        wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "button[aria-label=Browse]"))
                   ).click()
        wait.until(ec.element_to_be_clickable(
            (By.XPATH, "//*[@role='menuitem'][normalize-space()='Export companies']"))).click()
        wait.until(ec.frame_to_be_available_and_switch_to_it((By.TAG_NAME, "iframe")))
        wait.until(ec.element_to_be_clickable((By.ID, "c-acme"))).click()
        card = wait.until(ec.presence_of_element_located(
            (By.CSS_SELECTOR, f"section[data-schedule='{DAILY}']")))
        shot("01-acme")
        now = now_utc()
        expected = []  # the next 07:00 Berlin slots, in UTC
        day = now.astimezone(BERLIN).date()
        while len(expected) < 3:
            slot = datetime(day.year, day.month, day.day, 7, tzinfo=BERLIN).astimezone(UTC)
            if slot > now:
                expected.append(f"{slot:%Y-%m-%dT%H:%M:%SZ}")
            day += timedelta(days=1)
        rows = card.find_elements(By.CSS_SELECTOR, f"table[id='next-{DAILY}'] tr")[1:]
        assert len(rows) == 5
        utc_cells = [r.find_elements(By.TAG_NAME, "td")[1].text for r in rows]
        assert utc_cells[:3] == expected, utc_cells
        assert "export_hour = 7" in card.text and "(company timezone)" in card.text

        # -- move the export hour: the plan first, then Apply --------------------------------
        card.find_element(By.NAME, "export_hour").send_keys("9")
        d.find_element(By.ID, f"plan-{DAILY}").click()
        summary = wait.until(ec.presence_of_element_located((By.ID, "plan-summary"))).text
        assert "export_hour 7 → 9" in summary, summary
        assert "+    export_hour: 9" in d.find_element(By.ID, "diff").text
        assert "export_hour: 7" in acme_file.read_text()  # nothing written by the plan
        shot("02-plan")
        d.find_element(By.NAME, "why").send_keys("customer wants the file by 09:00")
        d.find_element(By.ID, "do-apply").click()
        note = wait.until(ec.presence_of_element_located((By.ID, "note"))).text
        assert note.startswith("Changed"), note
        history = d.find_element(By.ID, "history").text
        assert f"{OPERATOR} (company page)" in history and "export_hour 7 → 9" in history
        shot("03-changed")
        assert "export_hour: 9  # was 7 before" in acme_file.read_text()
        (action,) = _actions(world)
        assert (action["who"], action["action"], action["target_id"]) == (
            f"{OPERATOR} (company page)", "reschedule", DAILY)

        # -- Export now: yesterday in Berlin, one run with that window ------------------------
        before = {r["dag_run_id"] for r in world.admin.ok(
            "GET", "/api/v2/dags/manual_export__acme/dagRuns")["dag_runs"]}
        Select(d.find_element(By.ID, "en-base")).select_by_value(DAILY)
        Select(d.find_element(By.ID, "en-preset")).select_by_value("yesterday")
        d.find_element(By.ID, "en-reason").send_keys("customer lost yesterday's file")
        d.find_element(By.ID, "en-go").click()
        link = wait.until(ec.presence_of_element_located((By.ID, "started-run")))
        run_id = link.text
        shot("04-exported-now")
        d.switch_to.default_content()
    print(f"operator steps done after {time.monotonic() - started:.0f} s")

    runs = world.admin.ok("GET", "/api/v2/dags/manual_export__acme/dagRuns")["dag_runs"]
    new = [r for r in runs if r["dag_run_id"] not in before]
    assert [r["dag_run_id"] for r in new] == [run_id]
    yesterday = (now.astimezone(BERLIN) - timedelta(days=1)).date()
    start = datetime(yesterday.year, yesterday.month, yesterday.day, tzinfo=BERLIN)
    end = start + timedelta(days=1)
    end = datetime(end.year, end.month, end.day, tzinfo=BERLIN)
    assert (new[0]["conf"]["window_start"], new[0]["conf"]["window_end"]) == (
        start.isoformat(), end.isoformat())
    assert new[0]["conf"]["base_export"] == DAILY and new[0]["triggered_by"] == "ui"
    wait_for(lambda: world.admin.ok("GET", f"/api/v2/dags/manual_export__acme/dagRuns/"
                                           f"{run_id}")["state"] in ("success", "failed"),
             400, what="the Export-now run")
    done = world.admin.ok("GET", f"/api/v2/dags/manual_export__acme/dagRuns/{run_id}")
    assert done["state"] == "success", done
    # (The folder's stack holds one more acme manual run: the tenants' of hourly-clicks.)
    tenants = world.acme_manual_key()
    manual = [r for r in world.stack.ledger_runs()
              if r["run_key"].startswith("acme/manual/") and r["run_key"] != tenants]
    assert [(r["window_start_utc"], r["window_end_utc"], r["state"]) for r in manual] == [
        (f"{start.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}", f"{end.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}",
         "ready")]

    # -- Airflow follows the new hour at its next parse ----------------------------------------
    # (Its next_dagrun stays the newest due 07:00 slot: with scheduled runs off nothing
    # creates it; the timetable Airflow now holds is the new one.)
    def follows() -> bool:
        summary = world.admin.ok("GET", f"/api/v2/dags/{DAG}").get("timetable_summary") or ""
        return summary.startswith("09:00 Europe/Berlin, every 24 h from ")

    wait_for(follows, 180, interval=5, what="Airflow's timetable of daily-spend at 09:00")

    # -- acme's viewer: the page, but no working change control ------------------------------
    text = acme_file.read_text()
    with headless_chromium() as d:
        wait = WebDriverWait(d, 60)
        _sign_in(d, wait, base, VIEWER, world.users[VIEWER]["password"])
        d.get(base + "/exports/companies/acme")
        wait.until(ec.presence_of_element_located(
            (By.CSS_SELECTOR, f"section[data-schedule='{DAILY}']")))
        assert "09:00 Europe/Berlin, every 24 h" in d.page_source
        assert not d.find_elements(By.CSS_SELECTOR, "input[name=token]")
        assert not d.find_elements(By.ID, "en-go") and not d.find_elements(By.ID,
                                                                            f"plan-{DAILY}")
        d.save_screenshot(str(SHOTS / "company-05-viewer.png"))
    status, body = _post(world, VIEWER, "/exports/companies/acme/reschedule",
                         {"schedule": DAILY, "export_hour": "11", "token": "1.2.3"})
    assert status == 403 and "acme-viewer may read company acme but not change it" in body
    status, body = _post(world, VIEWER, "/exports/companies/acme/export-now",
                         {"base_export": DAILY, "preset": "yesterday", "reason": "viewer",
                          "token": "1.2.3"})
    assert status == 403

    # -- another company's operator: nothing to see, nothing to change --------------------------
    for path in ("/exports/companies/acme", "/exports/companies/acme/schedules.json"):
        status, body = _get(world, OTHER, path)
        assert status == 404 and "acme/daily-spend" not in body, (path, body[:200])
    status, body = _get(world, OTHER, "/exports/companies.json")
    assert status == 200 and [c["company"] for c in json.loads(body)["companies"]] == [
        "kiwi-outdoors"]
    status, _ = _post(world, OTHER, "/exports/companies/acme/reschedule",
                      {"schedule": DAILY, "export_hour": "11", "token": "1.2.3"})
    assert status == 404
    assert acme_file.read_text() == text and len(_actions(world)) == 1
    runs = world.admin.ok("GET", "/api/v2/dags/manual_export__acme/dagRuns")["dag_runs"]
    assert len([r for r in runs if r["dag_run_id"] not in before]) == 1
    print(f"done after {time.monotonic() - started:.0f} s")
