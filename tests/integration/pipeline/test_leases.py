"""Leases that mean something (issue 14, item 4), on real PostgreSQL (ledger and source).

Four simultaneous starts of one slot scan the source once: the first claims the run, the others
stand down (LeaseHeldError, what the operator turns into a reschedule) or wait for it and report
its artifact. An attempt renews its lease while it renders, so a render longer than its lease
keeps the run; a holder that stops renewing (a killed worker) is taken over once the lease
lapsed, never before, and fencing still rejects it if it wakes up. Source queries are counted
at the source: every query on the demo tables sleeps SLEEP s, and ``pg_stat_activity`` is
sampled while they run (``slow_pg_world`` in tests/fixtures/pipeline.py).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from export_lib.errors import FencingError, LeaseHeldError
from export_lib.ledger import open_ledger
from export_lib.pipeline import (
    PublishResult,
    Rendered,
    publish_run,
    register_run,
    render_run,
    slot_at_or_before,
)
from export_lib.render.engine import RENDER_APP_PREFIX
from tests.world import SEEDED_AT

STARTS = 4


def _one_run(world) -> str:
    schedule = world.schedule("acme/daily-spend")
    slot = slot_at_or_before(schedule.timing, SEEDED_AT)
    return register_run(world.ledger(), schedule, slot, now=SEEDED_AT).run_key


class SourceQueries:
    """Distinct export queries the source ran (pid + query_start), sampled every 20 ms."""

    def __init__(self, dsn: str) -> None:
        self.dsn, self.seen, self._stop = dsn, set(), threading.Event()
        self._thread = threading.Thread(target=self._sample)

    def _sample(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.is_set():
                self.seen.update(conn.execute(
                    "SELECT pid, query_start FROM pg_stat_activity WHERE state = 'active' "
                    "AND datname = current_database() "
                    "AND application_name LIKE %s", (RENDER_APP_PREFIX + "%",)).fetchall())
                time.sleep(0.02)

    def __enter__(self) -> SourceQueries:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _at_once(count: int, job) -> list[object]:
    """Run ``job(i)`` in ``count`` threads released together; results or exceptions."""
    gate, out = threading.Barrier(count), [None] * count

    def run(i: int) -> None:
        gate.wait()
        try:
            out[i] = job(i)
        except Exception as exc:  # noqa: BLE001 (the outcome under test)
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return out


def test_four_simultaneous_starts_scan_the_source_once_and_three_stand_down(slow_pg_world):
    world, dsn = slow_pg_world
    key = _one_run(world)
    with SourceQueries(dsn) as source:
        outcomes = _at_once(STARTS, lambda i: render_run(open_ledger(world.ledger_url),
                                                         world.store, key, now=SEEDED_AT))
    rendered = [o for o in outcomes if isinstance(o, Rendered)]
    refused = [o for o in outcomes if isinstance(o, LeaseHeldError)]
    assert (len(rendered), len(refused)) == (1, STARTS - 1), outcomes
    assert len(source.seen) == 1
    (attempt,) = world.ledger().attempts(key)
    for exc in refused:
        assert str(exc) == (
            f"run {key}: attempt {attempt.attempt_id[:12]} (generation 1, cli) holds the run, "
            f"running, lease until {exc.until:%Y-%m-%dT%H:%M:%SZ}; this attempt stands down "
            "(nothing claimed) and takes over only if that lease lapses (a killed worker stops "
            "renewing it)")
    # Staged but not yet published, the run is still held: a retry does not scan again.
    with pytest.raises(LeaseHeldError, match=r"holds the run, staged, lease until"):
        render_run(world.ledger(), world.store, key, now=SEEDED_AT)
    published = publish_run(world.ledger(), world.store, key, rendered[0]["attempt_id"],
                            now=SEEDED_AT)
    # What the rescheduled stand-downs find when they come back: the published artifact.
    again = [render_run(world.ledger(), world.store, key, now=SEEDED_AT) for _ in refused]
    assert {(r["rendered"], r["artifact_version"], r["sha256"]) for r in again} == {
        (False, 1, published["sha256"])}
    assert [(a.generation, a.state) for a in world.ledger().attempts(key)] == [(1, "published")]
    assert len(world.ledger().artifacts(key)) == 1


def test_four_waiting_starts_of_one_slot_share_one_render_and_one_artifact(slow_pg_world):
    """``exportctl run``'s way: wait (bounded) for the holder, then report its artifact."""
    world, dsn = slow_pg_world
    key = _one_run(world)

    def start(i: int) -> dict:
        ledger = open_ledger(world.ledger_url)
        rendered = render_run(ledger, world.store, key, now=SEEDED_AT,
                              wait=timedelta(seconds=30))
        return publish_run(ledger, world.store, key, rendered.get("attempt_id")
                           if rendered["rendered"] else None, now=SEEDED_AT)

    with SourceQueries(dsn) as source:
        outcomes = _at_once(STARTS, start)
    assert len(source.seen) == 1
    assert all(isinstance(o, PublishResult) for o in outcomes), outcomes
    assert {(o["version"], o["sha256"]) for o in outcomes} == {
        (1, world.ledger().latest_artifact(key).sha256)}
    assert [o["created"] for o in outcomes].count(True) == 1
    assert [(a.generation, a.state) for a in world.ledger().attempts(key)] == [(1, "published")]


def test_a_render_longer_than_its_lease_renews_it_and_keeps_the_run(slow_pg_world, monkeypatch):
    world, dsn = slow_pg_world
    monkeypatch.setenv("EXPORT_RENDER_LEASE_SECONDS", "3")
    with psycopg.connect(dsn, autocommit=True) as conn:  # this slot's query lasts 5 s > 3 s
        conn.execute("CREATE OR REPLACE VIEW widget_metrics AS SELECT * FROM "
                     "widget_metrics_base WHERE (SELECT 1 FROM pg_sleep(5)) = 1")
    key = _one_run(world)
    holder = threading.Thread(target=render_run, args=(open_ledger(world.ledger_url),
                                                       world.store, key),
                              kwargs={"now": datetime.now(UTC)})
    holder.start()
    time.sleep(4.2)  # past the first lease: only a renewal keeps it
    with pytest.raises(LeaseHeldError, match=r"holds the run, running, lease until") as info:
        render_run(world.ledger(), world.store, key, now=datetime.now(UTC))
    assert info.value.until > datetime.now(UTC)
    holder.join(timeout=30)
    assert [(a.generation, a.state) for a in world.ledger().attempts(key)] == [(1, "staged")]


def test_a_holder_that_stops_renewing_is_taken_over_after_its_lease_and_is_fenced(
        slow_pg_world, monkeypatch):
    world, _ = slow_pg_world
    monkeypatch.setenv("EXPORT_RENDER_LEASE_SECONDS", "3")
    key = _one_run(world)
    ledger = world.ledger()
    claimed_at = datetime.now(UTC)
    # A worker that claimed the run and was killed: its lease is never renewed.
    killed = ledger.claim_attempt(key, origin="worker-1 (killed)", now=claimed_at,
                                  lease=timedelta(seconds=3),
                                  staging_uri=lambda a: world.store.staging_uri(a, "csv"))
    with pytest.raises(LeaseHeldError, match=r"attempt \w{12} \(generation 1, worker-1 \(killed\)"
                                             r"\) holds the run, running"):
        render_run(ledger, world.store, key, now=datetime.now(UTC))
    started = time.monotonic()
    took_over = render_run(ledger, world.store, key, now=datetime.now(UTC),
                           wait=timedelta(seconds=20))
    waited = time.monotonic() - started
    assert took_over["rendered"] and took_over["generation"] == 2
    assert datetime.now(UTC) - claimed_at >= timedelta(seconds=3)  # not before the lease ran out
    assert waited < 3 + 1 + 2  # promptly after it (1 s polls, a 1 s source query)
    assert [(a.generation, a.state) for a in ledger.attempts(key)] == [
        (1, "abandoned"), (2, "staged")]
    with pytest.raises(FencingError, match=r"\(generation 1\) is stale; generation 2 owns"):
        ledger.record_staged(key, killed.attempt_id, rows=1, nbytes=1, sha256="c" * 64,
                             now=datetime.now(UTC))
    assert Counter(a.state for a in ledger.attempts(key)) == {"abandoned": 1, "staged": 1}
