"""The runs read model: newest first, filtered and paginated in SQL, a fixed statement count per
page whatever its size, and one deadline verdict for every reader."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from export_lib.errors import ConfigError

HOUR = datetime(2026, 3, 28, 0, 0, tzinfo=UTC)  # acme/hourly-clicks: hourly


@pytest.fixture()
def ledger_with_runs(export_world, tmp_path):
    from export_lib.config.loader import load_catalog
    from export_lib.ledger import open_ledger
    from export_lib.pipeline import RunContext, register_run

    catalog = load_catalog(tmp_path / "dags" / "config")
    ledger = open_ledger()
    ctx = RunContext(origin="test", trigger="scheduled")
    for h in range(30):
        register_run(ledger, catalog.schedule("acme/hourly-clicks"), HOUR + timedelta(hours=h),
                     now=HOUR, ctx=ctx)
    for d in range(3):
        summary = register_run(ledger, catalog.schedule("kiwi-outdoors/six-hourly-orders"),
                               datetime(2026, 3, 20 + d, 19, 0, tzinfo=UTC), now=HOUR, ctx=ctx)
        ledger.skip(summary.run_key, "company is paused; resume it in its config file to export",
                    HOUR)
    return ledger


def _count_statements(engine, call):
    seen: list[str] = []

    def record(conn, cursor, statement, *rest):
        if statement.lstrip().upper().startswith("SELECT"):  # not the BEGIN of SQLite's lock
            seen.append(statement)

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        result = call()
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    return len(seen), result


def test_a_page_costs_the_same_statements_whatever_its_size(ledger_with_runs):
    from export_lib.views.reports import run_filter, runs_page

    engine = ledger_with_runs.engine
    counts = {}
    for limit in (1, 5, 33):
        counts[limit], page = _count_statements(
            engine, lambda limit=limit: runs_page(engine, run_filter(limit=limit), now=HOUR))
        assert len(page.runs) == limit and page.total == 33
    assert set(counts.values()) == {4}, counts  # count, runs, artifacts, deliveries


def test_newest_first_pages_and_filters(ledger_with_runs):
    from export_lib.views.reports import run_filter, runs_page

    engine = ledger_with_runs.engine
    first = runs_page(engine, run_filter(company="acme", limit=10), now=HOUR)
    second = runs_page(engine, run_filter(company="acme", limit=10, offset=10), now=HOUR)
    slots = [r["slot_utc"] for r in first.runs + second.runs]
    assert slots[0] == "2026-03-29T05:00:00Z" and slots == sorted(slots, reverse=True)
    assert len(set(slots)) == 20 and first.total == 30

    skipped = runs_page(engine, run_filter(state="skipped"), now=HOUR)
    assert [r["run_key"] for r in skipped.runs] == [
        f"kiwi-outdoors/six-hourly-orders/2026-03-{d}T19:00Z" for d in (22, 21, 20)]
    assert {r["deadline_status"] for r in skipped.runs} == {"none"}

    window = runs_page(engine, run_filter(company="acme", since=HOUR + timedelta(hours=5),
                                          until=HOUR + timedelta(hours=8)), now=HOUR)
    assert [r["slot_utc"][11:16] for r in window.runs] == ["07:00", "06:00", "05:00"]


def test_deadline_verdicts(ledger_with_runs):
    from export_lib.views.reports import run_filter, runs_page

    later = HOUR + timedelta(hours=40)
    page = runs_page(ledger_with_runs.engine, run_filter(company="acme", limit=2), now=later)
    newest = page.runs[0]
    # hourly-clicks: slot 2026-03-29T05:00Z, deadline slot + 30 min; nothing published at +40 h.
    assert (newest["deadline_utc"], newest["deadline_status"], newest["late_by_minutes"]) == (
        "2026-03-29T05:30:00Z", "overdue", (later - datetime(2026, 3, 29, 5, 30, tzinfo=UTC))
        .total_seconds() // 60)
    early = runs_page(ledger_with_runs.engine, run_filter(company="acme", limit=1), now=HOUR)
    assert early.runs[0]["deadline_status"] == "pending"


def test_bad_filters_name_the_field_and_the_valid_values():
    from export_lib.views.reports import run_filter

    with pytest.raises(ConfigError, match=r"state: Value error, unknown run state 'done'; valid: "
                                          r"registered, reading, rendering"):
        run_filter(state="done")
    with pytest.raises(ConfigError, match=r"limit: Input should be less than or equal to 500"):
        run_filter(limit=100000)


def test_unresolved_deliveries_filter(ledger_with_runs):
    from export_lib.ledger.deliveries import delivery_id, ensure_record
    from export_lib.ledger.records import NewDelivery
    from export_lib.views.reports import run_filter, runs_page

    engine = ledger_with_runs.engine
    key = "acme/hourly-clicks/2026-03-28T03:00Z"
    ensure_record(engine, NewDelivery(
        delivery_id=delivery_id(key, 1, "acme-dir"), run_key=key, artifact_version=1,
        destination_id="acme-dir", destination_type="local", destination_config="{}",
        target="outbox/acme/hourly-clicks", artifact_name="a.csv", artifact_sha256="0" * 64,
        artifact_bytes=1, retry_until=HOUR), now=HOUR)

    page = runs_page(engine, run_filter(unresolved_deliveries=True), now=HOUR)
    assert [r["run_key"] for r in page.runs] == [key] and page.total == 1
    assert [(d["destination"], d["state"], d["attempts"]) for d in page.runs[0]["deliveries"]] == [
        ("acme-dir", "pending", 0)]


def test_a_late_run_shows_deadline_delivered_at_and_late_by(export_world, capsys):
    """A catch-up or backfill run raises no Deadline Alert (ADR 0003/0006) but the ledger shows
    it late: judged on its first acknowledged delivery, in the table and in --json."""
    import json

    from export_lib.cli.commands import run_one
    from export_lib.cli.main import main

    delivered = datetime(2026, 3, 30, tzinfo=UTC)
    run_one(str(export_world.config), "acme/daily-spend", "2026-03-29T05:00Z", now=delivered)
    assert main(["runs", "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)
    assert (run["deadline_utc"], run["delivered_at_utc"], run["deadline_status"],
            run["late_by_minutes"]) == ("2026-03-29T07:00:00Z", "2026-03-30T00:00:00Z", "late",
                                        17 * 60)
    assert main(["runs"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[:6] == ["RUN", "STATE", "DEADLINE", "DELIVERED", "AT", "LATE"]
    assert row.split()[:6] == ["acme/daily-spend/2026-03-29T05:00Z", "ready",
                               "2026-03-29T07:00:00Z", "2026-03-30T00:00:00Z", "1020", "min"]


def test_visible_companies_come_from_readable_dag_ids_and_bound_every_page(ledger_with_runs):
    from export_lib.views.reports import run_filter, runs_page
    from export_lib.views.visibility import companies_of

    readable = {"widget_export__kiwi-outdoors__six-hourly-orders", "manual_export__kiwi-outdoors",
                "demo_feed", "manual_export", "widget_export__"}
    assert companies_of(readable) == {"kiwi-outdoors"}
    # A batched recovery's DAG belongs to its company (a viewer of it sees those periods).
    assert companies_of({"recovery_batch__acme"}) == {"acme"}
    engine = ledger_with_runs.engine
    kiwi = runs_page(engine, run_filter(visible_companies=companies_of(readable), limit=500),
                     now=HOUR)
    assert (kiwi.total, {r["company"] for r in kiwi.runs}) == (3, {"kiwi-outdoors"})
    asked_for_acme = run_filter(company="acme", visible_companies=frozenset({"kiwi-outdoors"}))
    assert runs_page(engine, asked_for_acme, now=HOUR).total == 0
    assert runs_page(engine, run_filter(visible_companies=frozenset()), now=HOUR).total == 0
    assert runs_page(engine, run_filter(limit=500), now=HOUR).total == 33  # None: no restriction
