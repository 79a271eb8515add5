"""A ledger host that never answers: the connect timeout bounds opening the ledger, and the
scheduler's at-risk read falls back to half the deadline within that timeout (and does not ask
the dead host again for a minute); a read stuck on a lock is cut by its statement timeout.

The dead host is a local socket that listens and never accepts: the kernel completes the TCP
handshake, libpq sends its first packet and waits for an answer that never comes — what a
firewalled or hung PostgreSQL looks like to a client, without leaving the loopback.
"""

from __future__ import annotations

import logging
import re
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from export_lib.errors import LedgerError, LedgerUnavailable
from export_lib.ledger import open_ledger
from export_lib.ledger.bounded import FailureMemory, bounded_read
from export_lib.ledger.database import make_engine
from export_lib.ledger.schema import runs
from export_lib.views.risk import median_delivery

# Without the timeouts these tests would wait on the silent socket for good: failed instead.
pytestmark = pytest.mark.timeout(60)

TIMEOUT = 2  # seconds: libpq's least connect_timeout
SLACK = 2.0  # the bound the scheduler may overrun its timeout by
NOW = datetime(2026, 3, 29, 5, 5, tzinfo=UTC)


@pytest.fixture()
def dead_port() -> Iterator[int]:
    """A port on 127.0.0.1 that completes TCP handshakes and never says a word."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # never accepted: queued connections wait for a server that is silent
        yield listener.getsockname()[1]


@pytest.fixture()
def short_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXPORT_LEDGER_CONNECT_TIMEOUT_SECONDS", str(TIMEOUT))


def _connect_timeout(url: str) -> str | None:
    """The connect_timeout libpq was given for a connection the ledger's engine opened."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return conn.connection.driver_connection.info.get_parameters().get("connect_timeout")
    finally:
        engine.dispose()


def test_opening_a_dead_ledger_gives_up_after_the_connect_timeout(dead_port, short_timeout):
    url = f"postgresql://exports:secret@127.0.0.1:{dead_port}/exports"
    started = time.monotonic()
    with pytest.raises(LedgerUnavailable, match=(
            rf"cannot reach the export ledger at postgresql://127\.0\.0\.1:{dead_port}: "
            r".*timeout expired.*Check EXPORT_LEDGER_URL")) as caught:
        open_ledger(url)
    took = time.monotonic() - started
    assert TIMEOUT - 0.5 <= took <= TIMEOUT + SLACK  # waited the timeout, not refused at once
    assert "secret" not in str(caught.value) and caught.value.retryable
    assert isinstance(caught.value, LedgerError)  # callers catching LedgerError still do


def test_the_urls_own_connect_timeout_wins_over_the_setting(pg_ledger_database, monkeypatch):
    monkeypatch.setenv("EXPORT_LEDGER_CONNECT_TIMEOUT_SECONDS", "7")
    assert _connect_timeout(pg_ledger_database) == "7"
    assert _connect_timeout(f"{pg_ledger_database}?connect_timeout=30") == "30"
    monkeypatch.delenv("EXPORT_LEDGER_CONNECT_TIMEOUT_SECONDS")
    assert _connect_timeout(pg_ledger_database) == "5"


class _Lines(logging.Handler):
    """The lines one logger writes (Airflow's logging setup, done at its import, replaces the
    root handlers pytest's caplog relies on)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_the_risk_point_falls_back_to_half_the_deadline_within_the_timeout(
        dead_port, short_timeout, monkeypatch):
    from export_airflow import deadlines
    from export_airflow.runtime import ledger as runtime_ledger

    monkeypatch.setenv("AIRFLOW_CONN_EXPORT_LEDGER",
                       f"postgresql://exports:secret@127.0.0.1:{dead_port}/exports")
    monkeypatch.setattr(runtime_ledger, "_OPEN", type(runtime_ledger._OPEN)())
    monkeypatch.setattr(deadlines, "_RISK_READS", FailureMemory())
    risk = deadlines.AtRiskDeadline(7200.0, schedule_id="acme/daily-spend")
    logger = logging.getLogger(deadlines.__name__)
    lines = _Lines()
    logger.addHandler(lines)
    try:
        started = time.monotonic()
        assert risk.offset(NOW) == timedelta(hours=1)  # half the 2 h deadline
        assert time.monotonic() - started <= TIMEOUT + SLACK
        # The next run created within the minute does not wait on the dead host again.
        started = time.monotonic()
        assert risk.offset(NOW) == timedelta(hours=1)
        assert time.monotonic() - started < 0.5
    finally:
        logger.removeHandler(lines)
    host = f"postgresql://127.0.0.1:{dead_port}"
    fields = "company=acme schedule=acme/daily-spend: "
    assert len(lines.lines) == 2 and not any("secret" in line for line in lines.lines)
    assert lines.lines[0] in (
        f"{fields}cannot reach the export ledger at {host}: connection timeout expired. Check "
        "EXPORT_LEDGER_URL and that the database is up.; its risk point is half the deadline",
        f"{fields}the export ledger at {host} did not answer within {TIMEOUT} s; its risk point "
        "is half the deadline")
    assert re.fullmatch(re.escape(lines.lines[0].removesuffix(
        "; its risk point is half the deadline")) + r" \([01] s ago; not asked again for "
        r"another (59|60) s\); its risk point is half the deadline", lines.lines[1])


def test_a_remembered_failure_is_forgotten_after_the_quiet_minute():
    clock = [100.0]
    memory = FailureMemory(quiet=60, clock=lambda: clock[0])
    memory.failed("the export ledger at postgresql+psycopg://db:5432 did not answer within 5 s")
    clock[0] += 59
    with pytest.raises(LedgerUnavailable, match=r"did not answer within 5 s \(59 s ago; not "
                                                r"asked again for another 1 s\)"):
        memory.check()
    clock[0] += 1
    memory.check()  # a minute on: asked again


def test_a_read_stuck_on_a_lock_is_cut_and_the_pool_keeps_no_timeout(pg_ledger_database):
    ledger = open_ledger(pg_ledger_database)
    holder = sa.create_engine(pg_ledger_database)
    memory = FailureMemory()
    try:
        with holder.connect() as locker:
            locker.exec_driver_sql(f"LOCK TABLE {runs.name} IN ACCESS EXCLUSIVE MODE")
            started = time.monotonic()
            with pytest.raises(LedgerUnavailable, match=r"the export ledger at "
                               r"postgresql://127\.0\.0\.1:\d+ did not answer"):
                bounded_read(lambda: ledger.url, lambda _url: ledger, lambda conn: median_delivery(
                    conn, ["acme/daily-spend"], now=NOW), seconds=TIMEOUT, memory=memory)
            assert time.monotonic() - started <= TIMEOUT + SLACK
            locker.rollback()
        time.sleep(0.5)  # the cut read's thread returns its connection once its statement ends
        fresh = FailureMemory()
        assert bounded_read(lambda: ledger.url, lambda _url: ledger, lambda conn: median_delivery(
            conn, ["acme/daily-spend"], now=NOW), seconds=TIMEOUT, memory=fresh) == {}
        with ledger.engine.connect() as conn:  # SET LOCAL: gone with the read's transaction
            assert conn.exec_driver_sql("SHOW statement_timeout").scalar() == "0"
    finally:
        holder.dispose()
        ledger.engine.dispose()
