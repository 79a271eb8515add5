"""The obligations page through Airflow's own app and auth manager: login required, the page and
drill-down render, and the release action needs edit access to the run's DAG (a viewer gets 403
and nothing changes), the user's form token and a same-origin request."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

HELD_SLOT = datetime(2026, 3, 29, 3, 0, tzinfo=UTC)
HELD = "acme/hourly-clicks/2026-03-29T03:00Z"


def test_release_needs_edit_access_a_token_and_the_same_origin(airflow_db, export_world):
    from airflow.api_fastapi.app import create_app, get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from export_airflow.pages.ui_access import action_token
    from fastapi.testclient import TestClient

    from export_lib.cli.commands import run_one
    from export_lib.config.loader import load_catalog
    from export_lib.errors import RunHeldError
    from export_lib.ledger import open_ledger
    from export_lib.pipeline import RunContext, register_run, start_run

    acme = export_world.config / "acme.yaml"
    acme.write_text(acme.read_text().replace("    deadline: 30m\n",
                                             "    deadline: 30m\n    late_start: hold\n", 1))
    # Registered 10 min after its slot (the schedule was deployed then: its deadline is tracked,
    # ADR 0029), delivered the next day: late.
    register_run(open_ledger(), load_catalog(export_world.config).schedule("acme/daily-spend"),
                 datetime(2026, 3, 29, 5, 0, tzinfo=UTC),
                 now=datetime(2026, 3, 29, 5, 10, tzinfo=UTC),
                 ctx=RunContext(origin="test", trigger="scheduled"))
    run_one(str(export_world.config), "acme/daily-spend", "2026-03-29T05:00Z",
            now=datetime(2026, 3, 30, tzinfo=UTC))
    ledger = open_ledger()
    with pytest.raises(RunHeldError):
        start_run(ledger, load_catalog(export_world.config).schedule("acme/hourly-clicks"),
                  HELD_SLOT, now=HELD_SLOT + timedelta(hours=2),
                  ctx=RunContext(origin="test", trigger="scheduled"))

    client = TestClient(create_app("core"), base_url="http://airflow.test")
    manager = get_auth_manager()

    def auth(name: str, role: str) -> dict[str, str]:
        token = manager.generate_jwt(SimpleAuthManagerUser(username=name, role=role))
        return {"Authorization": f"Bearer {token}"}

    viewer, admin = auth("vic", "viewer"), auth("ada", "admin")
    assert client.get("/exports/obligations").status_code == 401
    page = client.get("/exports/obligations", headers=viewer).text
    assert "data-outcome='late'" in page and "data-outcome='held'" in page
    assert "data-outcome='no_run'" in page  # the slots since its one run (29 March)
    assert "Export obligations" in page and "delivered late" in page
    only_late = client.get("/exports/obligations?state=late", headers=viewer).text
    assert re.findall(r"<tr data-run='([^']+)'", only_late) == ["acme/daily-spend/2026-03-29T05:00Z"]
    first = client.get("/exports/obligations?limit=1", headers=viewer).text
    assert "runs 1–1 of 2, newest first" in first and "offset=1" in first and "id='older'" in first
    assert re.findall(r"<tr data-run='([^']+)'", first) == ["acme/daily-spend/2026-03-29T05:00Z"]
    second = client.get("/exports/obligations?limit=1&offset=1", headers=viewer).text
    assert re.findall(r"<tr data-run='([^']+)'", second) == [HELD] and "id='newer'" in second
    bad = client.get("/exports/obligations?state=done", headers=viewer)
    assert bad.status_code == 422 and "unknown state 'done'" in bad.text

    detail = client.get(f"/exports/obligations/run?key={HELD}", headers=viewer).text
    assert "id='no-edit'" in detail and "do-release" not in detail
    # The same paragraph as `exportctl explain`, on the page.
    (paragraph,) = re.findall(r"<p id='explain'><b>In one paragraph:</b> ([^<]+)</p>", detail)
    assert paragraph.startswith("acme/hourly-clicks, slot ") and f"(run {HELD}): held since " \
        in paragraph and f"To export it anyway: &#39;exportctl release {HELD}&#39;" in paragraph
    assert "do-release" in client.get(f"/exports/obligations/run?key={HELD}", headers=admin).text

    def release(headers: dict[str, str], user: str, **extra: str):
        form = {"run_key": HELD, "token": action_token(user, HELD), **extra}
        return client.post("/exports/obligations/action/release", data=form,
                           headers=headers, follow_redirects=False)

    refused = release(viewer, "vic")
    assert refused.status_code == 403 and "vic may not edit DAG widget_export__acme__hourly-clicks" \
        in refused.text
    assert release(admin, "ada", token="forged").status_code == 403
    assert release({**admin, "Origin": "http://evil.example"}, "ada").status_code == 403
    # Issue 23: the token expires, and without a configured secret there is no action at all.
    from export_airflow.pages import ui_access

    from export_lib.views.action_tokens import make_token

    stale = make_token(ui_access.secret(), "ada", HELD, now=datetime.now(UTC) - timedelta(hours=2),
                       ttl=timedelta(hours=1))
    expired = release(admin, "ada", token=stale)
    assert expired.status_code == 403 and "the form token expired" in expired.text
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ui_access, "secret", lambda: None)
        page = client.get(f"/exports/obligations/run?key={HELD}", headers=admin).text
        assert "id='no-secret'" in page and "do-release" not in page
        refused = client.post("/exports/obligations/action/release", headers=admin,
                              data={"run_key": HELD, "token": "1.x"}, follow_redirects=False)
        assert refused.status_code == 403 and "need a secret of at least 16" in refused.text
    assert not ledger.is_released(HELD)  # nothing changed by any refused request
    assert client.post("/exports/obligations/action/purge", headers=admin,
                       data={"run_key": HELD}).status_code == 404  # no such action

    done = release({**admin, "Origin": "http://airflow.test"}, "ada")
    assert done.status_code == 303 and done.headers["location"].endswith("done=release")
    assert ledger.get_run(HELD).reason == "released by ada (obligations page)"
    again = release(admin, "ada")
    assert again.status_code == 409 and "is not held" in again.text

    # Requeue an exhausted delivery: refused for the viewer, done for the admin.
    late = "acme/daily-spend/2026-03-29T05:00Z"
    with ledger.engine.begin() as conn:  # the delivery gave up, whatever decided it
        conn.execute(sa.text("UPDATE deliveries SET state = 'exhausted', acknowledged_at = NULL "
                             "WHERE run_key = :k"), {"k": late})
    assert "do-requeue" in client.get(f"/exports/obligations/run?key={late}", headers=admin).text

    def requeue(headers: dict[str, str], user: str):
        form = {"run_key": late, "destination": "acme-dir", "token": action_token(user, late)}
        return client.post("/exports/obligations/action/requeue", data=form, headers=headers,
                           follow_redirects=False)

    def state() -> str:
        with ledger.engine.connect() as conn:
            return conn.execute(sa.text("SELECT state FROM deliveries WHERE run_key = :k"),
                                {"k": late}).scalar_one()

    assert requeue(viewer, "vic").status_code == 403 and state() == "exhausted"
    assert requeue(admin, "ada").status_code == 303 and state() == "pending"
    assert "by ada (obligations page): requeued from the obligations page" in client.get(
        f"/exports/obligations/run?key={late}", headers=admin).text

    # The controls (issue 13 item 4) from the page: revoke, cancel, pause / resume; each refused
    # for the viewer (403, nothing changed), done and audited for the admin, 409 when moot.
    from export_lib.ledger.controls import list_actions

    def act(name: str, key: str, headers: dict[str, str], user: str, **extra: str):
        form = {"run_key": key, "token": action_token(user, key), **extra}
        return client.post(f"/exports/obligations/action/{name}", data=form, headers=headers,
                           follow_redirects=False)

    assert act("revoke", late, viewer, "vic", version="1").status_code == 403
    assert ledger.artifacts(late)[0].revoked_at is None
    assert "do-revoke" in client.get(f"/exports/obligations/run?key={late}", headers=admin).text
    assert act("revoke", late, admin, "ada", version="1", why="wrong currency").status_code == 303
    (artifact,) = ledger.artifacts(late)
    assert artifact.revoked_reason.startswith("revoked by ada (obligations page) at ")
    assert artifact.revoked_reason.endswith(": wrong currency")
    again = act("revoke", late, admin, "ada", version="1")
    assert again.status_code == 409 and "already revoked" in again.text
    revoked = client.get("/exports/obligations?state=revoked", headers=viewer).text
    assert re.findall(r"<tr data-run='([^']+)'", revoked) == [late]
    assert "do-revoke" not in client.get(f"/exports/obligations/run?key={late}",
                                         headers=admin).text

    assert act("cancel", HELD, viewer, "vic").status_code == 403
    forged = act("cancel", HELD, admin, "ada", why="ok\r\n2026-12-02 INFO released by root")
    assert forged.status_code == 422 and "why: contains a control character (U+000D at " \
        "position 3); write one line; nothing was changed" in forged.text
    assert act("cancel", HELD, admin, "ada", why="customer left").status_code == 303
    assert ledger.get_run(HELD).state == "cancelled"
    moot = act("cancel", HELD, admin, "ada")
    assert moot.status_code == 409 and "is already cancelled" in moot.text

    assert act("pause", HELD, viewer, "vic").status_code == 403
    assert act("pause", HELD, admin, "ada", why="migrating").status_code == 303
    paused = client.get(f"/exports/obligations/run?key={HELD}", headers=admin).text
    assert "do-unpause" in paused and "do-pause" not in paused
    assert act("unpause", HELD, admin, "ada").status_code == 303
    trail = [(a.who, a.action, a.target_id, a.changed) for a in list_actions(ledger,
                                                                            company="acme")]
    assert trail[:6] == [
        ("ada (obligations page)", "unpause", "acme/hourly-clicks", True),
        ("ada (obligations page)", "pause", "acme/hourly-clicks", True),
        ("ada (obligations page)", "cancel", HELD, False),
        ("ada (obligations page)", "cancel", HELD, True),
        ("ada (obligations page)", "revoke", str(artifact.id), False),
        ("ada (obligations page)", "revoke", str(artifact.id), True)], trail
    ledger.engine.dispose()
