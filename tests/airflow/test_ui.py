"""The export status page refuses anonymous requests and shows the ledger to a logged-in user."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

pytestmark = pytest.mark.airflow


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
    (run,) = client.get("/exports/runs.json", headers=headers).json()
    assert (run["run_key"], run["state"]) == ("acme/daily-spend/2026-03-29T05:00Z", "ready")
    page = client.get("/exports/?company=acme", headers=headers).text
    assert "acme/daily-spend/2026-03-29T05:00Z" in page and "acme-dir: acknowledged" in page
