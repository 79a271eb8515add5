"""The gap audit (export_lib.pipeline.audit / audit_apply, ADR 0009) on a real PostgreSQL ledger:
each recovery policy, slots in flight, unrecoverable periods, idempotence. Airflow is not asked
here (``api=None``: backfills are planned, not requested); tests/system/scheduler/test_gap_audit.py
requests them from a real scheduler."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from tests.world import build_world

NOW = datetime(2026, 3, 30, 12, 0, tzinfo=UTC)
SINCE = NOW - timedelta(days=7)
START = "2026-03-27T00:00:00Z"  # effective_from: daily slots 27, 28, 29, 30 are due by NOW
DAYS = [datetime(2026, 3, d, 5, 0, tzinfo=UTC) for d in (27, 28, 29, 30)]


def _export(export_id: str, recovery: str, **extra) -> dict:
    return {"id": export_id, "export_hour": 5, "interval_hours": 24, "effective_from": START,
            "window": {"kind": "calendar_day"}, "recovery": recovery,
            "query": {"source": "demo_source", "table": "widget_metrics",
                      "columns": ["company_id", "widget_id", "event_time", "value"],
                      "timestamp_column": "event_time", "tenant_column": "company_id"},
            "destinations": [{"id": "box", "type": "local", "path": f"outbox/gapco/{export_id}"}],
            **extra}


def _company(*exports: dict, status: str = "active") -> dict:
    return {"company": {"id": "gapco", "name": "Gap Co", "timezone": "UTC",
                        "owner": "owner@gapco.example", "status": status},
            "widget_exports": list(exports)}


@pytest.fixture()
def world(tmp_path, pg_ledger_database, monkeypatch):
    return build_world(tmp_path / "w", pg_ledger_database.replace("+psycopg", "")).use(monkeypatch)


def _write(world, *exports, status="active", retention_days=None):
    (world.config / "gapco.yaml").write_text(yaml.safe_dump(_company(*exports, status=status)))
    if retention_days is not None:
        path = world.config / "defaults.yaml"
        data = yaml.safe_load(path.read_text())
        data["sources"]["demo_source"]["retention_days"] = retention_days
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    from export_lib.config.loader import load_catalog

    catalog = load_catalog(world.config)
    assert catalog.ok, catalog.error_lines
    return catalog


def _audit(world, catalog, now=NOW, dry_run=False, **kw):
    from export_lib.pipeline.audit_apply import run_audit

    return run_audit(catalog, world.ledger(), since=SINCE, until=now, now=now, company="gapco",
                     dry_run=dry_run, **kw)


def _plan(world, catalog, now=NOW, active=None):
    from export_lib.pipeline.audit import find_gaps, plan_audit

    found, notes = find_gaps(catalog, world.ledger(), since=SINCE, until=now, now=now,
                             company="gapco")
    return plan_audit(found, since=SINCE, until=now, now=now, active=active, notes=notes)


def _register(world, catalog, schedule_id, slot):
    from export_lib.pipeline import RunContext, register_run

    return register_run(world.ledger(), catalog.schedule(schedule_id), slot, now=NOW,
                        ctx=RunContext(origin="test", trigger="scheduled"))


def _states(world, schedule_id):
    return {r.slot: (r.state, r.reason, r.trigger)
            for r in world.ledger().list_runs("gapco", schedule_id)}


def test_recovery_each_plans_one_backfill_over_every_missed_slot(world):
    catalog = _write(world, _export("each", "each"))
    _register(world, catalog, "gapco/each", DAYS[1])
    plan = _plan(world, catalog)
    assert [(a.action, a.gap.slot) for a in plan.actions] == [
        ("backfill", DAYS[0]), ("backfill", DAYS[2]), ("backfill", DAYS[3])]
    assert {d: [g.slot for g in gs] for d, gs in plan.backfills.items()} == {
        "widget_export__gapco__each": [DAYS[0], DAYS[2], DAYS[3]]}
    result = _audit(world, catalog)  # no Airflow API: planned, not requested, nothing recorded
    assert result.not_requested == ["widget_export__gapco__each"]
    assert result.changed == 0 and result.recorded == []
    assert set(_states(world, "gapco/each")) == {DAYS[1]}


def test_recovery_latest_backfills_the_newest_and_records_the_others_superseded(world):
    catalog = _write(world, _export("latest", "latest"))
    _register(world, catalog, "gapco/latest", DAYS[1])
    result = _audit(world, catalog)
    assert [(a.action, a.gap.slot) for a in result.plan.actions] == [
        ("skip", DAYS[0]), ("skip", DAYS[2]), ("backfill", DAYS[3])]
    states = _states(world, "gapco/latest")
    assert states[DAYS[0]] == ("skipped", "superseded by a later slot under recovery=latest "
                               "(2026-03-30T05:00Z); found missing by the gap audit", "audit")
    assert states[DAYS[2]][0] == "skipped" and DAYS[3] not in states
    assert result.summary() == ("2 change(s): 2 gap(s) recorded in the ledger (0 unrecoverable), "
                                "0 backfill run(s) requested from Airflow")
    again = _audit(world, catalog)
    assert [(a.action, a.gap.slot) for a in again.plan.actions] == [("backfill", DAYS[3])]
    assert again.changed == 0
    assert again.summary().startswith("nothing changed: 1 gap(s) found")
    assert _states(world, "gapco/latest") == states


def test_recovery_latest_when_a_later_slot_ran_records_every_gap_superseded(world):
    catalog = _write(world, _export("latest", "latest"))
    _register(world, catalog, "gapco/latest", DAYS[3])
    plan = _plan(world, catalog)
    assert [(a.action, a.gap.slot) for a in plan.actions] == [
        ("skip", DAYS[0]), ("skip", DAYS[1]), ("skip", DAYS[2])]


def test_recovery_none_records_every_gap_skipped_with_the_reason_once(world):
    catalog = _write(world, _export("none", "none"))
    result = _audit(world, catalog)
    assert len(result.recorded) == 4
    states = _states(world, "gapco/none")
    assert sorted(states) == DAYS
    assert {s for s, _, _ in states.values()} == {"skipped"}
    assert states[DAYS[0]][1] == ("recovery=none: missed (no run was registered); not exported "
                                  "under recovery=none; for the attention of owner@gapco.example")
    events = world.ledger().events("gapco/none/2026-03-27T05:00Z")
    assert [(e["from_state"], e["to_state"]) for e in events] == [(None, "registered"),
                                                                  ("registered", "skipped")]
    again = _audit(world, catalog)
    assert again.plan.actions == () and again.changed == 0
    assert again.summary() == ("nothing changed: 0 gap(s) found, every one already recorded, "
                               "requested or in flight")
    assert world.ledger().events("gapco/none/2026-03-27T05:00Z") == events


def test_slots_in_flight_are_never_touched(world):
    from export_lib.ledger import open_ledger

    catalog = _write(world, _export("none", "none"))
    # a registered run being rendered: not a gap; its state and events stay as they are
    key = _register(world, catalog, "gapco/none", DAYS[1]).run_key
    ledger = open_ledger()
    ledger.claim_attempt(key, origin="test", staging_uri=lambda a: f"file:///tmp/{a}", now=NOW)
    before = ledger.events(key)
    # a DAG run Airflow is running for the 29th, not registered in the ledger yet
    active = {"widget_export__gapco__none": {DAYS[2]}}
    plan = _plan(world, catalog, active=active)
    assert [(a.action, a.gap.slot) for a in plan.actions] == [
        ("skip", DAYS[0]), ("untouched", DAYS[2]), ("skip", DAYS[3])]
    from export_lib.pipeline.audit_apply import apply_audit

    result = apply_audit(plan, ledger, catalog, now=NOW, api=None)
    assert sorted(result.recorded) == ["gapco/none/2026-03-27T05:00Z",
                                       "gapco/none/2026-03-30T05:00Z"]
    states = _states(world, "gapco/none")
    assert DAYS[2] not in states and states[DAYS[1]][0] == "reading"
    assert ledger.events(key) == before


def test_the_current_slot_is_left_to_the_scheduler_until_its_deadline(world):
    catalog = _write(world, _export("none", "none", deadline="2h"))
    early = datetime(2026, 3, 30, 6, 0, tzinfo=UTC)  # slot 05:00, deadline 07:00
    assert [a.gap.slot for a in _plan(world, catalog, now=early).actions] == DAYS[:3]
    late = datetime(2026, 3, 30, 7, 0, 1, tzinfo=UTC)
    assert [a.gap.slot for a in _plan(world, catalog, now=late).actions] == DAYS


def test_periods_past_source_retention_are_unrecoverable_and_the_owner_notified(world, caplog):
    # the source keeps 2 days: windows starting before 2026-03-28T12:00Z cannot be rebuilt
    catalog = _write(world, _export("each", "each"), _export("latest", "latest"),
                     retention_days=2)
    notified = []
    caplog.set_level(logging.WARNING, logger="export_lib")
    result = _audit(world, catalog, notify=lambda gap, reason: notified.append(gap.label))
    each = [(a.action, a.gap.slot) for a in result.plan.actions if a.gap.schedule_id.endswith("each")]
    assert each == [("unrecoverable", DAYS[0]), ("unrecoverable", DAYS[1]),
                    ("unrecoverable", DAYS[2]), ("backfill", DAYS[3])]
    latest = [(a.action, a.gap.slot) for a in result.plan.actions
              if a.gap.schedule_id.endswith("latest")]
    assert latest == [("skip", d) for d in DAYS[:3]] + [("backfill", DAYS[3])]
    assert notified == [f"gapco/each/2026-03-{d}T05:00Z" for d in (27, 28, 29)]
    state, reason, _ = _states(world, "gapco/each")[DAYS[0]]
    assert state == "skipped"
    assert reason == ("unrecoverable: source demo_source keeps 2 days of data and this period "
                      "starts 2026-03-26T00:00:00Z, before 2026-03-28T12:00:00Z; not exported; "
                      "owner owner@gapco.example notified")
    events = world.ledger().events("gapco/each/2026-03-27T05:00Z")
    assert events[-1]["detail"] == f"owner notified: owner@gapco.example: {reason}"
    lines = [r.getMessage() for r in caplog.records if "UNRECOVERABLE" in r.getMessage()]
    assert lines[0] == (f"company=gapco schedule=gapco/each period=2026-03-27T05:00Z: "
                        f"UNRECOVERABLE, owner owner@gapco.example notified: {reason}")
    assert len(lines) == 3
    assert _audit(world, catalog).changed == 0


def test_dry_run_changes_nothing_and_paused_or_unanchored_schedules_are_noted(world):
    catalog = _write(world, _export("none", "none"),
                     {**_export("fresh", "none"), "effective_from": None})
    result = _audit(world, catalog, dry_run=True)
    assert not result.applied and len(result.plan.actions) == 4
    assert result.summary().startswith("dry run: 4 gap(s) found; nothing was changed")
    assert world.ledger().list_runs("gapco") == []
    assert result.plan.notes == ("gapco/fresh: no effective_from and no run yet; nothing is "
                                 "expected before its first run (set effective_from to audit "
                                 "earlier)",)
    paused = _write(world, _export("none", "none"), status="paused")
    result = _audit(world, paused)
    assert result.plan.actions == () and world.ledger().list_runs("gapco") == []
    assert result.plan.notes[0].startswith("gapco/none: company gapco is paused; not audited")


def test_exportctl_audit_prints_the_plan_and_applies_it_once(world):
    _write(world, _export("none", "none"))
    first = world.exportctl("audit", "--company", "gapco", "--since", "2026-03-20",
                            "--config", str(world.config), "--no-airflow")
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    # real time: every daily slot from effective_from to today is a gap
    assert lines[0].startswith("skip          gapco/none/2026-03-27T05:00Z  recovery=none: ")
    assert lines[-1].endswith("gap(s) recorded in the ledger (0 unrecoverable), 0 backfill "
                              "run(s) requested from Airflow")
    again = world.exportctl("audit", "--company", "gapco", "--since", "2026-03-20", "--json",
                            "--config", str(world.config), "--no-airflow")
    import json

    assert json.loads(again.stdout)["changed"] == 0
    no_api = world.exportctl("audit", "--company", "gapco", "--config", str(world.config))
    assert no_api.returncode == 1
    assert "connection 'export_airflow_api' is not defined: set " \
           "AIRFLOW_CONN_EXPORT_AIRFLOW_API" in no_api.stderr
    dry = world.exportctl("audit", "--company", "gapco", "--config", str(world.config),
                          "--dry-run")
    assert dry.returncode == 0 and "the plan does not know Airflow's running slots" in dry.stderr
    assert dry.stdout.strip().splitlines()[-1] == ("dry run: 0 gap(s) found; nothing was "
                                                   "changed (0 to backfill, 0 to record skipped, "
                                                   "0 unrecoverable, 0 in flight)")
    unknown = world.exportctl("audit", "--company", "nope", "--config", str(world.config))
    assert unknown.returncode == 2
    assert "unknown company 'nope'" in unknown.stderr


def test_the_api_client_reads_the_export_airflow_api_connection():
    from export_lib.errors import ConfigError
    from export_lib.pipeline.backfills import AirflowApi
    from export_lib.source.connections import parse_connection

    api = AirflowApi.from_connection(parse_connection(
        "export_airflow_api", "http://admin:s3cret@localhost:28080"))
    assert (api.base_url, api.username, api.password) == ("http://localhost:28080", "admin",
                                                          "s3cret")
    based = AirflowApi.from_connection(parse_connection(
        "export_airflow_api", '{"conn_type": "http", "login": "u", "password": "p", '
                              '"extra": {"base_url": "https://airflow.example/"}}'))
    assert based.base_url == "https://airflow.example"
    with pytest.raises(ConfigError, match="connection 'export_airflow_api' has no host: set it "
                                          "to the API server"):
        AirflowApi.from_connection(parse_connection("export_airflow_api", '{"conn_type": "http"}'))
