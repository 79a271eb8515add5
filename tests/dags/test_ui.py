"""The export status page refuses anonymous requests and shows the ledger to a logged-in user."""

from __future__ import annotations

from datetime import UTC, datetime


def test_status_page_requires_login_and_lists_runs(airflow_db, export_world, tmp_path):
    from airflow.api_fastapi.app import create_app, get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    from export_lib.cli.commands import run_one

    run_one(str(tmp_path / "dags" / "config"), "acme/daily-spend", "2026-03-29T05:00Z",
            now=datetime(2026, 3, 30, tzinfo=UTC))
    client = TestClient(create_app("core"))
    assert client.get("/exports/runs.json").status_code == 401
    token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="ana", role="viewer"))
    headers = {"Authorization": f"Bearer {token}"}
    body = client.get("/exports/runs.json", headers=headers).json()
    (run,) = body["runs"]
    assert (body["total"], run["run_key"], run["state"]) == (
        1, "acme/daily-spend/2026-03-29T05:00Z", "ready")
    # Published a day after its 07:00Z deadline (the run was made at 2026-03-30T00:00Z).
    assert (run["deadline_status"], run["late_by_minutes"]) == ("late", 17 * 60)
    page = client.get("/exports/?company=acme", headers=headers).text
    assert "acme/daily-spend/2026-03-29T05:00Z" in page and "acme-dir: acknowledged" in page
    # Its schedule's only run, made after its deadline: a first catch-up, not tracked (ADR 0029).
    assert ("late by 1020 min (due 2026-03-29T07:00:00Z); not tracked: due before the schedule "
            "was deployed") in page
    assert (run["tracked"], client.get("/exports/runs.json?late=true&missed=true",
                                       headers=headers).json()["total"]) == (False, 0)
    assert "runs 1–1 of 1" in page
    assert client.get("/exports/?company=nobody", headers=headers).text.count("<tr>") == 1
    bad = client.get("/exports/runs.json?state=done", headers=headers)
    assert bad.status_code == 422 and "unknown run state 'done'" in bad.text
    for path in ("/exports/docs", "/exports/openapi.json"):
        assert client.get(path).status_code == 401
        assert client.get(path, headers=headers).status_code == 200
    assert "/runs.json" in client.get("/exports/openapi.json", headers=headers).json()["paths"]


def test_pages_refuse_an_auth_manager_that_cannot_scope_dags(airflow_db, export_world,
                                                              monkeypatch):
    from airflow.api_fastapi.app import create_app, get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    client = TestClient(create_app("core"))
    token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="ana", role="viewer"))
    headers = {"Authorization": f"Bearer {token}"}
    monkeypatch.delenv("EXPORT_UI_ALLOW_UNSCOPED_AUTH")
    for path in ("/exports/runs.json", "/exports/", "/exports/obligations", "/exports/metrics"):
        answer = client.get(path, headers=headers)
        assert answer.status_code == 503, path
        assert ("the auth manager SimpleAuthManager cannot limit a user to one company's DAGs"
                in answer.text and "EXPORT_UI_ALLOW_UNSCOPED_AUTH=true" in answer.text), path
    monkeypatch.setenv("EXPORT_UI_ALLOW_UNSCOPED_AUTH", "perhaps")
    answer = client.get("/exports/runs.json", headers=headers)
    assert answer.status_code == 503 and ("EXPORT_UI_ALLOW_UNSCOPED_AUTH: 'perhaps' is not true "
                                          "or false") in answer.text
    monkeypatch.setenv("EXPORT_UI_ALLOW_UNSCOPED_AUTH", "false")
    assert client.get("/exports/runs.json", headers=headers).status_code == 503
    monkeypatch.setenv("EXPORT_UI_ALLOW_UNSCOPED_AUTH", "true")
    assert client.get("/exports/runs.json", headers=headers).status_code == 200
