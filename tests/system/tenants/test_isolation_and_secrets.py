"""Tenant isolation and secrets on a real `make run` stack (issues 12, 23 and 24, acceptance).

On the folder's stack (tenant_stack.py: FAB, the demo users, acme's hourly-clicks with an
accepting and a refusing HTTPS webhook, acme's and kiwi-outdoors' manual runs done):

* acme's viewer and operator see only acme's DAGs, runs, logs and export pages (REST API and
  headless Chromium); kiwi's are 403 to them; neither may trigger kiwi's manual export, the
  viewer not even acme's; the operator is recorded as the requester of the acme run; the admin
  sees everything;
* ``/exports/docs`` and ``/exports/openapi.json`` need a login;
* no test secret occurs in the ledger (every table), the Airflow metadata database (XCom
  included, every table), the task and component logs, or the page and ``runs.json``;
* the OpenLineage provider reports to a local receiver (issue 24 item 2): acme's run with the
  source table in and acme's artifacts out, and no secret in any event.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from urllib.parse import quote

import sqlalchemy as sa

from tests.support.browser import headless_chromium
from tests.system.soak.stack import Api, wait_for
from tests.system.tenants.tenant_stack import (
    OPERATOR,
    PG_PREFIX,
    SECRETS,
    VIEWER,
    World,
    terminal,
)

ANALYST = OPERATOR


def _get(api: Api | None, base: str, path: str) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {api.token}"} if api and api.token else {}
    request = urllib.request.Request(base + path, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_viewer_of_company_a_sees_and_exports_only_company_a(world: World) -> None:
    base, admin, analyst = world.admin.base, world.admin, world.analyst
    ledger = world.stack.ledger_runs()
    acme_keys = {r["run_key"] for r in ledger if r["company"] == "acme"}
    others = {r["run_key"] for r in ledger if r["company"] != "acme"}
    assert any("/manual/" in k for k in acme_keys) and any("/manual/" in k for k in others)

    seen = analyst.ok("GET", "/exports/runs.json?limit=500")
    assert {r["company"] for r in seen["runs"]} == {"acme"}
    assert {r["run_key"] for r in seen["runs"]} == acme_keys and seen["total"] == len(acme_keys)
    assert analyst.ok("GET", "/exports/runs.json?company=kiwi-outdoors")["total"] == 0
    everything = admin.ok("GET", "/exports/runs.json?limit=500")
    assert {r["run_key"] for r in everything["runs"]} == acme_keys | others

    status, page = _get(analyst, base, "/exports/?limit=500")
    assert status == 200
    assert all(key in page for key in acme_keys) and not any(key in page for key in others)
    assert "kiwi-outdoors" not in page and "dentsu" not in page

    for path in ("/exports/docs", "/exports/openapi.json", "/exports/runs.json", "/exports/"):
        assert _get(None, base, path)[0] == 401, path
    assert _get(analyst, base, "/exports/docs")[0] == 200
    assert "/runs.json" in json.loads(_get(analyst, base, "/exports/openapi.json")[1])["paths"]

    # Airflow's own permissions decide who may export what: kiwi's manual DAG is not the
    # analyst's to read or trigger, and acme's refuses a request naming another company.
    assert analyst.call("GET", "/api/v2/dags/manual_export__kiwi-outdoors")[0] == 403
    status, _ = analyst.call("POST", "/api/v2/dags/manual_export__kiwi-outdoors/dagRuns",
                             {"logical_date": None, "conf": {"company": "kiwi-outdoors"}})
    assert status == 403
    status, answer = analyst.call("POST", "/api/v2/dags/manual_export__acme/dagRuns", {
        "logical_date": None, "conf": {"company": "kiwi-outdoors", "base_export":
                                       "kiwi-outdoors/six-hourly-orders", "reason": "cross"}})
    assert status == 400 and "kiwi-outdoors" in json.dumps(answer), (status, answer)

    # The viewer: acme's DAGs only, nothing triggered, kiwi's runs and task logs closed.
    viewer = world.viewer
    mine = {d["dag_id"] for d in viewer.ok("GET", "/api/v2/dags?limit=100")["dags"]}
    # acme's export DAGs and the example consumer of acme/daily-spend, granted to acme's roles.
    assert mine and all(d.split("__")[1] == "acme" if "__" in d else d == "example_asset_consumer"
                        for d in mine), mine
    every = {d["dag_id"] for d in admin.ok("GET", "/api/v2/dags?limit=100")["dags"]}
    assert "manual_export__kiwi-outdoors" in every and mine < every
    assert {r["dag_id"] for r in viewer.ok("GET", "/api/v2/dags/~/dagRuns?limit=100")[
        "dag_runs"]} == {"manual_export__acme"}
    assert {r["company"] for r in viewer.ok("GET", "/exports/runs.json?limit=500")["runs"]} == {
        "acme"}
    status, _ = viewer.call("POST", "/api/v2/dags/manual_export__acme/dagRuns", {
        "logical_date": None, "conf": {"company": "acme", "base_export": "acme/daily-spend",
                                       "reason": "a viewer may not export"}})
    assert status == 403
    kiwi = (f"/api/v2/dags/manual_export__kiwi-outdoors/dagRuns/"
            f"{quote(world.kiwi_run['dag_run_id'])}")
    acme = f"/api/v2/dags/manual_export__acme/dagRuns/{quote(world.acme_run['dag_run_id'])}"
    for api in (viewer, analyst):
        assert api.call("GET", kiwi)[0] == 403
        assert api.call("GET", kiwi + "/taskInstances/resolve_window/logs/1")[0] == 403
        assert api.call("GET", acme + "/taskInstances/resolve_window/logs/1")[0] == 200
    assert admin.call("GET", kiwi + "/taskInstances/resolve_window/logs/1")[0] == 200

    # Restatements: kiwi's DAG is not acme's to trigger; acme's refuses kiwi's run key, read
    # from the ledger whatever the conf says; nothing of kiwi's is published again.
    (kiwi_key,) = [k for k in others if k.startswith("kiwi-outdoors/") and "/manual/" in k]
    assert analyst.call("POST", "/api/v2/dags/restatement__kiwi-outdoors/dagRuns",
                        {"logical_date": None, "conf": {"run_key": kiwi_key}})[0] == 403
    assert viewer.call("POST", "/api/v2/dags/restatement__acme/dagRuns",
                       {"logical_date": None, "conf": {"run_key": kiwi_key}})[0] == 403
    versions = [[a["version"] for a in r["artifacts"]] for r in world.stack.ledger_runs()
                if r["run_key"] == kiwi_key]
    assert versions == [[1]]
    attempt = analyst.ok("POST", "/api/v2/dags/restatement__acme/dagRuns", {
        "logical_date": None, "conf": {"run_key": kiwi_key,
                                       "run": {"company": "acme", "run_key": kiwi_key}}})
    done = wait_for(lambda: terminal(admin, attempt), 240, what="the refused restatement")
    assert done["state"] == "failed"
    log = admin.ok("GET", f"/api/v2/dags/restatement__acme/dagRuns/"
                          f"{quote(attempt['dag_run_id'])}/taskInstances/restate_due/logs/1")
    assert f"run '{kiwi_key}' is not acme's" in json.dumps(log)
    assert [[a["version"] for a in r["artifacts"]] for r in world.stack.ledger_runs()
            if r["run_key"] == kiwi_key] == versions

    from export_lib.ledger import open_ledger

    env = world.stack.stack_environ()
    manual = world.acme_manual_key()
    events = open_ledger(env["EXPORT_LEDGER_URL"]).events(manual)
    assert any(f"manual export requested by {ANALYST} (tenant test)" in (e["detail"] or "")
               for e in events), events


def test_in_chromium_a_company_viewer_sees_only_its_dags_and_export_runs(world: World) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    users = world.users
    base = world.admin.base.replace("127.0.0.1", "localhost")  # the API's base_url host
    with headless_chromium() as d:
        wait = WebDriverWait(d, 60)
        d.get(base + "/")  # FAB's login page
        wait.until(ec.presence_of_element_located((By.NAME, "username"))).send_keys(VIEWER)
        d.find_element(By.NAME, "password").send_keys(users[VIEWER]["password"])
        d.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
        wait.until(lambda drv: "/auth/login" not in drv.current_url)
        d.get(base + "/dags")
        wait.until(lambda drv: "manual_export__acme" in drv.find_element(By.TAG_NAME, "body").text)
        listed = d.find_element(By.TAG_NAME, "body").text
        assert "widget_export__acme__daily-spend" in listed
        assert "kiwi-outdoors" not in listed and "dentsu" not in listed
        d.get(base + "/exports/?limit=500")
        page = d.find_element(By.TAG_NAME, "body").text
        assert "acme/daily-spend" in page or "acme/manual" in page, page[:500]
        assert "kiwi-outdoors" not in page and "dentsu" not in page
        d.get(base + "/api/v2/dags/manual_export__kiwi-outdoors")
        assert "Forbidden" in d.find_element(By.TAG_NAME, "body").text


def _dump_database(url: str) -> str:
    engine = sa.create_engine(url.replace("+psycopg2", "+psycopg"))
    try:
        meta = sa.MetaData()
        meta.reflect(engine)
        with engine.connect() as conn:
            return "\n".join(f"{table.name}: {row!r}" for table in meta.sorted_tables
                             for row in conn.execute(sa.select(table)))
    finally:
        engine.dispose()


def test_no_secret_in_ledger_xcom_logs_or_page_after_good_and_bad_deliveries(world: World) -> None:
    # The deliveries happened: one acknowledged (signed, token sent), one refused with 401.
    assert world.acme_run["state"] == "failed"  # the refused webhook fails its deliver task
    # The manual run's deliveries (the stack creates no scheduled runs): each processed once.
    processed = world.ok.state.processed
    assert processed and set(processed.values()) == {1}, processed
    assert all(r["signature"] for r in world.ok.state.requests)
    assert world.down.state.requests
    env = world.stack.stack_environ()
    ledger = _dump_database(env["EXPORT_LEDGER_URL"])
    assert "answered HTTP 401" in ledger and "HTTP 200 x-request-id=" in ledger
    airflow_db = _dump_database(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    assert "xcom: " in airflow_db
    logs = {path: path.read_text(errors="replace")
            for folder in ("logs", "run") for path in (world.stack.root / ".airflow" / folder)
            .rglob("*") if path.is_file()}
    assert any("deliver" in str(p) for p in logs)
    pages = [world.admin.ok("GET", "/exports/runs.json?limit=500"),
             _get(world.admin, world.admin.base, "/exports/?limit=500")[1],
             world.analyst.ok("GET", "/exports/runs.json?limit=500")]
    places = {"ledger": ledger, "airflow metadata db (xcom included)": airflow_db,
              "page and runs.json": json.dumps(pages),
              "openlineage events": b"\n".join(world.lineage.raw).decode(errors="replace"),
              **{f"log {p.relative_to(world.stack.root)}": text for p, text in logs.items()}}
    found = {(what, where): text.count(secret) for what, secret in SECRETS.items()
             for where, text in places.items() if secret in text}
    print(f"scanned {len(places)} places ({sum(map(len, places.values()))} characters) "
          f"for {len(SECRETS)} secrets: {sum(found.values())} occurrences")
    assert found == {}


def test_openlineage_reports_acmes_run_on_the_running_scheduler(world: World) -> None:
    """The provider's events of acme's manual run of hourly-clicks (issue 24 item 2, on a
    `make run` stack):
    render and publish START and COMPLETE with the source table in and acme's artifacts out;
    deliver's to the accepting webhook names its host and configured endpoint, nothing of
    its connection's path, login or token (the secrets test scans every event too)."""
    job, key = world.acme_run["dag_id"], world.acme_manual_key()
    server = world.stack.pg_server.rsplit("@", 1)[1]
    source = {"namespace": f"postgres://{server}", "name": f"{PG_PREFIX}demo.public.widget_metrics"}
    for task in ("render", "publish"):
        events = [e for e in world.lineage.of_job(f"{job}.{task}")
                  if e["run"]["facets"].get("exportRun", {}).get("run_key") == key]
        assert sorted(e["eventType"] for e in events) == ["COMPLETE", "START"], (task, events)
        for event in events:
            assert [{k: i[k] for k in ("namespace", "name")} for i in event["inputs"]] == [
                source], task
            (out,) = event["outputs"]
            assert out["namespace"] == "file" and "/artifacts/acme/" in out["name"], out
    delivered = {o["namespace"] + o["name"] for e in world.lineage.of_job(f"{job}.deliver")
                 if e["eventType"] in ("COMPLETE", "FAIL") for o in e["outputs"]}
    assert f"https://127.0.0.1:{world.ok.port}/exports" in delivered, delivered
