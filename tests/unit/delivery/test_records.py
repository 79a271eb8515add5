"""The delivery ledger_engine: ids, the state machine, and races between workers (SQLite and PG)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa

from export_lib.delivery import delivery_id, list_deliveries, requeue
from export_lib.errors import IllegalTransitionError
from export_lib.ledger import DELIVERY_STATES, check_transition
from export_lib.ledger import deliveries as rec
from tests.support.delivery import NOW, RUN_KEY


def _new(destination: str = "archive", version: int = 1) -> rec.NewDelivery:
    return rec.NewDelivery(
        delivery_id=delivery_id(RUN_KEY, version, destination), run_key=RUN_KEY,
        artifact_version=version, destination_id=destination, destination_type="local",
        destination_config="{}", target=f"/exports/{destination}", artifact_name="f.csv",
        artifact_sha256="0" * 64, artifact_bytes=10, retry_until=NOW + timedelta(days=5),
    )


def test_delivery_id_is_stable_readable_and_distinct_per_triple() -> None:
    first = delivery_id(RUN_KEY, 1, "customer-sftp")
    assert first == delivery_id(RUN_KEY, 1, "customer-sftp")
    assert first.startswith("dlv-customer-sftp-") and len(first) == len("dlv-customer-sftp-") + 20
    assert len({first, delivery_id(RUN_KEY, 2, "customer-sftp"),
                delivery_id(RUN_KEY, 1, "archive"),
                delivery_id(RUN_KEY + "x", 1, "customer-sftp")}) == 4


@pytest.mark.parametrize(
    ("current", "target"),
    [("pending", "acknowledged"), ("acknowledged", "pending"), ("acknowledged", "attempting"),
     ("exhausted", "attempting"), ("refused", "acknowledged"), ("pending", "exhausted")],
)
def test_illegal_transitions_raise(current: str, target: str) -> None:
    with pytest.raises(IllegalTransitionError,
                       match=f"^delivery dlv-x: cannot go from {current} to {target}; "
                             f"allowed from {current}: "):
        check_transition(DELIVERY_STATES, "dlv-x", current, target)


def test_ensure_record_is_insert_or_get(ledger_engine: sa.Engine) -> None:
    first = rec.ensure_record(ledger_engine, _new(), now=NOW)
    again = rec.ensure_record(ledger_engine, _new(), now=NOW + timedelta(hours=1))
    assert first == again
    assert first.state == "pending" and first.attempts == 0
    with ledger_engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(rec.deliveries)).scalar() == 1


def test_exactly_one_of_racing_workers_wins_the_attempt(ledger_engine: sa.Engine) -> None:
    record = rec.ensure_record(ledger_engine, _new(), now=NOW)
    barrier = threading.Barrier(4)
    won: list[int | None] = []

    def worker() -> None:
        barrier.wait()
        with ledger_engine.begin() as conn:
            won.append(rec.start_attempt(conn, record, now=NOW))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(won, key=lambda n: n or 0) == [None, None, None, 1]
    stored = rec.get_record(ledger_engine, record.delivery_id)
    assert stored is not None and stored.state == "attempting" and stored.attempts == 1


def test_stale_reader_cannot_overwrite_a_newer_attempt(ledger_engine: sa.Engine) -> None:
    record = rec.ensure_record(ledger_engine, _new(), now=NOW)
    with ledger_engine.begin() as conn:
        assert rec.start_attempt(conn, record, now=NOW) == 1
    attempting = rec.get_record(ledger_engine, record.delivery_id)
    assert attempting is not None
    with ledger_engine.begin() as conn:  # a second worker takes over the (stale) attempt
        assert rec.start_attempt(conn, attempting, now=NOW + timedelta(hours=1)) == 2
    with ledger_engine.begin() as conn:  # the first worker comes back with its old view
        assert rec.transition(conn, attempting, "acknowledged", now=NOW) is False
        assert rec.finish_attempt(conn, record.delivery_id, 1, outcome="delivered",
                                  duration_ms=1) is False
    history = list_deliveries(ledger_engine)[0]["history"]
    assert [(h["attempt"], h["outcome"]) for h in history] == [(1, "abandoned"),
                                                                (2, "in_progress")]


def test_requeue_gives_an_exhausted_delivery_a_fresh_budget(ledger_engine: sa.Engine) -> None:
    record = rec.ensure_record(ledger_engine, _new(), now=NOW)
    with pytest.raises(IllegalTransitionError,
                       match=f"^delivery {record.delivery_id}: cannot go from pending to pending; "
                             "allowed from pending: attempting, cancelled, refused$"):
        requeue(ledger_engine, record.delivery_id, now=NOW)
    with ledger_engine.begin() as conn:
        rec.start_attempt(conn, record, now=NOW)
    attempting = rec.get_record(ledger_engine, record.delivery_id)
    assert attempting is not None
    with ledger_engine.begin() as conn:
        rec.transition(conn, attempting, "exhausted", now=NOW, last_error="boom")
    again = requeue(ledger_engine, record.delivery_id, now=NOW)
    assert (again.state, again.attempts, again.budget_base, again.last_error) == (
        "pending", 1, 1, "boom")
    with pytest.raises(IllegalTransitionError, match="no delivery 'dlv-nope'"):
        requeue(ledger_engine, "dlv-nope", now=NOW)


def test_list_deliveries_filters_by_run_and_is_json_ready(ledger_engine: sa.Engine) -> None:
    rec.ensure_record(ledger_engine, _new("b-dest"), now=NOW)
    rec.ensure_record(ledger_engine, _new("a-dest"), now=NOW)
    other = _new("a-dest")
    other = rec.NewDelivery(**{**other.__dict__, "run_key": "other/run",
                               "delivery_id": delivery_id("other/run", 1, "a-dest")})
    rec.ensure_record(ledger_engine, other, now=NOW)
    rows = list_deliveries(ledger_engine, run_key=RUN_KEY)
    assert [r["destination_id"] for r in rows] == ["a-dest", "b-dest"]
    assert rows[0]["created_at"] == "2026-03-29T06:00:00+00:00"
    assert rows[0]["destination_config"] == {} and rows[0]["history"] == []
    assert len(list_deliveries(ledger_engine)) == 3


def test_list_deliveries_by_state_shows_what_needs_an_operator(ledger_engine: sa.Engine) -> None:
    from export_lib.delivery import UNRESOLVED

    done = rec.ensure_record(ledger_engine, _new("done"), now=NOW)
    rec.ensure_record(ledger_engine, _new("waiting"), now=NOW)
    with ledger_engine.begin() as conn:
        rec.start_attempt(conn, done, now=NOW)
    attempting = rec.get_record(ledger_engine, done.delivery_id)
    assert attempting is not None
    with ledger_engine.begin() as conn:
        rec.transition(conn, attempting, "acknowledged", now=NOW, receipt="ok")
    assert [r["destination_id"] for r in list_deliveries(ledger_engine, states=UNRESOLVED)] == [
        "waiting"]
    (acknowledged,) = list_deliveries(ledger_engine, states=["acknowledged"])
    assert [h["attempt"] for h in acknowledged["history"]] == [1]
    from export_lib.errors import ConfigError

    with pytest.raises(ConfigError, match=r"unknown delivery state\(s\) \['done'\]; valid: "
                       "pending, attempting"):
        list_deliveries(ledger_engine, states=["done"])
