"""pipeline.start_run's start policies against a real (SQLite) ledger: recovery bookkeeping,
late start, paused companies and revoked owners (the DAG and ``exportctl run`` both call it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import yaml

from export_lib.errors import AuthorizationError, RunHeldError

HOUR = datetime(2026, 3, 28, 10, 0, tzinfo=UTC)  # acme/hourly-clicks: hourly, recovery=latest


def _resolve(config, schedule_id, slot, now, trigger="scheduled"):
    from export_lib.config.loader import load_catalog
    from export_lib.ledger import open_ledger
    from export_lib.pipeline import RunContext, start_run

    schedule = load_catalog(config).schedule(schedule_id)
    return start_run(open_ledger(), schedule, slot, now=now,
                     ctx=RunContext(origin="test", trigger=trigger))


def _edit(config, company, change):
    path = config / f"{company}.yaml"
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data))


def test_recovery_latest_records_the_skipped_slots(export_world, tmp_path):
    from export_lib.ledger import open_ledger

    config = tmp_path / "dags" / "config"
    _resolve(config, "acme/hourly-clicks", HOUR, HOUR)
    later = HOUR + timedelta(hours=4)
    _resolve(config, "acme/hourly-clicks", later, later)
    runs = {r.slot: r for r in open_ledger().list_runs("acme", "acme/hourly-clicks")}
    assert sorted(runs) == [HOUR + timedelta(hours=h) for h in range(5)]
    skipped = [runs[HOUR + timedelta(hours=h)] for h in (1, 2, 3)]
    assert {r.state for r in skipped} == {"skipped"}
    assert skipped[0].reason == ("recovery=latest: missed while the scheduler was down; the newer "
                                 "slot 2026-03-28T14:00Z was exported instead")
    assert runs[later].state == "registered"


def test_late_start_hold_waits_for_release(export_world, tmp_path):
    from export_lib.ledger import open_ledger

    config = tmp_path / "dags" / "config"
    _edit(config, "acme", lambda d: d["widget_exports"][0].update(late_start="hold"))
    slot = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)
    late = slot + timedelta(hours=3)  # deadline is slot + 2 h
    with pytest.raises(RunHeldError, match=r"late_start=hold: started 1 h 00 min after its "
                                           r"deadline 2026-03-29T07:00Z"):
        _resolve(config, "acme/daily-spend", slot, late)
    open_ledger().release("acme/daily-spend/2026-03-29T05:00Z", late, who="ops@acme.example")
    summary = _resolve(config, "acme/daily-spend", slot, late + timedelta(minutes=5))
    assert summary.skip_reason is None
    assert summary.late_reason.startswith("late_start=hold: started 1 h 05 min after")


def test_paused_company_and_revoked_owner(export_world, tmp_path):
    from export_lib.ledger import open_ledger

    config = tmp_path / "dags" / "config"
    slot = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)
    _edit(config, "acme", lambda d: d["company"].update(status="paused"))
    summary = _resolve(config, "acme/hourly-clicks", slot, slot)
    assert summary.skip_reason == "company is paused; resume it in its config file to export"
    assert open_ledger().get_run(summary.run_key).state == "skipped"

    _edit(config, "acme", lambda d: (d["company"].update(status="active"),
                                     d["widget_exports"][0].update(owner="leaver@acme.example")))
    slot2 = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)
    with pytest.raises(AuthorizationError, match="owner leaver@acme.example is no longer "
                                                 "authorised for company acme"):
        _resolve(config, "acme/daily-spend", slot2, slot2)


def test_a_manual_dag_refuses_a_request_for_another_company_and_records_the_requester(
        export_world, tmp_path):
    from export_lib.ledger import open_ledger
    from export_lib.pipeline import RunContext, start_manual

    config = str(tmp_path / "dags" / "config")
    params = {"company": "kiwi-outdoors", "base_export": "kiwi-outdoors/six-hourly-orders",
              "reason": "audit", "window_start": "2026-03-27T00:00:00Z",
              "window_end": "2026-03-28T00:00:00Z"}
    ledger, now = open_ledger(), datetime(2026, 3, 30, 12, tzinfo=UTC)
    kwargs = {"run_id": "manual__1", "requested_at": now, "now": now,
              "ctx": RunContext(origin="test", trigger="manual")}
    with pytest.raises(AuthorizationError, match=r"manual_export__acme: company: 'kiwi-outdoors' "
                       r"is not this DAG's company.*\(nothing was registered\)"):
        start_manual(ledger, config, params, company="acme", requested_by="mallory", **kwargs)
    assert ledger.list_runs("kiwi-outdoors") == []
    summary = start_manual(ledger, config, params, company="kiwi-outdoors",
                           requested_by="kiwi-analyst", **kwargs)
    events = ledger.events(summary.run_key)
    assert any((e["detail"] or "").startswith("manual export requested by kiwi-analyst (audit)")
               for e in events), events
