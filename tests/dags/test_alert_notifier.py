"""ExportAlertNotifier against a real SMTP server (aiosmtpd) and a real ledger: the
notifier Airflow calls as ``on_failure_callback`` (sync) and awaits as a deadline callback."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from export_lib.errors import SourceError
from export_lib.ledger import open_ledger
from export_lib.ledger.notices import list_notices
from tests.conftest import REPO
from tests.services.smtp import SmtpRelay, start_smtp, stop_smtp

SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)
RUN_KEY = "acme/daily-spend/2026-03-29T05:00Z"


@pytest.fixture()
def smtp_server() -> Iterator[SmtpRelay]:
    relay = start_smtp()
    yield relay
    stop_smtp(relay)


@pytest.fixture()
def alert_env(smtp_server: SmtpRelay, tmp_path, monkeypatch) -> SmtpRelay:
    monkeypatch.setenv("AIRFLOW_CONN_SMTP_DEFAULT",
                       f"smtp://127.0.0.1:{smtp_server.port}/?from_email=airflow%40example.com"
                       "&disable_ssl=true&disable_tls=true&retry_limit=0&timeout=10")
    url = f"sqlite:///{tmp_path}/ledger.db"
    monkeypatch.setenv("EXPORT_LEDGER_URL", url)
    open_ledger(url).upgrade()
    return smtp_server


def _notifier(reason: str):
    from export_airflow.alerts import ExportAlertNotifier

    return ExportAlertNotifier(reason=reason, schedule_id="acme/daily-spend",
                               owner="owner@acme.example", config_dir=str(REPO / "dags/config"),
                               deadline="2:00:00")


def _failure_context(try_number: int) -> dict:
    ti = SimpleNamespace(task_id="render", dag_id="widget_export__acme__daily-spend",
                         run_id="scheduled__2026-03-29T05:00:00+00:00", try_number=try_number)
    return {"logical_date": SLOT, "ti": ti, "task": SimpleNamespace(task_id="render"),
            "exception": SourceError("cannot reach demo_source: connection refused")}


def test_a_final_failure_mails_team_and_owner_once_however_often_it_is_reported(alert_env):
    for try_number in (4, 8, 12):  # the final failure, then the same after two clears
        _notifier("failed")(_failure_context(try_number))
    assert len(alert_env.messages) == 1
    (message,), ((_, rcpts),) = alert_env.messages, alert_env.handler.envelopes
    assert sorted(rcpts) == ["exports-team@example.com", "owner@acme.example"]
    assert message["Subject"] == ("[exports] export failed: acme/daily-spend slot "
                                  "2026-03-29T05:00Z")
    body = next(p for p in message.walk() if p.get_content_type() == "text/html") \
        .get_payload(decode=True).decode()
    assert f"run:     {RUN_KEY}" in body
    assert "reason:  render: SourceError: cannot reach demo_source: connection refused" in body
    assert "exportctl explain --schedule acme/daily-spend --date 2026-03-29" in body
    (notice,) = list_notices(open_ledger().engine, RUN_KEY)
    assert (notice["state"], notice["claims"], notice["reason"]) == ("sent", 3, "failed")


def test_a_missed_deadline_is_its_own_alert_sent_once_from_the_triggerer_path(alert_env):
    context = {"dag_run": {"dag_id": "widget_export__acme__daily-spend",
                           "run_id": "scheduled__2026-03-29T05:00:00+00:00",
                           "logical_date": "2026-03-29T05:00:00Z"},
               "deadline": {"id": "x", "deadline_time": "2026-03-29T07:00:00Z"}}

    async def twice() -> None:
        from export_airflow.alerts import ExportAlertNotifier

        for _ in range(2):  # as the triggerer does: build with the context, then await
            await ExportAlertNotifier(reason="deadline", schedule_id="acme/daily-spend",
                                      owner="owner@acme.example",
                                      config_dir=str(REPO / "dags/config"), deadline="2:00:00",
                                      context=context)

    asyncio.run(twice())
    _notifier("failed")(_failure_context(4))
    subjects = sorted(str(m["Subject"]) for m in alert_env.messages)
    assert subjects == ["[exports] deadline missed: acme/daily-spend slot 2026-03-29T05:00Z",
                        "[exports] export failed: acme/daily-spend slot 2026-03-29T05:00Z"]


def test_an_smtp_server_that_refuses_leaves_the_alert_to_the_next_report(alert_env,
                                                                         monkeypatch):
    from tests.services.ports import free_port

    good = os.environ["AIRFLOW_CONN_SMTP_DEFAULT"]
    monkeypatch.setenv("AIRFLOW_CONN_SMTP_DEFAULT", good.replace(
        f":{alert_env.port}/", f":{free_port()}/"))  # nobody listens there
    with pytest.raises(ConnectionRefusedError):
        _notifier("failed")(_failure_context(4))
    (notice,) = list_notices(open_ledger().engine, RUN_KEY)
    assert notice["state"] == "failed" and "ConnectionRefusedError" in notice["error"]
    monkeypatch.setenv("AIRFLOW_CONN_SMTP_DEFAULT", good)  # the relay is back
    _notifier("failed")(_failure_context(8))
    assert len(alert_env.messages) == 1
    (notice,) = list_notices(open_ledger().engine, RUN_KEY)
    assert (notice["state"], notice["claims"]) == ("sent", 2)


def test_each_destination_whose_delivery_gave_up_is_its_own_alert(alert_env):
    from export_lib.errors import DeliveryError

    def deliver_failed(destination: str) -> dict:
        ti = SimpleNamespace(task_id="deliver", dag_id="widget_export__acme__daily-spend",
                             run_id="scheduled__2026-03-29T05:00:00+00:00", try_number=7)
        return {"logical_date": SLOT, "ti": ti,
                "task": SimpleNamespace(task_id="deliver", destination_id=destination),
                "exception": DeliveryError(f"delivery to {destination} is exhausted")}

    for destination in ("sftp-a", "sftp-b", "sftp-a"):
        _notifier("failed")(deliver_failed(destination))
    subjects = sorted(str(m["Subject"]) for m in alert_env.messages)
    assert subjects == [
        "[exports] delivery not made (sftp-a): acme/daily-spend slot 2026-03-29T05:00Z",
        "[exports] delivery not made (sftp-b): acme/daily-spend slot 2026-03-29T05:00Z"]
    keys = [n["notice_key"] for n in list_notices(open_ledger().engine, RUN_KEY)]
    assert keys == [f"alert:{RUN_KEY}:delivery:sftp-a", f"alert:{RUN_KEY}:delivery:sftp-b"]


def test_an_unrecoverable_period_found_by_the_gap_audit_is_alerted_once(alert_env):
    """The export_gap_audit DAG's notify hook: team and owner get one mail per period, however
    often the audit reports it."""
    from datetime import timedelta

    from export_airflow.alerts import notify_unrecoverable

    from export_lib.pipeline.audit import Gap

    gap = Gap(schedule_id="acme/daily-spend", company="acme",
              dag_id="widget_export__acme__daily-spend", slot=SLOT, owner="owner@acme.example",
              recovery="each", window_start=SLOT - timedelta(days=1), source="demo_source",
              retention_days=2)
    notify = notify_unrecoverable(str(REPO / "dags/config"), "export_gap_audit/scheduled__x")
    why = "source demo_source keeps 2 days of data and this period starts 2026-03-28"
    notify(gap, why)
    notify(gap, why)
    (message,), ((_, rcpts),) = alert_env.messages, alert_env.handler.envelopes
    assert sorted(rcpts) == ["exports-team@example.com", "owner@acme.example"]
    assert message["Subject"] == ("[exports] period unrecoverable: acme/daily-spend slot "
                                  "2026-03-29T05:00Z")
    body = next(p for p in message.walk() if p.get_content_type() == "text/html") \
        .get_payload(decode=True).decode()
    assert f"reason:  {why}" in body
    assert "airflow: the gap audit (export_gap_audit/scheduled__x)" in body
    assert "exportctl explain --schedule acme/daily-spend --date 2026-03-29" in body
    (notice,) = list_notices(open_ledger().engine, RUN_KEY)
    assert (notice["state"], notice["claims"], notice["reason"]) == ("sent", 2, "unrecoverable")


def test_a_failed_manual_export_alerts_the_team_and_the_company_owner_once(alert_env):
    """A manual run has no logical date: its run key comes from the Airflow run id, its owner
    from the company file."""
    from export_airflow.alerts import manual_failure_notifier

    from export_lib.config.manual import manual_run_key

    run_id = "manual__2026-03-30T10:00:00+00:00"
    ti = SimpleNamespace(task_id="render", dag_id="manual_export__acme", run_id=run_id,
                         try_number=4)
    context = {"ti": ti, "task": SimpleNamespace(task_id="render"),
               "exception": SourceError("cannot reach demo_source: connection refused")}
    notifier = manual_failure_notifier("acme", str(REPO / "dags/config"))
    notifier(context)
    notifier({**context, "ti": SimpleNamespace(**{**vars(ti), "try_number": 8})})
    (message,), ((_, rcpts),) = alert_env.messages, alert_env.handler.envelopes
    assert sorted(rcpts) == ["data-team@acme.example", "exports-team@example.com"]
    assert message["Subject"].startswith("[exports] export failed: acme/manual slot ")
    body = next(p for p in message.walk() if p.get_content_type() == "text/html") \
        .get_payload(decode=True).decode()
    key = manual_run_key("acme", run_id)
    assert f"run:     {key}" in body
    assert "reason:  render: SourceError: cannot reach demo_source: connection refused" in body
    assert f"airflow: manual_export__acme/{run_id}/render try 4" in body
    (notice,) = list_notices(open_ledger().engine, key)
    assert (notice["state"], notice["claims"]) == ("sent", 2)


def test_a_run_at_risk_is_alerted_once_and_a_skipped_one_not_at_all(alert_env):
    """The at-risk DeadlineAlert's callback (ADR 0020), awaited twice as a triggerer would."""
    from export_lib.config.loader import load_catalog
    from export_lib.pipeline import RunContext, start_run

    def context(slot: datetime) -> dict:
        return {"dag_run": {"dag_id": "widget_export__acme__daily-spend",
                            "run_id": f"scheduled__{slot.isoformat()}",
                            "logical_date": slot.isoformat()}}

    async def ask(slot: datetime, times: int) -> None:
        from export_airflow.alerts import ExportAlertNotifier

        for _ in range(times):
            await ExportAlertNotifier(reason="at_risk", schedule_id="acme/daily-spend",
                                      owner="owner@acme.example",
                                      config_dir=str(REPO / "dags/config"), deadline="2:00:00",
                                      risk="automatic", context=context(slot))

    asyncio.run(ask(SLOT, 2))
    (message,) = alert_env.messages
    assert message["Subject"] == ("[exports] at risk of missing its deadline: acme/daily-spend "
                                  "slot 2026-03-29T05:00Z")
    body = next(p for p in message.walk() if p.get_content_type() == "text/html") \
        .get_payload(decode=True).decode()
    assert "(risk point: half the deadline, or the median delivery time if longer; deadline: " \
           "2:00:00 after the slot); the ledger has no run for it yet (resolve_window has not " \
           "registered it)" in body
    (notice,) = list_notices(open_ledger().engine, RUN_KEY)
    assert (notice["notice_key"], notice["state"], notice["claims"]) == (
        f"alert:{RUN_KEY}:at_risk", "sent", 2)

    skipped = datetime(2026, 3, 30, 5, 0, tzinfo=UTC)
    ledger = open_ledger()
    run = start_run(ledger, load_catalog(REPO / "dags/config").schedule("acme/daily-spend"),
                    skipped, now=skipped, ctx=RunContext(origin="test", trigger="scheduled"))
    ledger.skip(run.run_key, "skipped by the test", skipped)
    asyncio.run(ask(skipped, 1))
    assert len(alert_env.messages) == 1
    assert list_notices(open_ledger().engine, run.run_key) == []
