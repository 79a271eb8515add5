"""Alerts and metrics on a real scheduler (issue 13, items 5 and 6; ADR 0010).

Two companies on the shared stack (its SMTP relay, StatsD listener and ``broken_source``).
``alertco`` reads a source that is down (nothing listens on its port): its render fails with
a retryable ``SourceError``, is retried 3 times (its export's ``retries``), fails for good, is
cleared and fails through its retries again — the exports team and the owner each get
exactly one "export failed" e-mail from a real SMTP server (aiosmtpd), naming the run, the
period, the reason and the commands. Its deadline is set to pass while the test runs, so the
triggerer's deadline callback (the same notifier) sends one "deadline missed" e-mail each too.
``meterco`` exports normally with ``[metrics] statsd_on``: our ``export.*`` metrics arrive at
a UDP listener, the rendered rows equal to the ledger's. Its deadline is 1 s after its slot, so
each of its runs completes late: ``runs.late`` once per run and ``runs.lateness_seconds`` equal
to the ledger's delivered-after-deadline. Airflow's own metrics that the Grafana dashboard
shows (deploy/statsd/mapping.yml) arrive at the same listener.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.services.spool import SpoolRelay
from tests.system.scheduler.harness import (
    SchedulerStack,
    SlotClock,
    company_file,
    wait_until,
    widget_export,
)

FAILING, METERED = "widget_export__alertco__daily", "widget_export__meterco__daily"
TEAM, OWNER = "exports-team@example.com", "ops@alertco.example"
# alertco's deadline is set when its file is written, to pass 2 min later (a run created after
# its deadline gets no deadline alert).
DEADLINE_AFTER_START = timedelta(minutes=2)


# retries=3, 2-4-4 s apart (the cap keeps the retries after the clear as short): each final
# failure within ~1 min. Per export, so the shared stack's other modules keep their own.
RETRIES = {"count": 3, "delay": "2s", "max_delay": "4s"}


def _failing_company(hour: int, deadline: timedelta) -> dict[str, Any]:
    export = widget_export("daily", export_hour=hour, company="alertco",
                           deadline=f"{int(deadline.total_seconds())}s", retries=RETRIES)
    export["query"] = {**export["query"], "source": "broken_source"}
    return company_file("alertco", [export])


SERVERS: dict[str, Any] = {}


def COMPANIES(clock: SlotClock) -> dict[str, Any]:  # noqa: N802 - the harness's name for it
    """alertco's deadline passes 2 min after its file is written (its DAG is parsed and its
    run created well before that: a run created after its deadline gets no deadline alert)."""
    deadline = datetime.now(UTC) + DEADLINE_AFTER_START - clock.newest
    SERVERS["deadline"] = timedelta(seconds=int(deadline.total_seconds()))
    return {
        "alertco": _failing_company(clock.hour, SERVERS["deadline"]),
        # Late by design (its runs are created after the deadline: no deadline alert).
        "meterco": company_file("meterco", [widget_export("daily", export_hour=clock.hour,
                                                          company="meterco", retries=RETRIES,
                                                          deadline="1s")]),
    }


@pytest.fixture(scope="module", autouse=True)
def servers(shared_stack):
    """The shared stack's SMTP relay (AIRFLOW_CONN_SMTP_DEFAULT) and StatsD listener."""
    SERVERS.update(relay=shared_stack.relay, statsd=shared_stack.statsd)
    return SERVERS


def _mails(relay: SpoolRelay) -> list[tuple[str, list[str], str]]:
    """``(subject, recipients, body)`` of every accepted message."""
    out = []
    for message, (_, rcpts) in relay.received():
        part = next((p for p in message.walk() if p.get_content_type() == "text/html"), message)
        body = part.get_payload(decode=True).decode()
        out.append((str(message["Subject"]), sorted(rcpts), body))
    return out


def _per_recipient(relay: SpoolRelay, word: str, run_key: str) -> dict[str, int]:
    """Messages about alertco's run ``run_key`` with ``word`` in the subject, per recipient
    (the relay is the shared stack's: other modules' failures reach the exports team too, and
    a later slot of alertco may fall due mid-test)."""
    counts = {TEAM: 0, OWNER: 0}
    for subject, rcpts, body in _mails(relay):
        if word in subject and "alertco/" in subject and run_key in body:
            for rcpt in rcpts:
                counts[rcpt] = counts.get(rcpt, 0) + 1
    return counts


def _until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(1)


def test_one_failure_is_one_email_per_recipient_after_three_retries_and_a_clear(
        scheduler_stack: SchedulerStack, clock: SlotClock):
    stack, relay = scheduler_stack, SERVERS["relay"]
    run_key = f"alertco/daily/{clock.newest:%Y-%m-%dT%H:%M}Z"
    stack.wait_for_dags(FAILING, METERED)
    run_id = stack.wait_for_run_id(FAILING)
    stack.wait_for_run(FAILING, run_id, state="failed", timeout=240)
    render = stack.task_instance(FAILING, run_id, "render")
    assert (render["state"], render["try_number"]) == ("failed", 4), render  # 1 + 3 retries
    _until(lambda: _per_recipient(relay, "export failed", run_key) == {TEAM: 1, OWNER: 1}, 60,
           "one failure e-mail per recipient")

    # The same failure again: cleared, retried 3 times, failed for good again.
    stack.clear(FAILING, run_id, ["render"], downstream=True)

    def render_try() -> tuple[str, int]:
        render = stack.task_instance(FAILING, run_id, "render")
        return render["state"] or "", render["try_number"]

    # Its retries on a loaded shared stack: more time while the tries move (harness.wait_until).
    wait_until(lambda: render_try() == ("failed", 8), 150, 1,
               lambda: f"the cleared render to fail through its retries again: {render_try()}",
               progress=render_try)
    stack.wait_for_run(FAILING, run_id, state="failed", timeout=60)
    # The second final failure's callback claimed the alert (and found it sent): no new mail.
    _until(lambda: _notices(stack, run_key).get(f"alert:{run_key}:failed", {}).get("claims") == 2,
           60, "the second failure's callback to claim the sent alert")
    assert _per_recipient(relay, "export failed", run_key) == {TEAM: 1, OWNER: 1}

    (subject, rcpts, body) = next(m for m in _mails(relay) if "export failed" in m[0]
                                  and "alertco/" in m[0] and run_key in m[2])
    assert rcpts == sorted([TEAM, OWNER])
    assert subject.startswith("[exports] export failed: alertco/daily ")
    assert f"run:     {run_key}" in body, body
    assert "period:  20" in body, body  # the run's calendar day, from the ledger
    assert "reason:  render: SourceError:" in body, body
    assert f"exportctl explain --schedule alertco/daily --date {clock.newest:%Y-%m-%d}" in body
    assert "exportctl runs --company alertco --schedule alertco/daily" in body
    notices = _notices(stack, run_key)
    failed = notices[f"alert:{run_key}:failed"]
    assert failed["state"] == "sent" and failed["claims"] == 2, failed
    assert failed["recipients"] == f"{TEAM},{OWNER}"


def test_a_missed_deadline_alerts_once_per_recipient(scheduler_stack: SchedulerStack,
                                                     clock: SlotClock):
    """The failed run is never delivered: its DeadlineAlert fires in the triggerer."""
    relay, deadline = SERVERS["relay"], SERVERS["deadline"]
    run_key = f"alertco/daily/{clock.newest:%Y-%m-%dT%H:%M}Z"
    due = clock.newest + deadline
    _until(lambda: _per_recipient(relay, "deadline missed", run_key) == {TEAM: 1, OWNER: 1},
           max(0.0, (due - datetime.now(UTC)).total_seconds()) + 90,
           f"the deadline e-mails (deadline {due:%H:%M:%S}Z; none comes if the stack took "
           f"longer than {DEADLINE_AFTER_START} to create the run)")
    (_, _, body) = next(m for m in _mails(relay) if "deadline missed" in m[0]
                         and "alertco/" in m[0] and run_key in m[2])
    assert f"not delivered within {deadline} of the slot" in body
    assert _per_recipient(relay, "export failed", run_key) == {TEAM: 1, OWNER: 1}


def test_export_metrics_reach_statsd(scheduler_stack: SchedulerStack, clock: SlotClock):
    stack, statsd = scheduler_stack, SERVERS["statsd"]
    run_id = stack.wait_for_run_id(METERED)
    stack.wait_for_run(METERED, run_id, timeout=240)

    def name(metric: str, company: str = "meterco") -> str:
        return f"airflow.export.{metric}.{company}.daily"

    metrics = ("render.rows", "render.bytes", "runs.expected", "runs.completed",
               "deliveries.unresolved", "render.rows_per_second", "runs.late",
               "runs.lateness_seconds")

    def settled() -> tuple[list[dict], dict[str, list]] | None:
        """meterco's runs and their metrics, read while none of its runs is in flight: each run
        counts once, and a later slot may fall due mid-test (a second run, counted the same)."""
        before = [(r["dag_run_id"], r["state"]) for r in stack.dag_runs(METERED)]
        if any(state not in ("success", "failed") for _, state in before):
            return None
        runs = sorted((r for r in stack.ledger_runs() if r["run_key"].startswith("meterco/")),
                      key=lambda r: r["slot_utc"])
        seen = {m: statsd.values(name(m)) for m in metrics}
        after = [(r["dag_run_id"], r["state"]) for r in stack.dag_runs(METERED)]
        # runs.late and its lateness follow runs.completed in their own datagrams.
        if after != before or min(len(seen[m]) for m in (
                "runs.completed", "runs.late", "runs.lateness_seconds")) < len(runs):
            return None
        return runs, seen

    _until(settled, 30, "runs.completed of every meterco run")
    runs, seen = settled() or ([], {})
    assert [r["slot_utc"] for r in runs][:1] == [f"{clock.newest:%Y-%m-%dT%H:%M:%SZ}"], runs
    assert len(runs) <= 2, runs  # the newest due slot, and a later one if it fell due
    rows = [r["artifacts"][0]["rows"] for r in runs]
    assert all(n > 0 for n in rows)
    assert sorted(seen["render.rows"]) == sorted((n, "c") for n in rows)
    assert sorted(v for v, _ in seen["render.bytes"]) == sorted(
        r["artifacts"][0]["bytes"] for r in runs)
    assert seen["runs.expected"] == [(1, "c")] * len(runs)
    assert seen["runs.completed"] == [(1, "c")] * len(runs)
    assert seen["deliveries.unresolved"][-1] == (0, "g")
    assert len(seen["render.rows_per_second"]) == len(runs)
    assert all(kind == "g" and rate > 0 for rate, kind in seen["render.rows_per_second"])
    # alertco: one alert sent, the second final failure's suppressed.
    assert statsd.values(name("alerts.sent", "alertco"))[0] == (1, "c")
    assert (1, "c") in statsd.values(name("alerts.suppressed", "alertco"))
    # Late: each run once, by as much as the ledger says it was delivered after its deadline.
    assert [r["deadline_status"] for r in runs] == ["late"] * len(runs), runs
    assert seen["runs.late"] == [(1, "c")] * len(runs)
    late_by = sorted((_utc(r["delivered_at_utc"]) - _utc(r["deadline_utc"])).total_seconds()
                     for r in runs)
    lateness = sorted(v for v, kind in seen["runs.lateness_seconds"] if kind == "g")
    assert len(lateness) == len(late_by) and all(
        abs(a - b) < 1.5 for a, b in zip(lateness, late_by, strict=True)), (lateness, late_by)
    # Airflow's own metrics arrive at the same listener: those the dashboard shows, by type.
    from tests.support.statsd_mapping import airflow_names

    letters = {"counter": "c", "gauge": "g"}
    assert {name: sorted({kind for _, kind in statsd.values(name)})
            for name in airflow_names()} == {name: [letters[t]]
                                             for name, t in airflow_names().items()}


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _notices(stack: SchedulerStack, run_key: str) -> dict[str, dict[str, Any]]:
    from export_lib.ledger.notices import list_notices

    ledger = stack.ledger()
    try:
        return {n["notice_key"]: n for n in list_notices(ledger.engine, run_key)}
    finally:
        ledger.engine.dispose()
