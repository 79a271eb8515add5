"""Outages and risk through Airflow's own app (ADR 0020): the obligations page (HTML and JSON)
marks the run at risk and counts the due slots without a run; ``/exports/metrics`` serves the
same figures in Prometheus text, behind the same login."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)
NOW = SLOT + timedelta(minutes=70)  # acme/daily-spend: deadline 2 h, risk point 06:00Z
KEY = "acme/daily-spend/2026-03-29T05:00Z"


def test_the_page_and_the_metrics_show_the_run_at_risk_and_the_slots_without_a_run(
        airflow_db, export_world, monkeypatch):
    from airflow.api_fastapi.app import create_app, get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from export_airflow.pages import obligations_ui
    from fastapi.testclient import TestClient

    from export_lib.config.loader import load_catalog
    from export_lib.ledger import open_ledger
    from export_lib.pipeline import RunContext, start_run
    from export_lib.views.risk import due_slots

    catalog = load_catalog(export_world.config)
    start_run(open_ledger(), catalog.schedule("acme/daily-spend"), SLOT,
              now=SLOT + timedelta(minutes=1), ctx=RunContext(origin="test", trigger="scheduled"))
    monkeypatch.setattr(obligations_ui, "_now", lambda: NOW)
    client = TestClient(create_app("core"), base_url="http://airflow.test")
    token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="vic", role="viewer"))
    viewer = {"Authorization": f"Bearer {token}"}

    data = client.get("/exports/obligations.json?schedule=acme/daily-spend", headers=viewer).json()
    (run,) = data["runs"]["runs"]
    assert (run["run_key"], run["outcome"], run["at_risk"], run["risk_point_utc"]) == (
        KEY, "waiting", True, "2026-03-29T06:00:00Z")
    (strip,) = data["schedules"]
    assert strip["strip"][-1]["at_risk"] is True and strip["strip"][-2]["at_risk"] is False
    assert strip["due"] == {"since_utc": "2026-03-28T06:10:00Z", "expected": 1, "missing": 0,
                            "missed": 0, "at_risk": 1}  # 28 March: before its first run

    page = client.get("/exports/obligations", headers=viewer).text
    assert f"<tr data-run='{KEY}' data-outcome='waiting'><td>" in page
    row = page.split(f"<tr data-run='{KEY}'")[1].split("</tr>")[0]
    assert "data-at-risk='true'" in row and ">at risk since 2026-03-29T06:00:00Z</span>" in row
    assert "data-at-risk='true'" in page.split("id='schedules'")[1].split("</table>")[0]

    assert client.get("/exports/metrics").status_code == 401
    response = client.get("/exports/metrics", headers=viewer)
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = dict(line.rsplit(" ", 1) for line in response.text.splitlines()
                   if line and not line.startswith("#"))
    daily = '{company="acme",schedule="acme/daily-spend"}'
    assert [samples[f"export_{m}{daily}"] for m in (
        "slots_expected", "slots_missing", "slots_missed", "runs_at_risk")] == ["1", "0", "0", "1"]
    # acme/hourly-clicks never ran (an outage from the start): every due slot is missing.
    hourly = '{company="acme",schedule="acme/hourly-clicks"}'
    due = len(due_slots(catalog.schedule("acme/hourly-clicks"), NOW - timedelta(hours=24), NOW))
    assert due >= 22
    assert (samples[f"export_slots_expected{hourly}"],
            samples[f"export_slots_missing{hourly}"]) == (str(due), str(due))
    assert samples["export_metrics_horizon_seconds"] == "86400"
    short = client.get("/exports/metrics?hours=2", headers=viewer).text
    assert f"export_slots_missing{hourly} 2\n" in short  # 05:00Z and 06:00Z
