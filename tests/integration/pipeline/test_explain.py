"""``explain_period`` / ``exportctl explain`` (issue 13 item 7): each branch on a real PostgreSQL
ledger, with the exact paragraph a support person reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from export_lib.pipeline.explain import _span
from tests.integration.pipeline.test_gap_audit import DAYS, NOW, _audit, _export, _register, _write
from tests.world import DAILY_SLOT, build_world


@pytest.fixture()
def world(tmp_path, pg_ledger_database, monkeypatch):
    return build_world(tmp_path / "w", pg_ledger_database.replace("+psycopg", "")).use(monkeypatch)


def _explain(world, catalog, slot, now=NOW, schedule_id="gapco/each", **kw):
    from export_lib.pipeline.explain import explain_facts, explain_period

    schedule = catalog.schedule(schedule_id)
    return explain_period(schedule, slot, explain_facts(world.ledger(), schedule_id, slot),
                          now=now, **kw)


HEAD = "gapco/each, slot 2026-03-28 05:00 UTC (05:00 UTC)"
RUN = ("gapco/each, slot 2026-03-28 05:00 UTC (05:00 UTC), period 2026-03-27 00:00–2026-03-28 "
       "00:00 UTC (run gapco/each/2026-03-28T05:00Z): ")


def test_periods_without_a_run(world):
    catalog = _write(world, _export("each", "each"))
    tomorrow = DAYS[3] + timedelta(days=1)
    assert _explain(world, catalog, tomorrow) == (
        "gapco/each, slot 2026-03-31 05:00 UTC (05:00 UTC): not due yet; it runs in 17 h and "
        "must be delivered by 2026-03-31 07:00 UTC.")
    assert _explain(world, catalog, DAYS[1]) == (
        f"{HEAD}: missed: no run was registered (the scheduler did not create one: an outage or "
        "a paused DAG). Run 'exportctl audit --company gapco' to recover it under recovery=each "
        "(each: backfilled; latest: only the newest missed slot; none: recorded skipped).")
    assert _explain(world, catalog, DAYS[3], now=DAYS[3] + timedelta(minutes=10)) == (
        "gapco/each, slot 2026-03-30 05:00 UTC (05:00 UTC): due 10 min ago and not registered "
        "yet: the scheduler is creating its run. Look at DAG widget_export__gapco__each in "
        "Airflow (Grid view); it must be delivered by 2026-03-30 07:00 UTC.")
    before = datetime(2026, 3, 20, 5, 0, tzinfo=UTC)
    assert _explain(world, catalog, before).endswith(
        "nothing was due: the schedule starts at its first config version (effective_from "
        "2026-03-27 00:00 UTC).")
    paused = _write(world, _export("each", "each"), status="paused")
    assert _explain(world, paused, DAYS[1]) == (
        f"{HEAD}: paused: company gapco is paused in its config file, so no run was created. "
        "Resume it (status: active), then 'exportctl audit --company gapco' recovers or records "
        "the missed slots.")


def test_skipped_unrecoverable_held_running_and_failed(world):
    catalog = _write(world, _export("each", "each"), _export("none", "none"), retention_days=2)
    _audit(world, catalog)
    text = _explain(world, catalog, DAYS[1], schedule_id="gapco/none")
    assert text.startswith("gapco/none, slot 2026-03-28 05:00 UTC (05:00 UTC), period ")
    assert text.endswith("skipped (recorded 2026-03-30 12:00 UTC): recovery=none: missed (no run "
                         "was registered); not exported under recovery=none; for the attention "
                         "of owner@gapco.example.")
    assert _explain(world, catalog, DAYS[1]) == (
        f"{RUN}unrecoverable (recorded 2026-03-30 12:00 UTC): source demo_source keeps 2 days of "
        "data and this period starts 2026-03-27T00:00:00Z, before 2026-03-28T12:00:00Z; not "
        "exported; owner owner@gapco.example notified.")

    ledger = world.ledger()
    key = _register(world, catalog, "gapco/each", DAYS[3]).run_key
    ledger.note(key, "held: late_start=hold: started 3 h after its deadline; an operator must "
                "decide", NOW, reason="late_start=hold")
    assert _explain(world, catalog, DAYS[3]).endswith(
        "held since 2026-03-30 12:00 UTC: late_start=hold: started 3 h after its deadline; an "
        "operator must decide To export it anyway: 'exportctl release "
        "gapco/each/2026-03-30T05:00Z', then clear its resolve_window task in DAG "
        "widget_export__gapco__each.")
    ledger.release(key, NOW + timedelta(minutes=1))
    ledger.claim_attempt(key, origin="airflow:x/y/render/try1",
                         staging_uri=lambda a: f"file:///tmp/{a}", now=NOW + timedelta(minutes=2))
    assert _explain(world, catalog, DAYS[3]).endswith(
        "running: reading since 2026-03-30 12:02 UTC, attempt 1 from airflow:x/y/render/try1; "
        "deadline 2026-03-30 07:00 UTC.")
    ledger.fail(key, None, "SourceError: the source is down", NOW + timedelta(minutes=3))
    assert _explain(world, catalog, DAYS[3]).endswith(
        "failed at 2026-03-30 12:03 UTC: SourceError: the source is down. Airflow retries the "
        "failed task (10 min, doubling) until 2026-04-04 05:00 UTC; see its up_for_retry state "
        "in DAG widget_export__gapco__each.")
    assert _explain(world, catalog, DAYS[3], next_retry=NOW + timedelta(minutes=13)).endswith(
        "The next retry is at 2026-03-30 12:13 UTC.")
    assert _explain(world, catalog, DAYS[3], now=DAYS[3] + timedelta(days=6)).endswith(
        "Its retries ended 2026-04-04 05:00 UTC; fix the cause and clear the failed task in DAG "
        "widget_export__gapco__each.")


def test_a_delivered_period_names_each_destination_and_its_lateness(world):
    """The schedule's only run was registered long after its deadline (a first catch-up): its
    delivery is not called late (ADR 0029). Had the schedule been deployed before that
    deadline, the same delivery is late by the span."""
    import dataclasses

    from export_lib.pipeline.explain import explain_facts, explain_period

    world.run()  # acme/daily-spend, 2026-03-29T05:00Z, end to end (real time: late)
    result = world.exportctl("explain", "--schedule", "daily-spend", "--company", "acme",
                             "--date", "2026-03-29")
    assert result.returncode == 0, result.stderr
    (run,) = world.runs()
    (delivery,) = run["deliveries"]
    acked = datetime.fromisoformat(delivery["acknowledged_at_utc"])
    deadline = datetime.fromisoformat(run["deadline_utc"])
    late = acked - deadline
    minutes = int(late.total_seconds() // 60)
    days, rest = divmod(minutes, 1440)
    hours, mins = divmod(rest, 60)
    # Zero parts are left out ("247 d 7 min"; CI at 07:07 UTC expected "247 d 0 h 7 min").
    span = " ".join([f"{days} d"] * bool(days) + [f"{hours} h"] * bool(hours)
                    + [f"{mins} min"] * bool(mins))
    art = run["artifacts"][0]
    head = (
        "acme/daily-spend, slot 2026-03-29 07:00 CEST (05:00 UTC), period 2026-03-27 23:00–"
        f"2026-03-28 23:00 UTC (run acme/daily-spend/{DAILY_SLOT}): it was exported: artifact v1 "
        f"({art['rows']} rows, sha256 {art['sha256'][:12]}) published at "
        f"{art['generated_at_utc'][:10]} {art['generated_at_utc'][11:16]} UTC. delivered to "
        f"acme-dir (v1) at {acked:%Y-%m-%d %H:%M} UTC, ")
    tail = ". The deadline was 2026-03-29 07:00 UTC."
    assert result.stdout.strip() == (
        head + "after a deadline that passed before this schedule was deployed (not tracked: "
        "not late)" + tail)

    schedule = world.schedule("acme/daily-spend")
    slot = datetime.fromisoformat(DAILY_SLOT.replace("Z", "+00:00"))
    facts = explain_facts(world.ledger(), "acme/daily-spend", slot)
    assert facts.first_deployed is not None and facts.first_deployed > deadline
    deployed_before = dataclasses.replace(facts, first_deployed=deadline - timedelta(days=1))
    assert explain_period(schedule, slot, deployed_before, now=acked) == (
        head + f"late by {span}" + tail)


def test_exportctl_explain_refuses_an_unknown_schedule_or_a_bad_date(world):
    bad = world.exportctl("explain", "--schedule", "acme/daily-spnd", "--date", "2026-03-29")
    assert bad.returncode == 2
    assert "unknown schedule 'acme/daily-spnd'" in bad.stderr and "acme/daily-spend" in bad.stderr
    bad = world.exportctl("explain", "--schedule", "acme/daily-spend", "--date", "yesterday")
    assert bad.returncode == 2 and "--date 'yesterday' is not a date" in bad.stderr
    off = world.exportctl("explain", "--schedule", "acme/daily-spend", "--date",
                          "2026-03-29T06:00Z")
    assert off.returncode == 2 and "is not a slot of acme/daily-spend" in off.stderr
    hourly = world.exportctl("explain", "--schedule", "acme/hourly-clicks", "--date",
                             "2026-03-29")
    assert hourly.returncode == 0
    assert len(hourly.stdout.strip().split("\n\n")) == 23  # the 23-hour day of the spring change


def test_a_revoked_artifact_and_an_operator_pause_are_explained(world):
    """The controls (issue 13 item 4) in the paragraph: a revoked newest artifact, and a pause
    in force for a slot not due yet and for one with no run."""
    from export_lib.pipeline.controls import pause, revoke_artifact

    world.run()  # acme/daily-spend, 2026-03-29T05:00Z, delivered
    ledger = world.ledger()
    key = f"acme/daily-spend/{DAILY_SLOT}"
    at = datetime(2026, 3, 30, 9, 0, tzinfo=UTC)
    assert revoke_artifact(ledger, key, who="ops@example.com", why="wrong currency",
                           now=at).changed
    text = world.exportctl("explain", "--schedule", "daily-spend", "--company", "acme",
                           "--date", "2026-03-29").stdout.strip()
    assert text.endswith(
        "artifact v1 was revoked by ops@example.com at 2026-03-30T09:00:00Z: wrong currency "
        "(at 2026-03-30 09:00 UTC); later deliveries are refused. Regenerate the period to "
        "export it again."), text

    assert pause(ledger, "acme", "acme/daily-spend", who="ops@example.com",
                 why="customer migrating", now=at).changed
    stamp = "paused by ops@example.com at 2026-03-30T09:00:00Z: customer migrating"
    later = world.exportctl("explain", "--schedule", "daily-spend", "--company", "acme",
                            "--date", "2099-01-02").stdout.strip()
    assert later.endswith(f"It is paused (schedule acme/daily-spend {stamp}), so it will be "
                          "recorded skipped unless 'exportctl unpause --company acme' comes "
                          "first."), later
    missed = world.exportctl("explain", "--schedule", "daily-spend", "--company", "acme",
                             "--date", "2026-03-28").stdout.strip()
    assert missed.endswith(f"paused: schedule acme/daily-spend {stamp}. Its slots are recorded "
                           "skipped while the pause lasts; 'exportctl unpause --company acme' "
                           "ends it, then 'exportctl audit' recovers the missed slots."), missed


@pytest.mark.parametrize(("delta", "text"), [
    (timedelta(days=247, minutes=7), "247 d 7 min"),
    (timedelta(days=2, hours=3), "2 d 3 h"),
    (timedelta(days=1, hours=3, minutes=5, seconds=59), "1 d 3 h 5 min"),
    (timedelta(hours=2), "2 h"),
    (timedelta(seconds=59), "0 min"),
    (timedelta(minutes=-5), "0 min"),
])
def test_lateness_is_written_without_zero_parts(delta, text):
    assert _span(delta) == text
