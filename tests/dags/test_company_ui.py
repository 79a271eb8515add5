"""The company view through Airflow's own app and auth manager (SimpleAuthManager: ``viewer``
reads, ``admin`` may edit every DAG): the page and its JSON, the timing change (plan, apply,
record; a read-only config directory), Export now's checks, and every refusal — a viewer, another
company, hostile input, a replayed or forged form — with nothing written."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

DAILY = "acme/daily-spend"


@pytest.fixture()
def desk(airflow_db, export_world, monkeypatch):
    from airflow.api_fastapi.app import create_app, get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    from export_lib.cli.commands import run_one

    # The pages read the clock once per request; one instant for the whole test, so a test
    # that spans a slot (07:00 Berlin, 06:00Z) plans and checks against the same "now".
    _freeze(monkeypatch, datetime.now(UTC).replace(second=0, microsecond=0))

    run_one(str(export_world.config), DAILY, "2026-03-29T05:00Z",
            now=datetime(2026, 3, 30, tzinfo=UTC))
    client = TestClient(create_app("core"), base_url="http://airflow.test")
    manager = get_auth_manager()

    def auth(name: str, role: str) -> dict[str, str]:
        token = manager.generate_jwt(SimpleAuthManagerUser(username=name, role=role))
        return {"Authorization": f"Bearer {token}"}

    return client, export_world, auth("vic", "viewer"), auth("ada", "admin")


def _freeze(monkeypatch: pytest.MonkeyPatch, instant: datetime) -> None:
    """The pages' clock stands at ``instant`` (every module that reads it)."""
    for module in ("obligations_ui", "company_ui", "company_actions"):
        monkeypatch.setattr(f"export_airflow.pages.{module}._now", lambda: instant)


def _token(page: str) -> str:
    (token,) = set(re.findall(r"name='token' value='([^']+)'", page))
    return token


def _ledger_actions(company: str) -> list:
    from export_lib.ledger import open_ledger
    from export_lib.ledger.controls import list_actions

    return list_actions(open_ledger(), company=company)


def test_a_viewer_reads_the_schedules_and_changes_nothing(desk):
    client, world, viewer, _ = desk
    assert client.get("/exports/companies/acme").status_code == 401
    listing = client.get("/exports/companies.json", headers=viewer).json()["companies"]
    assert [c["company"] for c in listing] == ["acme", "dentsu-happiness", "kiwi-outdoors"]
    data = client.get("/exports/companies/acme/schedules.json", headers=viewer).json()
    assert (data["timezone"], data["may_change"], data["config_writable"]) == (
        "Europe/Berlin", False, True)
    card = next(c for c in data["schedules"] if c["schedule"] == DAILY)
    assert card["timing"] == "07:00 Europe/Berlin, every 24 h"
    assert {c["key"]: (c["value"], c["source"]) for c in card["configured"]} == {
        "export_hour": (7, "company file"), "interval_hours": (24, "company file"),
        "timezone": ("Europe/Berlin", "company timezone")}
    assert len(card["next_runs"]) == 5
    first = card["next_runs"][0]
    assert first["slot_local"].endswith("07:00 CEST") or first["slot_local"].endswith("07:00 CET")
    assert first["slot_utc"].endswith(("T05:00:00Z", "T06:00:00Z"))
    assert card["last_delivered"] == [{
        "destination": "acme-dir", "type": "local", "period": "2026-03-28",
        "run_key": "acme/daily-spend/2026-03-29T05:00Z",
        "acknowledged_at_utc": card["last_delivered"][0]["acknowledged_at_utc"]}]
    # A data export's timing keys come from defaults.yaml: marked as defaults.
    data_card = next(c for c in data["schedules"] if c["kind"] != "widget")
    assert {c["key"]: c["source"] for c in data_card["configured"]} == {
        "cron": "default", "timezone": "default"}

    page = client.get("/exports/companies/acme", headers=viewer).text
    assert "name='token'" not in page and "id='en-go'" not in page
    assert "its operators can change them" in page and "07:00 Europe/Berlin" in page
    # Even with a token made for the viewer, a POST is refused: viewers never change.
    from export_airflow.pages.company_ui import form_token

    class Vic:
        def get_name(self) -> str:
            return "vic"

    token = form_token(Vic(), "acme")
    before = (world.config / "acme.yaml").read_text()
    for path, form in (("reschedule", {"schedule": DAILY, "export_hour": "9"}),
                       ("export-now", {"base_export": DAILY, "preset": "yesterday",
                                       "reason": "viewer try"}),
                       ("recover", {"days": "7"})):
        refused = client.post(f"/exports/companies/acme/{path}", headers=viewer,
                              data={**form, "token": token}, follow_redirects=False)
        assert refused.status_code == 403, path
        assert "vic may read company acme but not change it" in refused.text
    assert (world.config / "acme.yaml").read_text() == before
    assert _ledger_actions("acme") == []


def test_another_company_is_a_404_that_says_nothing(desk):
    from export_airflow.pages.ui import app
    from export_airflow.pages.ui_access import visible_companies

    client, _, viewer, admin = desk
    app.dependency_overrides[visible_companies] = lambda: frozenset({"kiwi-outdoors"})
    try:
        hidden = client.get("/exports/companies/acme", headers=admin)
        unknown = client.get("/exports/companies/nobody", headers=admin)
        assert hidden.status_code == unknown.status_code == 404
        assert hidden.json() == unknown.json() == {
            "detail": "no company by that id that you may see"}
        for path in ("schedules.json", "plan.json?schedule=acme/daily-spend&export_hour=9",
                     "gaps.json", "explain.json?schedule=acme/daily-spend&day=2026-03-28"):
            assert client.get(f"/exports/companies/acme/{path}", headers=admin).status_code \
                == 404, path
        assert client.post("/exports/companies/acme/reschedule", headers=admin,
                           data={"schedule": DAILY, "export_hour": "9", "token": "x.1.y"}
                           ).status_code == 404
        assert client.get("/exports/companies/for-dag/widget_export__acme__daily-spend",
                          headers=admin, follow_redirects=False).status_code == 404
        assert [c["company"] for c in client.get("/exports/companies.json", headers=admin)
                .json()["companies"]] == ["kiwi-outdoors"]
    finally:
        app.dependency_overrides.clear()
    tab = client.get("/exports/companies/for-dag/widget_export__acme__daily-spend",
                     headers=viewer, follow_redirects=False)
    assert tab.status_code == 303 and tab.headers["location"] == "../acme"
    assert client.get("/exports/companies/for-dag/some_other_dag", headers=viewer
                      ).status_code == 404


def test_an_operator_plans_applies_and_the_change_is_recorded(desk):
    client, world, _, admin = desk
    path = world.config / "acme.yaml"
    before = path.read_text()
    plan = client.get(f"/exports/companies/acme/plan.json?schedule={DAILY}&export_hour=9",
                      headers=admin).json()
    assert plan["changes"] == {"export_hour": {"old": 7, "new": 9}}
    assert plan["uncovered"] == [] and plan["new_next"][0].endswith(("T07:00:00Z", "T08:00:00Z"))
    assert "+    export_hour: 9" in plan["diff"] and path.read_text() == before  # nothing written

    page = client.get(f"/exports/companies/acme/plan?schedule={DAILY}&export_hour=9",
                      headers=admin).text
    assert "id='do-apply'" in page and "export_hour 7 → <b>9</b>" in page
    form = {"schedule": DAILY, "export_hour": "9", "why": "customer asked for 09:00",
            "token": _token(page)}
    cross = client.post("/exports/companies/acme/reschedule", data=form, follow_redirects=False,
                        headers={**admin, "Origin": "http://evil.example"})
    assert cross.status_code == 403 and path.read_text() == before
    done = client.post("/exports/companies/acme/reschedule", data=form, follow_redirects=False,
                       headers={**admin, "Origin": "http://airflow.test"})
    assert done.status_code == 303 and done.headers["location"] == "../acme?done=reschedule"
    text = path.read_text()
    assert "export_hour: 9  # was 7 before" in text and "# 07:00 Berlin time" not in text
    assert "# ACME Corp: a Berlin company" in text  # comments kept
    (action,) = _ledger_actions("acme")
    assert (action.who, action.action, action.target_id, action.why) == (
        "ada (company page)", "reschedule", DAILY, "customer asked for 09:00")
    assert action.outcome.startswith(f"{DAILY}: export_hour 7 → 9 from ")
    shown = client.get("/exports/companies/acme?done=reschedule", headers=admin).text
    assert "ada (company page)" in shown and "export_hour 7 → 9" in shown
    assert "09:00 Europe/Berlin, every 24 h" in shown

    replay = client.post("/exports/companies/acme/reschedule", data={**form, "export_hour": "10"},
                         headers=admin, follow_redirects=False)
    assert replay.status_code == 403 and "already used (a replayed request)" in replay.text, replay.text
    assert path.read_text() == text and len(_ledger_actions("acme")) == 1


def test_a_read_only_config_directory_shows_the_change_and_writes_nothing(desk, monkeypatch):
    client, world, _, admin = desk
    monkeypatch.setenv("EXPORT_CONFIG_READ_ONLY", "true")
    before = (world.config / "acme.yaml").read_text()
    page = client.get(f"/exports/companies/acme/plan?schedule={DAILY}&export_hour=9",
                      headers=admin).text
    assert "Show the change to commit (the config is read-only here: nothing is written)" \
        in page
    answer = client.post("/exports/companies/acme/reschedule", headers={
        **admin, "Accept": "application/json"}, data={"schedule": DAILY, "export_hour": "9",
                                                      "token": _token(page)})
    body = answer.json()
    assert answer.status_code == 200 and body["applied"] is False
    assert "The config directory is read-only: nothing was written" in body["note"]
    assert "-    export_hour: 7" in body["note"] and "+    export_hour: 9" in body["note"]
    assert (world.config / "acme.yaml").read_text() == before and _ledger_actions("acme") == []


HOSTILE = [
    ({"timezone": "Mars/Olympus"}, "timezone", "unknown timezone 'Mars/Olympus'"),
    ({"export_hour": "24"}, "export_hour", "'24' is not a whole number from 0 to 23"),
    ({"cron": "0 " * 500}, "cron", "is 1000 characters long"),
    ({"export_hour": "9\x1b[2J"}, "export_hour", "contains a control character (U+001B"),
    ({"timezone": "UTC\r\nX-Evil: 1"}, "timezone", "contains a control character (U+000D"),
    ({"interval_hours": "-1"}, "interval_hours", "not a whole number from 1 to 24"),
    ({"cron": "0 9 * * *"}, "cron", "is a widget export"),
    ({}, "export_hour", "nothing to change"),
]


def test_hostile_timing_input_is_refused_naming_the_field(desk):
    """One world for every case (each a few seconds of Airflow app otherwise)."""
    client, world, _, admin = desk
    before = (world.config / "acme.yaml").read_text()
    token = _token(client.get("/exports/companies/acme", headers=admin).text)
    for form, field, words in HOSTILE:
        plan = client.get("/exports/companies/acme/plan.json", headers=admin,
                          params={"schedule": DAILY, **form})
        assert plan.status_code == 422 and plan.json()["field"] == field, (form, plan.text)
        assert words in plan.json()["detail"], (form, plan.text)
        answer = client.post("/exports/companies/acme/reschedule", headers=admin,
                             data={"schedule": DAILY, "token": token, **form})
        assert answer.status_code == 422 and "Traceback" not in answer.text, form
        assert "id='error'" in answer.text and f"{field}: " in answer.text, form
        as_json = client.post("/exports/companies/acme/reschedule", data={
            "schedule": DAILY, "token": token, **form}, headers={**admin,
                                                                  "Accept": "application/json"})
        assert as_json.status_code == 422 and as_json.json()["field"] == field, form
    # Every refusal left the token unspent, the file and the history as they were.
    assert (world.config / "acme.yaml").read_text() == before and _ledger_actions("acme") == []


def test_forged_company_and_token_are_refused(desk):
    client, world, _, admin = desk
    before = (world.config / "acme.yaml").read_text()
    acme_token = _token(client.get("/exports/companies/acme", headers=admin).text)
    # acme's form posted to kiwi: the token is bound to the company it was made for.
    forged = client.post("/exports/companies/kiwi-outdoors/reschedule", headers=admin, data={
        "schedule": "kiwi-outdoors/business-day-revenue", "export_hour": "9",
        "token": acme_token})
    assert forged.status_code == 403 and "wrong form token" in forged.text
    # A schedule of another company inside acme's form.
    other = client.post("/exports/companies/acme/reschedule", headers={
        **admin, "Accept": "application/json"}, data={
        "schedule": "kiwi-outdoors/business-day-revenue", "export_hour": "9",
        "token": acme_token})
    assert other.status_code == 422 and other.json()["field"] == "schedule"
    assert other.json()["detail"].startswith("schedule: 'kiwi-outdoors/business-day-revenue' "
                                             "is not an export of this company")
    for company in ("../etc", "ACME", "a" * 200, "acme%00"):
        assert client.post(f"/exports/companies/{company}/reschedule", headers=admin,
                           data={"token": acme_token}).status_code in (404, 405), company
    assert client.post("/exports/companies/acme/reschedule", headers=admin,
                       data={"schedule": DAILY, "export_hour": "9", "token": "forged"}
                       ).status_code == 403
    assert (world.config / "acme.yaml").read_text() == before and _ledger_actions("acme") == []


def test_export_now_checks_like_the_trigger_form(desk):
    client, _, _, admin = desk
    window = client.get("/exports/companies/acme/window.json", headers=admin, params={
        "base_export": DAILY, "start": "2026-03-28", "end": "2026-03-29"}).json()
    assert (window["window_start_utc"], window["window_end_utc"]) == (
        "2026-03-27T23:00:00Z", "2026-03-28T23:00:00Z")
    assert window["window_start"] == "2026-03-28T00:00:00+01:00"
    assert window["based_on"]["destinations"] == ["acme-dir"]
    page = client.get("/exports/companies/acme", headers=admin).text
    assert "“Based on export” decides what is exported" in page and "id='en-go'" in page
    token = _token(page)
    cases = [
        ({"start": "2026-03-28", "end": f"{datetime.now(UTC).year + 1}-01-01"}, "end",
         "is in the future"),
        ({"start": "2020-01-01", "end": "2026-03-29"}, "start", "spans more than 400 days"),
        ({"start": "2020-01-01", "end": "2020-01-02"}, "start", "older than the source keeps"),
        ({"start": "28/03/2026", "end": "2026-03-29"}, "start", "is not a local date or time"),
        ({"preset": "last_decade"}, "preset", "is not a preset"),
        ({"start": "2026-03-28", "end": "2026-03-29", "destinations": "evil-host"},
         "destinations", "evil-host"),
        ({"start": "2026-03-28", "end": "2026-03-29", "reason": "x"}, "reason",
         "at least 3 characters"),
    ]
    for extra, field, words in cases:
        form = {"base_export": DAILY, "reason": "customer asked", "token": token, **extra}
        answer = client.post("/exports/companies/acme/export-now", data=form, headers={
            **admin, "Accept": "application/json"})
        assert answer.status_code == 422, (extra, answer.text)
        assert answer.json()["field"] == field and words in answer.json()["detail"], answer.text


def test_explain_and_gaps_of_the_company(desk):
    client, world, viewer, _ = desk
    (answer,) = client.get("/exports/companies/acme/explain.json", headers=viewer, params={
        "schedule": DAILY, "day": "2026-03-29"}).json()
    assert answer["run_key"] == "acme/daily-spend/2026-03-29T05:00Z" and answer["in_ledger"]
    assert answer["answer"].startswith("acme/daily-spend, slot ")
    assert answer["logs"] == []  # rendered by exportctl, not by an Airflow task
    bad = client.get("/exports/companies/acme/explain.json", headers=viewer, params={
        "schedule": DAILY, "day": "yesterday"})
    assert bad.status_code == 422 and bad.json()["field"] == "day"
    # A slot Airflow rendered: its attempt links to the task's log and the run.
    from export_lib.config.loader import load_catalog
    from export_lib.ledger import open_ledger
    from export_lib.pipeline import RunContext, render_run, start_run
    from export_lib.storage.stores import open_store

    ledger, slot = open_ledger(), datetime(2026, 3, 28, 6, tzinfo=UTC)
    run_id = "scheduled__2026-03-28T06:00:00+00:00"
    origin = f"airflow:widget_export__acme__daily-spend/{run_id}/render/try2"
    start_run(ledger, load_catalog(world.config).schedule(DAILY), slot,
              now=slot + timedelta(minutes=5), ctx=RunContext(origin=origin, trigger="scheduled"))
    render_run(ledger, open_store(), "acme/daily-spend/2026-03-28T06:00Z",
               now=slot + timedelta(minutes=5), ctx=RunContext(origin=origin,
                                                               trigger="scheduled"))
    (rendered,) = client.get("/exports/companies/acme/explain.json", headers=viewer, params={
        "schedule": DAILY, "day": "2026-03-28"}).json()
    (link,) = rendered["logs"]
    assert (link["task_id"], link["try_number"], link["run_id"]) == ("render", 2, run_id)
    page = client.get("/exports/companies/acme?explain_schedule=acme/daily-spend&"
                      "explain_day=2026-03-28", headers=viewer).text
    assert f"href='{link['href']}'" in page and ">Airflow run</a>" in page
    gaps = client.get("/exports/companies/acme/gaps.json?days=3", headers=viewer).json()
    assert gaps["days"] == 3 and {a["company"] for a in gaps["actions"]} <= {"acme"}
    page = client.get("/exports/companies/acme?explain_schedule=acme/daily-spend&"
                      "explain_day=2026-03-29", headers=viewer).text
    assert "class='explained'" in page and "run details" in page
    assert "id='do-recover'" not in page  # a viewer gets no recover button


def test_log_links_come_from_the_attempts_origin():
    from types import SimpleNamespace

    from export_lib.views.company import log_links

    attempts = [SimpleNamespace(generation=1, state="failed", origin=(
        "airflow:widget_export__acme__daily-spend/scheduled__2026-03-29T05:00:00+00:00/render/"
        "try1")), SimpleNamespace(generation=2, state="published", origin="exportctl run")]
    assert log_links(attempts) == [{
        "generation": 1, "state": "failed", "dag_id": "widget_export__acme__daily-spend",
        "run_id": "scheduled__2026-03-29T05:00:00+00:00", "task_id": "render",
        "try_number": 1, "href": "/dags/widget_export__acme__daily-spend/runs/"
                                 "scheduled__2026-03-29T05%3A00%3A00%2B00%3A00/tasks/render"
                                 "?try_number=1"}]


def test_export_now_starts_one_manual_run_with_the_chosen_window(desk):
    """The manual DAG, parsed into Airflow's metadata DB, triggered from the page: one run of
    ``manual_export__acme`` whose conf is the trigger form's, by the logged-in user."""
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    client, world, _, admin = desk
    bag = DagBag(dag_folder=str(world.dags / "company_acme.py"))
    assert "manual_export__acme" in bag.dags, bag.import_errors
    with create_session() as session:
        if session.get(DagBundleModel, "dags-folder") is None:
            session.add(DagBundleModel(name="dags-folder"))
    sync_bag_to_db(bag, "dags-folder", None)
    token = _token(client.get("/exports/companies/acme", headers=admin).text)
    form = {"base_export": DAILY, "start": "2026-03-28", "end": "2026-03-29",
            "reason": "customer lost the file", "token": token}
    started = client.post("/exports/companies/acme/export-now", data=form,
                          headers={**admin, "Accept": "application/json"})
    assert started.status_code == 200, started.text
    body = started.json()
    assert body["conf"] == {
        "company": "acme", "base_export": DAILY, "window_start": "2026-03-28T00:00:00+01:00",
        "window_end": "2026-03-29T00:00:00+01:00", "columns": [], "format": "csv",
        "destinations": [], "reason": "customer lost the file", "regenerate": False}
    with create_session() as session:
        runs = session.query(DagRun).filter(DagRun.dag_id == "manual_export__acme").all()
        assert [(r.run_id, r.conf, r.triggering_user_name, r.run_type) for r in runs] == [
            (body["run_id"], body["conf"], "ada", "manual")]
    again = client.post("/exports/companies/acme/export-now", data=form, headers=admin)
    assert again.status_code == 403 and "already used" in again.text


def test_a_one_off_run_offers_no_pause_and_its_attempts_link_to_their_logs(desk):
    """The run page of a manual export: no "Pause schedule" for its pseudo-schedule (and a
    direct POST is refused, nothing paused); each render attempt links to its task log."""
    from export_airflow.pages.ui_access import action_token

    from export_lib.ledger import open_ledger
    from export_lib.pipeline import RunContext, render_run
    from export_lib.pipeline.controls import pause_reason
    from export_lib.pipeline.start import start_manual
    from export_lib.storage.stores import open_store

    client, world, _, admin = desk
    now, run_id = datetime(2026, 3, 30, 12, tzinfo=UTC), "manual__2026-03-30T12:00:00+00:00"
    ledger = open_ledger()
    started = start_manual(ledger, str(world.config), {
        "company": "acme", "base_export": DAILY, "window_start": "2026-03-28T00:00:00+01:00",
        "window_end": "2026-03-29T00:00:00+01:00", "reason": "one-off"}, run_id=run_id,
        requested_at=now, now=now, company="acme", ctx=RunContext(
            origin=f"airflow:manual_export__acme/{run_id}/resolve_window/try1",
            trigger="manual"))
    key = started.run_key
    render_run(ledger, open_store(), key, now=now, ctx=RunContext(
        origin=f"airflow:manual_export__acme/{run_id}/render/try1", trigger="manual"))
    page = client.get(f"/exports/obligations/run?key={key}", headers=admin).text
    assert "do-pause" not in page and "Pause schedule" not in page
    log = ("/dags/manual_export__acme/runs/manual__2026-03-30T12%3A00%3A00%2B00%3A00/tasks/"
           "render?try_number=1")
    assert f"class='log' href='{log}'" in page
    refused = client.post("/exports/obligations/action/pause", headers=admin, data={
        "run_key": key, "token": action_token("ada", key)}, follow_redirects=False)
    assert refused.status_code == 409 and "is a one-off export" in refused.text
    assert pause_reason(ledger, "acme", started.schedule_id) is None
    # A scheduled run's page still offers it.
    scheduled = client.get("/exports/obligations/run?key=acme/daily-spend/2026-03-29T05:00Z",
                           headers=admin).text
    assert "do-pause" in scheduled


def test_the_company_endpoints_are_in_the_plugin_openapi(desk):
    client, _, viewer, _ = desk
    paths = client.get("/exports/openapi.json", headers=viewer).json()["paths"]
    for path, method in (("/companies/{company}/schedules.json", "get"),
                         ("/companies/{company}/plan.json", "get"),
                         ("/companies/{company}/window.json", "get"),
                         ("/companies/{company}/explain.json", "get"),
                         ("/companies/{company}/gaps.json", "get"),
                         ("/companies/{company}/reschedule", "post"),
                         ("/companies/{company}/export-now", "post"),
                         ("/companies/{company}/recover", "post")):
        assert method in paths[path], path
        assert paths[path][method]["description"], path


def test_an_operator_recovers_the_gaps_of_the_company(desk, monkeypatch):
    """The gap audit's plan on the page and its recover action: without the Airflow API
    connection (none in this test's Airflow) the backfills are not requested and the answer
    says so; the form is spent once; a lookback beyond 90 days is refused naming the field."""
    client, _, viewer, admin = desk
    # Two days after the run, at noon: both days' 07:00 slots are due and past their deadline
    # whatever the hour the suite runs at.
    _freeze(monkeypatch, datetime(2026, 3, 31, 12, 0, tzinfo=UTC))
    gaps = client.get("/exports/companies/acme/gaps.json?days=2", headers=viewer).json()
    # daily-spend ran once (29 March) and has recovery "each": its last two days are gaps to
    # backfill; the schedules that never ran are not audited (nothing was deployed).
    assert [(a["schedule"], a["action"]) for a in gaps["actions"]] == [
        ("acme/daily-spend", "backfill")] * 2
    page = client.get("/exports/companies/acme?gap_days=2", headers=admin).text
    assert "id='do-recover'" in page
    form = {"days": "2", "token": _token(page)}
    done = client.post("/exports/companies/acme/recover", data=form,
                       headers={**admin, "Accept": "application/json"})
    assert done.status_code == 200, done.text
    note = done.json()["note"]
    assert note.startswith("Recovery by ada: ") and "backfills not requested: " in note
    assert "export_airflow_api" in note
    assert done.json()["result"]["actions"] == gaps["actions"]
    again = client.post("/exports/companies/acme/recover", data=form, headers=admin)
    assert again.status_code == 403 and "already used" in again.text
    bad = client.post("/exports/companies/acme/recover", data={"days": "365", "token": _token(
        client.get("/exports/companies/acme", headers=admin).text)}, headers={
        **admin, "Accept": "application/json"})
    assert bad.status_code == 422 and bad.json()["field"] == "days"


def test_airflow_lists_the_menu_item_and_the_dag_tabs(desk):
    """Through Airflow's own /api/v2/plugins (its ExternalViewResponse model): Browse → Export
    companies, and the "Export company" tab on DAG and DAG-run pages, {DAG_ID} filled in by the
    UI."""
    client, _, _, admin = desk
    plugins = client.get("/api/v2/plugins", headers=admin).json()["plugins"]
    (ours,) = [p for p in plugins if p["name"] == "export_ui"]
    views = {(v["name"], v["destination"]): (v["href"], v.get("category"), v["url_route"])
             for v in ours["external_views"]}
    assert views[("Export companies", "nav")] == ("/exports/companies", "browse",
                                                  "export-companies")
    for destination in ("dag", "dag_run"):
        href, _, route = views[("Export company", destination)]
        assert href == "/exports/companies/for-dag/{DAG_ID}" and route.startswith(
            "export-company")
    assert client.get("/exports/companies/for-dag/manual_export__acme", headers=admin,
                      follow_redirects=False).headers["location"] == "../acme"


def test_the_page_names_a_period_a_hand_written_switch_drops(desk):
    client, world, viewer, _ = desk
    anchor = "    export_hour: 7            # 07:00 Berlin time, every day\n"
    path = world.config / "acme.yaml"
    path.write_text(path.read_text().replace(anchor, anchor + (
        "    effective_from: 2027-01-12T07:00:00Z\n    history:\n      - {export_hour: 9}\n"),
        1))
    page = client.get("/exports/companies/acme", headers=viewer).text
    assert ("period <b>2027-01-11</b> (Europe/Berlin) around the switch at 2027-01-12T07:00:00Z: "
            "reported by no slot") in page
    assert "to avoid it write <code>effective_from: 2027-01-13T06:00:00Z</code>" in page
