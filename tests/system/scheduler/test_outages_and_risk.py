"""Outages and risk on a real stack (issue 22, item 4, acceptance; ADR 0020).

``outageco`` has an hourly export in force from 2 h 30 min before the last full hour (3 hourly
slots due) whose DAGs Airflow created paused (the company file said ``paused``, then was set
``active`` again: Airflow keeps a DAG's pause): for the scheduler nothing is due, as in an
outage, while the shared scheduler keeps serving the other modules. The api-server still
counts the 3 due slots from the timetable — ``/exports/metrics`` and the obligations page show
them expected and without a run before any run exists.

``riskco`` exports daily from a view that sleeps per row (the shared fixture database): its run
is still rendering at its risk point (half a deadline of ~12 h, long past at creation), so the
at-risk DeadlineAlert fires: one e-mail to the team and one to the owner through the shared
SMTP relay, shown on the page, in ``exportctl runs`` and in the metrics.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.system.scheduler.harness import SchedulerStack, SlotClock, company_file, widget_export

RISKY = "widget_export__riskco__daily"
TEAM, OWNER = "exports-team@example.com", "ops@riskco.example"
STATE: dict[str, Any] = {}
HOURLY = {"interval_hours": 1, "window": {"kind": "interval"}, "deadline": "1h"}
SLOW = {"source": "fixture_source", "table": "riskco_slow",
        "columns": ["company_id", "event_time", "value"], "timestamp_column": "event_time",
        "tenant_column": "company_id"}


def _outage(status: str) -> dict[str, Any]:
    export = widget_export("hourly", export_hour=0, company="outageco", **HOURLY,
                           effective_from=STATE["from"].isoformat())
    return company_file("outageco", [export], status=status)


def COMPANIES(clock: SlotClock) -> dict[str, Any]:  # noqa: N802 - the harness's name for it
    hour = clock.now.replace(minute=0, second=0, microsecond=0)
    STATE["from"] = hour - timedelta(hours=2, minutes=30)  # slots hour-2h, hour-1h, hour
    # riskco's deadline passes 10 min after its file is written: its run is created before
    # (a run created after its deadline gets no alerts), its risk point (half) long before.
    deadline = int((clock.now + timedelta(minutes=10) - clock.newest).total_seconds())
    risky = widget_export("daily", export_hour=clock.hour, company="riskco",
                          deadline=f"{deadline}s", query=SLOW, retries={"count": 0})
    return {"outageco": _outage("paused"), "riskco": company_file("riskco", [risky])}


def prepare_stack(stack: SchedulerStack) -> None:
    """riskco's view: 72 rows a day for 3 days, each read costs riskco_knob.seconds."""
    start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=2)
    with psycopg.connect(stack.env["AIRFLOW_CONN_FIXTURE_SOURCE"], autocommit=True) as conn:
        conn.execute("CREATE TABLE riskco_rows (company_id text, event_time timestamptz, "
                     "value numeric(12, 2))")
        conn.execute("INSERT INTO riskco_rows SELECT 'riskco', %s + g * interval '20 min', g "
                     "FROM generate_series(0, 3 * 72 - 1) g", (start,))
        conn.execute("CREATE TABLE riskco_knob (seconds float8 NOT NULL)")
        conn.execute("INSERT INTO riskco_knob VALUES (2)")
        conn.execute("CREATE FUNCTION riskco_sleep(v numeric) RETURNS numeric VOLATILE "
                     "LANGUAGE sql AS $$ SELECT pg_sleep((SELECT seconds FROM riskco_knob)); "
                     "SELECT v $$")
        conn.execute("CREATE VIEW riskco_slow AS SELECT company_id, event_time, "
                     "riskco_sleep(value) AS value FROM riskco_rows")
    stack.add_sources(fixture_source={"riskco_slow": "company_id"})


@pytest.fixture(scope="module")
def stack(scheduler_stack: SchedulerStack, shared_stack) -> Any:
    STATE["relay"] = shared_stack.relay
    yield scheduler_stack
    with psycopg.connect(shared_stack.fixture_dsn, autocommit=True) as conn:
        conn.execute("UPDATE riskco_knob SET seconds = 0")  # a render still running ends


def _samples(stack: SchedulerStack) -> dict[str, str]:
    status, text = stack.api.call("GET", "/exports/metrics")
    assert status == 200, text
    return dict(line.rsplit(" ", 1) for line in text.splitlines()
                if line and not line.startswith("#"))


def _until(predicate, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(1)
    return found


def _owed(now: datetime) -> list[tuple[datetime, str, bool]]:
    """outageco's due slots at ``now``: (slot, strip outcome, at risk) — deadline 1 h, risk
    point 30 min (half of it)."""
    slot, owed = STATE["from"] + timedelta(minutes=30), []
    while slot <= now:
        owed.append((slot, "no_run" if slot + timedelta(hours=1) <= now else "due",
                     slot + timedelta(minutes=30) <= now < slot + timedelta(hours=1)))
        slot += timedelta(hours=1)
    return owed


def _outage_view(stack: SchedulerStack) -> tuple[list, dict[str, str], dict[str, Any]]:
    """What ``/exports/metrics`` and the page say, and the slots owed, read at one hour."""
    while True:
        owed = _owed(datetime.now(UTC))
        samples = _samples(stack)
        page = stack.api.ok("GET", "/exports/obligations.json?company=outageco")
        if _owed(datetime.now(UTC)) == owed:  # no slot fell due nor deadline passed meanwhile
            return owed, samples, page


def test_an_outage_shows_as_expected_and_missing_before_any_run_exists(stack):
    # Active again; Airflow keeps the DAG paused (its loader is there: touched, not rewritten).
    stack.write_company("outageco", _outage("active"), sync_loaders=False)
    owed, samples, page = _outage_view(stack)
    assert len(owed) in (3, 4), owed  # 4 only if the module started just before a full hour
    labels = '{company="outageco",schedule="outageco/hourly"}'
    figures = [samples[f"export_{m}{labels}"] for m in ("slots_expected", "slots_missing",
                                                        "slots_missed", "runs_at_risk")]
    assert figures == [str(len(owed)), str(len(owed)),
                       str(sum(o == "no_run" for _, o, _ in owed)),
                       str(sum(r for _, _, r in owed))], samples
    (strip,) = page["schedules"]
    assert (strip["due"]["expected"], strip["due"]["missing"]) == (len(owed), len(owed))
    cells = [(c["slot_utc"], c["outcome"], c["at_risk"]) for c in strip["strip"]
             if c["slot_utc"] >= f"{owed[0][0]:%Y-%m-%dT%H:%M:%SZ}"]
    assert cells == [(f"{s:%Y-%m-%dT%H:%M:%SZ}", o, r) for s, o, r in owed], strip["strip"]
    assert page["runs"]["total"] == 0
    assert stack.dag_runs("widget_export__outageco__hourly") == []  # no run exists at all


def _mails(run_key: str) -> dict[str, int]:
    relay, counts = STATE["relay"], {TEAM: 0, OWNER: 0}
    for message, (_, rcpts) in relay.received():
        part = next((p for p in message.walk() if p.get_content_type() == "text/html"), message)
        if "at risk" in str(message["Subject"]) and run_key in part.get_payload(decode=True).decode():
            for rcpt in rcpts:
                counts[rcpt] = counts.get(rcpt, 0) + 1
    return counts


def test_a_run_at_risk_alerts_once_and_shows_everywhere(stack, clock: SlotClock):
    run_key = f"riskco/daily/{clock.newest:%Y-%m-%dT%H:%M}Z"
    run_id = stack.wait_for_run_id(RISKY, timeout=120)
    _until(lambda: _mails(run_key) == {TEAM: 1, OWNER: 1}, 90, "one at-risk e-mail each")
    # The alert may come before resolve_window registered the run (seconds after it exists).
    _until(lambda: [r for r in stack.ledger_runs() if r["run_key"] == run_key
                    and r["state"] == "rendering"], 90, "the run rendering (slowly)")
    rows = json.loads(stack.exportctl("runs", "--company", "riskco", "--json").stdout)
    mine = [r for r in rows if r["run_key"] == run_key]
    assert [(r["at_risk"], r["delivered_at_utc"]) for r in mine] == [(True, None)], rows
    page = stack.api.ok("GET", "/exports/obligations.json?company=riskco")
    (run,) = [r for r in page["runs"]["runs"] if r["run_key"] == run_key]
    assert run["at_risk"] is True and run["outcome"] in ("running", "waiting"), run
    assert _samples(stack)['export_runs_at_risk{company="riskco",schedule="riskco/daily"}'] \
        == "1"
    with psycopg.connect(stack.env["AIRFLOW_CONN_FIXTURE_SOURCE"], autocommit=True) as conn:
        conn.execute("UPDATE riskco_knob SET seconds = 0")  # it may deliver now
    stack.wait_for_run(RISKY, run_id, timeout=150)
    assert _mails(run_key) == {TEAM: 1, OWNER: 1}
    from export_lib.ledger.notices import list_notices

    ledger = stack.ledger()
    try:
        (notice,) = [n for n in list_notices(ledger.engine, run_key)
                     if n["notice_key"].endswith(":at_risk")]
    finally:
        ledger.engine.dispose()
    assert (notice["state"], notice["claims"], notice["recipients"]) == ("sent", 1,
                                                                         f"{TEAM},{OWNER}")
    after = stack.api.ok("GET", "/exports/obligations.json?company=riskco")
    (run,) = [r for r in after["runs"]["runs"] if r["run_key"] == run_key]
    assert (run["outcome"], run["at_risk"]) == ("on_time", False), run
