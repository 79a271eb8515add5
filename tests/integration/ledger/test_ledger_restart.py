"""The ledger's PostgreSQL restarts (``pg_ctl stop -m fast``, down for a while, started again)
while periods are registering, rendering, publishing and delivering.

The ledger is a PostgreSQL instance of this module's own (``initdb``), so stopping it touches
no other test; the source is a database on the session's server whose queries sleep, so renders
are in flight when the ledger goes. Each period is driven by a thread calling the stage
functions the operators call, retrying a retryable error as Airflow's task retry would (from
render on: each stage is idempotent on the run key). Every call either waits the outage out
(EXPORT_LEDGER_RECONNECT_SECONDS) or fails with one LedgerUnavailable line; afterwards every
period has exactly one artifact and one acknowledged delivery per destination, whose file at
the destination has the artifact's sha256.

Sizes: ``LEDGER_OUTAGE_SECONDS`` (15 in make test, 120 in make acceptance) and
``LEDGER_RESTART_PERIODS`` (hourly periods; 6 and 24).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest

from export_lib.checksums import sha256_file
from export_lib.errors import ExportError, LedgerUnavailable
from export_lib.ledger import deliveries as rec
from export_lib.ledger import open_ledger
from export_lib.pipeline import (
    deliver_run,
    publish_run,
    register_run,
    render_run,
    slot_at_or_before,
)
from export_lib.pipeline.stages import captured_destinations
from export_lib.source.connections import parse_connection
from export_lib.source.demo import seed_source
from tests.services.postgres import (
    PostgresServer,
    pause_postgres,
    resume_postgres,
    scratch_database,
    start_postgres,
    stop_postgres,
)
from tests.world import COMPANIES, SEEDED_AT, World, build_world

OUTAGE = float(os.environ.get("LEDGER_OUTAGE_SECONDS", "15"))
PERIODS = int(os.environ.get("LEDGER_RESTART_PERIODS", "6"))
# < OUTAGE: calls early in the outage give up (one line), later ones wait it out
RECONNECT = max(2, int(OUTAGE * 2 / 3))
LEASE = 3  # seconds: a render the outage stranded is taken over this soon after
HEARTBEAT = 1  # seconds: a delivery the outage stranded is taken over 4 beats after its last
UNAVAILABLE = re.compile(r"^the export ledger at postgresql://127\.0\.0\.1:\d+ is unavailable: "
                         r"[^\n]+$")
GAVE_UP = re.compile(r"; [\w ]+ gave up after (\d+) s of reconnecting "
                     rf"\(EXPORT_LEDGER_RECONNECT_SECONDS={RECONNECT}\)")


@pytest.fixture(scope="module")
def own_ledger_server() -> Iterator[PostgresServer]:
    server = start_postgres()
    try:
        yield server
    finally:
        stop_postgres(server)


def _slow_source(dsn: str, seconds: float) -> None:
    """The demo tables behind views whose every query sleeps ``seconds`` first."""
    seed_source(parse_connection("demo_source", dsn), COMPANIES, now=SEEDED_AT, days=3)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in ("widget_metrics", "channel_metrics"):
            conn.execute(f"ALTER TABLE {table} RENAME TO {table}_base")
            conn.execute(f"CREATE VIEW {table} AS SELECT * FROM {table}_base "
                         f"WHERE (SELECT 1 FROM pg_sleep({seconds})) = 1")


@pytest.fixture()
def restart_world(request, tmp_path, monkeypatch, postgres_server, own_ledger_server
                  ) -> Iterator[tuple[World, PostgresServer]]:
    """A world whose ledger is a fresh database on this module's own server and whose source
    sleeps (``request.param`` seconds per query, default 0.5)."""
    sleep = getattr(request, "param", 0.5)
    with scratch_database(own_ledger_server, "ledger") as ledger_dsn, \
            scratch_database(postgres_server, "source") as source_dsn:
        _slow_source(source_dsn, sleep)
        url = ledger_dsn.replace("postgresql://", "postgresql+psycopg://", 1)
        world = build_world(tmp_path, url, days=3, AIRFLOW_CONN_DEMO_SOURCE=source_dsn,
                            EXPORT_RENDER_LEASE_SECONDS=str(LEASE),
                            EXPORT_DELIVERY_HEARTBEAT_SECONDS=str(HEARTBEAT),
                            EXPORT_LEDGER_RECONNECT_SECONDS=str(RECONNECT))
        try:
            yield world.use(monkeypatch), own_ledger_server
        finally:
            if not _listening(own_ledger_server.port):  # a failed test left it stopped
                resume_postgres(own_ledger_server)


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _drive(world: World, ledger, schedule, slot, errors: list[ExportError], *,
           start_after: float, give_up: float) -> str:
    """One period through every stage, as Airflow would: a retryable error is retried (after
    a second) from render on, until ``give_up`` (monotonic)."""
    time.sleep(start_after)
    while True:
        try:
            key = register_run(ledger, schedule, slot, now=SEEDED_AT).run_key
            rendered = render_run(ledger, world.store, key, now=SEEDED_AT,
                                  wait=timedelta(seconds=LEASE * 3))
            publish_run(ledger, world.store, key,
                        rendered["attempt_id"] if rendered["rendered"] else None, now=SEEDED_AT)
            for destination in captured_destinations(ledger, key):
                deliver_run(ledger, key, destination, now=SEEDED_AT)
            return key
        except ExportError as exc:
            errors.append(exc)
            if not exc.retryable or time.monotonic() > give_up:
                raise
            time.sleep(1)


def _final_state(world: World, keys: list[str]) -> None:
    """Every period: ready, one artifact (v1), one acknowledged delivery per destination whose
    file has the artifact's sha256; nothing else at the destinations."""
    ledger = world.ledger()
    expected = []
    for key in keys:
        run = ledger.get_run(key)
        artifacts = ledger.artifacts(key)
        assert (run.state, [a.version for a in artifacts]) == ("ready", [1]), key
        records = rec.records_of(ledger.engine, key)
        assert [(r.destination_id, r.artifact_version, r.state) for r in records] == [
            (d, 1, "acknowledged") for d in sorted(captured_destinations(ledger, key))], key
        expected += [artifacts[0].sha256] * len(records)
    files = [p for p in world.outbox.rglob("*") if p.is_file()]
    assert [p.name for p in files if p.name.startswith(".")] == []  # no partial file left
    delivered = [sha256_file(p) for p in files if not p.name.endswith(".sha256")]
    assert sorted(delivered) == sorted(expected)  # one file per delivery, its bytes exact
    assert {r.state for r in ledger.list_runs()} == {"ready"}  # nothing left between states
    assert len(ledger.list_runs()) == len(keys)
    # The artifact store holds each period's one artifact (and its manifest), nothing more.
    published = {str(a.uri) for key in keys for a in ledger.artifacts(key)}
    stored = {p.as_uri() for p in world.artifacts.rglob("*") if p.is_file()
              and ".staging" not in p.parts and not p.name.endswith(".manifest.json")}
    assert stored == published and len(stored) == len(keys)
    ledger.engine.dispose()


def test_periods_in_every_stage_survive_a_ledger_restart(restart_world, caplog):
    world, server = restart_world
    ledger = open_ledger(world.ledger_url)
    hourly = world.schedule("acme/hourly-clicks")
    daily = world.schedule("acme/daily-spend")
    last = slot_at_or_before(hourly.timing, SEEDED_AT)
    periods = [(hourly, last - timedelta(hours=i)) for i in range(PERIODS)]
    periods += [(daily, slot_at_or_before(daily.timing, SEEDED_AT) - timedelta(days=i))
                for i in range(2)]
    errors: list[ExportError] = []
    keys: list[str | BaseException] = [None] * len(periods)  # type: ignore[list-item]
    give_up = time.monotonic() + OUTAGE + 180
    spacing = max(OUTAGE / len(periods), 0.4)  # periods start before, during and after

    def run(i: int) -> None:
        schedule, slot = periods[i]
        try:
            keys[i] = _drive(world, ledger, schedule, slot, errors, start_after=i * spacing,
                             give_up=give_up)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            keys[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(periods))]
    with caplog.at_level(logging.WARNING, logger="export_lib"):
        for t in threads:
            t.start()
        time.sleep(1.5)  # the first periods are rendering now
        pause_postgres(server)
        stopped = time.monotonic()
        time.sleep(OUTAGE)
        resume_postgres(server)
        back = time.monotonic() - stopped
        for t in threads:
            t.join(timeout=OUTAGE + 240)
    assert all(isinstance(k, str) for k in keys), keys
    # Every failure was retryable and one line; the outage was felt both ways: calls that gave
    # up (LedgerUnavailable) and calls that waited and went on.
    assert errors and all(e.retryable and "\n" not in str(e) for e in errors), errors
    unavailable = [str(e) for e in errors if isinstance(e, LedgerUnavailable)]
    assert unavailable and all(UNAVAILABLE.match(m) for m in unavailable), unavailable
    gave_up = [int(m.group(1)) for m in map(GAVE_UP.search, unavailable) if m]
    assert gave_up and all(RECONNECT <= s < RECONNECT + 6 for s in gave_up), unavailable
    waited = [r.getMessage() for r in caplog.records if "answered again after" in r.getMessage()]
    assert waited, "no call waited the restart out"
    assert back >= OUTAGE
    _final_state(world, [k for k in keys if isinstance(k, str)])
    ledger.engine.dispose()


@pytest.mark.parametrize("restart_world", [2.0], indirect=True)
def test_a_render_stranded_by_the_restart_is_taken_over_by_the_lease_rule(
        restart_world, monkeypatch):
    """The ledger goes while a render reads the source: the render cannot record what it
    staged (one line, after EXPORT_LEDGER_RECONNECT_SECONDS) and leaves its run in
    ``rendering`` with a running attempt. Once the ledger is back, the next try finds the
    stranded attempt's lease, waits for it to lapse, takes the run over and finishes it."""
    world, server = restart_world
    monkeypatch.setenv("EXPORT_LEDGER_RECONNECT_SECONDS", "1")
    ledger = open_ledger(world.ledger_url)
    schedule = world.schedule("acme/daily-spend")
    key = register_run(ledger, schedule, slot_at_or_before(schedule.timing, SEEDED_AT),
                       now=SEEDED_AT).run_key
    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.append(_attempt(ledger, world, key)))
    worker.start()
    deadline = time.monotonic() + 30
    while ledger.get_run(key).state != "rendering":
        assert time.monotonic() < deadline, "the render never claimed the run"
        time.sleep(0.05)
    pause_postgres(server)  # the source query still sleeps: the render is reading
    worker.join(timeout=60)
    (error,) = outcome
    assert isinstance(error, LedgerUnavailable) and error.retryable
    assert re.fullmatch(UNAVAILABLE.pattern[:-1] + r"; [\w ]+ gave up after "
                        r"\d+ s of reconnecting \(EXPORT_LEDGER_RECONNECT_SECONDS=1\); the "
                        r"task's retry continues from what the ledger holds$", str(error)), error
    resume_postgres(server)
    run = ledger.get_run(key)
    assert (run.state, [(a.generation, a.state) for a in ledger.attempts(key)]) == (
        "rendering", [(1, "running")])  # stranded: nobody could record anything
    started = time.monotonic()
    rendered = render_run(ledger, world.store, key, now=SEEDED_AT,
                          wait=timedelta(seconds=LEASE * 4))
    assert rendered["rendered"] and rendered["generation"] == 2
    assert time.monotonic() - started < LEASE + 2 + 2 * 2.0  # the lease, then one render
    publish_run(ledger, world.store, key, rendered["attempt_id"], now=SEEDED_AT)
    for destination in captured_destinations(ledger, key):
        deliver_run(ledger, key, destination, now=SEEDED_AT)
    assert [(a.generation, a.state) for a in ledger.attempts(key)] == [
        (1, "abandoned"), (2, "published")]
    _final_state(world, [key])
    ledger.engine.dispose()


def test_a_delivery_whose_acknowledgement_the_restart_lost_is_taken_over_by_its_heartbeat(
        restart_world, monkeypatch):
    """The ledger goes the moment a delivery's file has landed: its acknowledgement cannot be
    written (one line, after EXPORT_LEDGER_RECONNECT_SECONDS) and the record stays
    ``attempting``. Once the ledger is back, the next try waits for the attempt's heartbeat
    to be silent for four beats (not the 30 minutes of an attempt without one), takes it
    over, finds the file at the destination and records it: one file, one acknowledgement."""
    from export_lib.delivery.transports.local import LocalTransport

    world, server = restart_world
    monkeypatch.setenv("EXPORT_LEDGER_RECONNECT_SECONDS", "1")
    ledger = open_ledger(world.ledger_url)
    schedule = world.schedule("acme/daily-spend")
    key = register_run(ledger, schedule, slot_at_or_before(schedule.timing, SEEDED_AT),
                       now=SEEDED_AT).run_key
    rendered = render_run(ledger, world.store, key, now=SEEDED_AT)
    publish_run(ledger, world.store, key, rendered["attempt_id"], now=SEEDED_AT)
    (destination,) = captured_destinations(ledger, key)
    send = LocalTransport.send

    def send_then_lose_the_ledger(self, artifact, ctx):  # the fault's timing, not a stand-in
        receipt = send(self, artifact, ctx)
        pause_postgres(server)
        return receipt

    monkeypatch.setattr(LocalTransport, "send", send_then_lose_the_ledger)
    with pytest.raises(LedgerUnavailable, match=r"delivery acknowledgement gave up after \d+ s "
                       r"of reconnecting \(EXPORT_LEDGER_RECONNECT_SECONDS=1\)"):
        deliver_run(ledger, key, destination, now=SEEDED_AT)
    monkeypatch.setattr(LocalTransport, "send", send)
    resume_postgres(server)
    (record,) = rec.records_of(ledger.engine, key)
    assert (record.state, record.attempts) == ("attempting", 1)  # stranded
    started, refusals = time.monotonic(), []
    while True:  # Airflow's retries, one a second
        try:
            outcome = deliver_run(ledger, key, destination, now=SEEDED_AT)
            break
        except ExportError as exc:
            assert exc.retryable and "is still in progress elsewhere (its worker's last " \
                "heartbeat was" in str(exc), exc
            refusals.append(str(exc))
            assert time.monotonic() - started < 4 * HEARTBEAT + 10, refusals
            time.sleep(1)
    assert outcome["state"] == "acknowledged"
    history = rec.list_deliveries(ledger.engine, key)[0]["history"]
    assert [(h["attempt"], h["outcome"]) for h in history] == [
        (1, "abandoned"), (2, "already_present")]
    _final_state(world, [key])
    ledger.engine.dispose()


def _attempt(ledger, world: World, key: str) -> object:
    try:
        return render_run(ledger, world.store, key, now=SEEDED_AT)
    except Exception as exc:  # noqa: BLE001 - the outcome under test
        return exc
