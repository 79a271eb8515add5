"""A period no slot reports because of a hand-written timing switch is exported once by the
gap audit (issue 47 item 2) on a real PostgreSQL ledger.

acme/daily-spend moves from 09:00 to 07:00 Berlin with ``effective_from`` written by hand at
08:00 on 27 March: the old 09:00 slot of the 27th (which would report the 26th) is dropped, and
the first 07:00 slot (the 28th) reports the 27th. ``exportctl validate`` names the 26th; the
switch is kept. The audit plans one ``recover_period`` for the 26th through the manual lane with
a run id derived from the period; the manual lane's run (what ``manual_export__acme`` does with
it) exports it; a second audit plans nothing for it, a second trigger of the same run id finds
the same run, and the 26th has exactly one ready run and one delivered file. Airflow's REST API
is a small HTTP server answering as Airflow does (201, then 409 for a known run id)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from export_lib.config.loader import load_catalog
from tests.world import DAILY, build_world

NOW = datetime(2026, 3, 30, 12, 0, tzinfo=UTC)
SINCE = NOW - timedelta(days=7)
ANCHOR = "    export_hour: 7            # 07:00 Berlin time, every day\n"
SWITCH = ("    effective_from: 2026-03-27T08:00:00+01:00  # by hand, between 09:00 and 07:00\n"
          "    history:\n"
          "      - {export_hour: 9}\n")
HOLE = (datetime(2026, 3, 25, 23, 0, tzinfo=UTC), datetime(2026, 3, 26, 23, 0, tzinfo=UTC))
RUN_ID = "recover__acme.daily-spend__20260325T230000Z__20260326T230000Z"


class AirflowDagRuns(ThreadingHTTPServer):
    """An Airflow that has parsed only ``manual_export__acme``: ``POST …/dagRuns`` answers 201
    for a new ``dag_run_id`` and 409 for one it has (every trigger recorded); anything about
    another DAG (the audit's in-flight look-up and backfill dry run) is a 404."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[tuple[str, dict]] = []
        self.run_ids: set[str] = set()


class _Handler(BaseHTTPRequestHandler):
    server: AirflowDagRuns

    def _answer(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._answer(404, {"detail": "DAG not found"})

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if self.path != "/api/v2/dags/manual_export__acme/dagRuns":
            self._answer(404, {"detail": "DAG not found"})
            return
        self.server.requests.append((self.path, body))
        known = body["dag_run_id"] in self.server.run_ids
        self.server.run_ids.add(body["dag_run_id"])
        self._answer(409 if known else 201, {"detail": "exists"} if known else
                     {"dag_run_id": body["dag_run_id"]})

    def log_message(self, *args) -> None:  # quiet
        pass


@pytest.fixture()
def airflow() -> Iterator[AirflowDagRuns]:
    server = AirflowDagRuns()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture()
def world(tmp_path, pg_ledger_database, monkeypatch):
    world = build_world(tmp_path / "w", pg_ledger_database.replace("+psycopg", "")).use(
        monkeypatch)
    path = world.config / "acme.yaml"
    text = path.read_text()
    assert ANCHOR in text
    path.write_text(text.replace(ANCHOR, ANCHOR + SWITCH, 1))
    return world


def _audit(world, catalog, api=None):
    from export_lib.pipeline.audit_apply import run_audit

    return run_audit(catalog, world.ledger(), since=SINCE, until=NOW, now=NOW, company="acme",
                     api=api)


def _manual_lane(world, params: dict, run_id: str):
    """What manual_export__acme's tasks do with the triggered run's conf."""
    from export_lib.pipeline import (
        RunContext,
        deliver_run,
        publish_run,
        render_run,
        schedule_of,
        start_manual,
    )

    ledger, store = world.ledger(), world.store
    started = start_manual(ledger, str(world.config), params, run_id=run_id, requested_at=NOW,
                           now=NOW, ctx=RunContext(origin="test", trigger="manual"),
                           company="acme", requested_by="gap-audit")
    if not started.created:
        return started
    rendered = render_run(ledger, store, started.run_key, now=NOW)
    publish_run(ledger, store, started.run_key, rendered["attempt_id"], now=NOW,
                columns=rendered["columns"])
    for destination in schedule_of(ledger.get_run(started.run_key)).destinations:
        deliver_run(ledger, started.run_key, destination.id, now=NOW,
                    config_dir=str(world.config))
    return started


def test_a_period_no_slot_reports_is_exported_once_by_the_gap_audit(world, airflow):
    from export_lib.pipeline.backfills import AirflowApi
    from export_lib.pipeline.switch_check import check_switches

    validated = world.exportctl("validate", "--no-ledger", str(world.config))
    assert validated.returncode == 0, validated.stdout + validated.stderr
    errors, warnings = check_switches(load_catalog(world.config).schedules, world.config,
                                      now=NOW)  # validate's check on the day of the audit
    assert errors == [] and len(warnings) == 1, warnings
    assert ("period 2026-03-26 (Europe/Berlin, 2026-03-25T23:00:00Z .. 2026-03-26T23:00:00Z) "
            "reported by no slot") in warnings[0]
    assert warnings[0].endswith("'effective_from: 2026-03-28T06:00:00Z' (2026-03-28 07:00 "
                                "Europe/Berlin) would have avoided it, but the switch is in "
                                "effect: moving it now moves slots already due, so keep it"), \
        warnings[0]
    assert world.run(DAILY, "2026-03-26T08:00Z")["state"] == "ready"  # old 09:00: the 25th
    assert world.run(DAILY, "2026-03-28T06:00Z")["state"] == "ready"  # new 07:00: the 27th
    catalog = load_catalog(world.config)
    api = AirflowApi(f"http://127.0.0.1:{airflow.server_address[1]}", "", "")

    first = _audit(world, catalog, api)

    (recover,) = first.plan.of("recover_period")
    assert (recover.gap.period, recover.gap.slot, recover.gap.run_id) == (
        HOLE, datetime(2026, 3, 27, 8, 0, tzinfo=UTC), RUN_ID)
    assert recover.reason == ("reported by no slot after the timing switch at "
                              "2026-03-27T07:00:00Z; exported once through manual_export__acme "
                              f"(run {RUN_ID})")
    assert first.recoveries == [(RUN_ID, "requested")]
    ((path, body),) = airflow.requests
    assert path == "/api/v2/dags/manual_export__acme/dagRuns"
    assert body["dag_run_id"] == RUN_ID and body["logical_date"] is None
    assert {k: body["conf"][k] for k in ("company", "base_export", "window_start",
                                         "window_end")} == {
        "company": "acme", "base_export": DAILY, "window_start": "2026-03-25T23:00:00Z",
        "window_end": "2026-03-26T23:00:00Z"}

    # Before the manual run is registered, the audit asks again: Airflow has the run id.
    queued = _audit(world, catalog, api)
    assert (queued.recoveries, queued.changed) == ([(RUN_ID, "already requested")], 0)

    manual = _manual_lane(world, body["conf"], RUN_ID)
    assert manual.created and world.ledger().get_run(manual.run_key).state == "ready"
    again = _manual_lane(world, body["conf"], RUN_ID)  # a cleared task, a second worker
    assert (again.created, again.run_key) == (False, manual.run_key)

    after = _audit(world, catalog, api)
    assert after.plan.of("recover_period") == [] and after.recoveries == []
    assert len(airflow.requests) == 2

    ready = [r for r in world.ledger().list_runs("acme")
             if r.state == "ready" and (r.window_start, r.window_end) == HOLE]
    assert [r.run_key for r in ready] == [manual.run_key]
    files = [p for p in world.visible_files()
             if "/outbox/" in p and "__2026-03-26__" in p and p.endswith(".csv")]
    assert len(files) == 1, files
