"""Alerts and metrics on a real scheduler (issue 13, items 5 and 6; ADR 0010).

Two companies on the shared stack (its SMTP relay, StatsD listener and ``broken_source``).
``alertco`` reads a source that is down (nothing listens on its port): its render fails with
a retryable ``SourceError``, is retried 3 times (its export's ``retries``), fails for good, is
cleared and fails through its retries again — the exports team and the owner each get
exactly one "export failed" e-mail from a real SMTP server (aiosmtpd), naming the run, the
period, the reason and the commands. Its deadline is set to pass while the test runs, so the
triggerer's deadline callback (the same notifier) sends one "deadline missed" e-mail each too.
``meterco`` exports normally with ``[metrics] statsd_on``: our ``export.*`` metrics arrive at
a UDP listener, the rendered rows equal to the ledger's.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.services.smtp import SmtpRelay
from tests.system.scheduler.harness import (
    SchedulerStack,
    company_file,
    daily_hour_far_from_now,
    widget_export,
)

HOUR = daily_hour_far_from_now()
FAILING, METERED = "widget_export__alertco__daily", "widget_export__meterco__daily"
TEAM, OWNER = "exports-team@example.com", "ops@alertco.example"
# alertco's latest slot. Its deadline is set when its file is written, to pass 2 min later
# (a run created after its deadline gets no deadline alert).
_NOW = datetime.now(UTC)
SLOT = _NOW.replace(hour=HOUR, minute=0, second=0, microsecond=0)
SLOT = SLOT if SLOT <= _NOW else SLOT - timedelta(days=1)
DEADLINE_AFTER_START = timedelta(minutes=2)


# retries=3, 2-4-4 s apart (the cap keeps the retries after the clear as short): each final
# failure within ~1 min. Per export, so the shared stack's other modules keep their own.
RETRIES = {"count": 3, "delay": "2s", "max_delay": "4s"}


def _failing_company(deadline: timedelta = timedelta(hours=20)) -> dict[str, Any]:
    export = widget_export("daily", export_hour=HOUR, company="alertco",
                           deadline=f"{int(deadline.total_seconds())}s", retries=RETRIES)
    export["query"] = {**export["query"], "source": "broken_source"}
    return company_file("alertco", [export])


SERVERS: dict[str, Any] = {}


def COMPANIES() -> dict[str, Any]:  # noqa: N802 - the harness's name for a module's companies
    """alertco's deadline passes 2 min after its file is written (its DAG is parsed and its
    run created well before that: a run created after its deadline gets no deadline alert)."""
    deadline = datetime.now(UTC) + DEADLINE_AFTER_START - SLOT
    SERVERS["deadline"] = timedelta(seconds=int(deadline.total_seconds()))
    return {
        "alertco": _failing_company(SERVERS["deadline"]),
        "meterco": company_file("meterco", [widget_export("daily", export_hour=HOUR,
                                                          company="meterco", retries=RETRIES)]),
    }


@pytest.fixture(scope="module", autouse=True)
def servers(shared_stack):
    """The shared stack's SMTP relay (AIRFLOW_CONN_SMTP_DEFAULT) and StatsD listener."""
    SERVERS.update(relay=shared_stack.relay, statsd=shared_stack.statsd)
    return SERVERS


def _mails(relay: SmtpRelay) -> list[tuple[str, list[str], str]]:
    """``(subject, recipients, body)`` of every accepted message."""
    out = []
    for message, (_, rcpts) in zip(relay.messages, relay.handler.envelopes, strict=True):
        part = next((p for p in message.walk() if p.get_content_type() == "text/html"), message)
        body = part.get_payload(decode=True).decode()
        out.append((str(message["Subject"]), sorted(rcpts), body))
    return out


def _per_recipient(relay: SmtpRelay, word: str) -> dict[str, int]:
    """Messages about alertco with ``word`` in the subject, per recipient (the relay is the
    shared stack's: other modules' failures reach the exports team too)."""
    counts = {TEAM: 0, OWNER: 0}
    for subject, rcpts, _ in _mails(relay):
        if word in subject and "alertco/" in subject:
            for rcpt in rcpts:
                counts[rcpt] = counts.get(rcpt, 0) + 1
    return counts


def _until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(1)


def _scheduled_run(stack: SchedulerStack, dag_id: str) -> str:
    (run,) = [r for r in stack.dag_runs(dag_id) if r["run_type"] == "scheduled"]
    return run["dag_run_id"]


def test_one_failure_is_one_email_per_recipient_after_three_retries_and_a_clear(
        scheduler_stack: SchedulerStack):
    stack, relay = scheduler_stack, SERVERS["relay"]
    stack.wait_for_dags(FAILING, METERED)
    run_id = stack.wait_for_run_id(FAILING)
    stack.wait_for_run(FAILING, run_id, state="failed", timeout=240)
    render = stack.task_instance(FAILING, run_id, "render")
    assert (render["state"], render["try_number"]) == ("failed", 4), render  # 1 + 3 retries
    _until(lambda: _per_recipient(relay, "export failed") == {TEAM: 1, OWNER: 1}, 60,
           "one failure e-mail per recipient")

    # The same failure again: cleared, retried 3 times, failed for good again.
    stack.clear(FAILING, run_id, ["render"], downstream=True)
    _until(lambda: stack.task_instance(FAILING, run_id, "render")["state"] == "failed"
           and stack.task_instance(FAILING, run_id, "render")["try_number"] == 8, 150,
           "the cleared render to fail through its retries again")
    stack.wait_for_run(FAILING, run_id, state="failed", timeout=60)
    time.sleep(5)  # the second final failure's callback has run (it runs before the state)
    assert _per_recipient(relay, "export failed") == {TEAM: 1, OWNER: 1}

    (subject, rcpts, body) = next(m for m in _mails(relay)
                                  if "export failed" in m[0] and "alertco/" in m[0])
    run_key = f"alertco/daily/{SLOT:%Y-%m-%dT%H:%M}Z"
    assert rcpts == sorted([TEAM, OWNER])
    assert subject.startswith("[exports] export failed: alertco/daily ")
    assert f"run:     {run_key}" in body, body
    assert "period:  20" in body, body  # the run's calendar day, from the ledger
    assert "reason:  render: SourceError:" in body, body
    assert f"exportctl explain --schedule alertco/daily --date {SLOT:%Y-%m-%d}" in body
    assert "exportctl runs --company alertco --schedule alertco/daily" in body
    notices = _notices(stack, run_key)
    failed = notices[f"alert:{run_key}:failed"]
    assert failed["state"] == "sent" and failed["claims"] == 2, failed
    assert failed["recipients"] == f"{TEAM},{OWNER}"


def test_a_missed_deadline_alerts_once_per_recipient(scheduler_stack: SchedulerStack):
    """The failed run is never delivered: its DeadlineAlert fires in the triggerer."""
    relay, deadline = SERVERS["relay"], SERVERS["deadline"]
    due = SLOT + deadline
    _until(lambda: _per_recipient(relay, "deadline missed") == {TEAM: 1, OWNER: 1},
           max(0.0, (due - datetime.now(UTC)).total_seconds()) + 90,
           f"the deadline e-mails (deadline {due:%H:%M:%S}Z; none comes if the stack took "
           f"longer than {DEADLINE_AFTER_START} to create the run)")
    (_, _, body) = next(m for m in _mails(relay)
                         if "deadline missed" in m[0] and "alertco/" in m[0])
    assert f"not delivered within {deadline} of the slot" in body
    assert _per_recipient(relay, "export failed") == {TEAM: 1, OWNER: 1}


def test_export_metrics_reach_statsd(scheduler_stack: SchedulerStack):
    stack, statsd = scheduler_stack, SERVERS["statsd"]
    run_id = stack.wait_for_run_id(METERED)
    stack.wait_for_run(METERED, run_id, timeout=240)
    (run,) = [r for r in stack.ledger_runs() if r["run_key"].startswith("meterco/")]
    rows = run["artifacts"][0]["rows"]
    assert rows > 0

    def name(metric: str, company: str = "meterco") -> str:
        return f"airflow.export.{metric}.{company}.daily"

    _until(lambda: statsd.values(name("runs.completed")), 30, "runs.completed")
    assert statsd.values(name("render.rows")) == [(rows, "c")]
    assert statsd.values(name("render.bytes"))[0][0] == run["artifacts"][0]["bytes"]
    assert statsd.values(name("runs.expected")) == [(1, "c")]
    assert statsd.values(name("runs.completed")) == [(1, "c")]
    assert statsd.values(name("deliveries.unresolved"))[-1] == (0, "g")
    (rate, kind), = statsd.values(name("render.rows_per_second"))
    assert kind == "g" and rate > 0
    # alertco: one alert sent, the second final failure's suppressed.
    assert statsd.values(name("alerts.sent", "alertco"))[0] == (1, "c")
    assert (1, "c") in statsd.values(name("alerts.suppressed", "alertco"))
    # Airflow's own metrics arrive at the same listener.
    assert any(line.startswith("airflow.") and not line.startswith("airflow.export.")
               for line in statsd.lines)


def _notices(stack: SchedulerStack, run_key: str) -> dict[str, dict[str, Any]]:
    from export_lib.ledger.notices import list_notices

    ledger = stack.ledger()
    try:
        return {n["notice_key"]: n for n in list_notices(ledger.engine, run_key)}
    finally:
        ledger.engine.dispose()
