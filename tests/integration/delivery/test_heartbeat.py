"""A delivery attempt's heartbeat on a real PostgreSQL ledger (the database's clock)."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa

from export_lib.delivery.heartbeat import Heartbeat
from export_lib.ledger import deliveries as rec
from tests.fixtures.delivery import ArtifactFactory
from tests.unit.delivery.test_engine import _dead_worker_attempt, _heartbeat_back


def test_the_heartbeat_is_renewed_while_the_attempt_runs_and_stops_with_it(
    pg_engine: sa.Engine, make_artifact: ArtifactFactory, tmp_path: Path
) -> None:
    record = _dead_worker_attempt(pg_engine, make_artifact(), tmp_path)
    _heartbeat_back(pg_engine, record, 600)
    with pg_engine.connect() as conn:
        assert rec.silence(conn, record.delivery_id, 1) >= timedelta(seconds=600)
    with Heartbeat(pg_engine, record.delivery_id, 1, every=timedelta(seconds=0.05)):
        time.sleep(0.5)
        with pg_engine.connect() as conn:
            assert rec.silence(conn, record.delivery_id, 1) < timedelta(seconds=1)
    _heartbeat_back(pg_engine, record, 600)
    time.sleep(0.2)  # stopped: nothing renews it any more
    with pg_engine.connect() as conn:
        assert rec.silence(conn, record.delivery_id, 1) >= timedelta(seconds=600)
    with pg_engine.begin() as conn:  # a finished attempt is not kept alive
        rec.finish_attempt(conn, record.delivery_id, 1, outcome=rec.DELIVERED, duration_ms=1)
    assert rec.beat(pg_engine, record.delivery_id, 1) is False
