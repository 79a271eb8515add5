"""No runaway work on the source: a cancelled or abandoned COPY leaves no query on the server,
and every source session carries statement_timeout and TCP keepalives (seed 002's incident)."""

from __future__ import annotations

import signal
import threading
import time

import psycopg
import pytest

from export_lib.errors import ConfigError, SourceError
from export_lib.render.copy import CopyOut, CopyStream
from export_lib.source import session
from export_lib.source.connections import parse_connection
from export_lib.source.database import open_source

# Streams rows slowly (a sleep every 1000 rows) so a reader is mid-stream for ~20 s.
SLOW_COPY = (b"COPY (SELECT g, repeat('x', 200) FROM generate_series(1, 20000000) g "
             b"WHERE g % 1000 <> 0 OR pg_sleep(0.001) IS NOT NULL) TO STDOUT")
# Sends nothing for 30 s: closing the socket alone leaves it running until it next writes.
SILENT_COPY = b"COPY (SELECT pg_sleep(30)) TO STDOUT"
# One row larger than the server's 8 KiB send buffer (so it reaches the reader), then 30 s of
# silence: the reader is mid-stream, waiting for the socket.
STALLED_COPY = (b"COPY (SELECT CASE WHEN g = 1 THEN repeat('x', 100000) ELSE pg_sleep(30)::text "
                b"END FROM generate_series(1, 2) g) TO STDOUT")


def backend_query(dsn: str, pid: int) -> tuple[str, str] | None:
    """(state, query) of backend ``pid``, None once it is gone."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        row = admin.execute("SELECT state, query FROM pg_stat_activity WHERE pid = %s",
                            (pid,)).fetchone()
    return row


def seconds_until_no_query(dsn: str, pid: int, limit: float = 5.0) -> float:
    """Seconds until backend ``pid`` runs nothing (gone, or idle); fails after ``limit``."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        row = backend_query(dsn, pid)
        if row is None or row[0] != "active":
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"backend {pid} still runs {row} after {limit} s")


def test_cancel_running_stops_a_copy_mid_stream(postgres_server):
    conn = parse_connection("src", postgres_server.dsn)
    received = 0
    with open_source(conn) as source:
        pid = source.connection.info.backend_pid
        with pytest.raises(SourceError, match=r"cancelled \(task killed\)"), \
                source.guarded("rendering"):
            with CopyOut(source.connection, SLOW_COPY) as copy:
                for chunk in copy.chunks(1 << 16):
                    received += len(chunk)
                    if received > 1 << 20:  # mid-stream: another thread cancels, as on_kill does
                        threading.Thread(target=session.cancel_running,
                                         args=("task killed",)).start()
        elapsed = seconds_until_no_query(postgres_server.dsn, pid)
    assert received > 1 << 20
    assert backend_query(postgres_server.dsn, pid) is None  # connection closed with the source
    print(f"query gone {elapsed:.2f} s after the cancel")


def test_cancel_from_a_signal_handler_interrupts_the_wait(postgres_server):
    """Airflow's task runner calls on_kill from its SIGTERM handler in the main thread, while
    the reader sleeps in select(): the handler's cancel must end the COPY."""
    conn = parse_connection("src", postgres_server.dsn)
    previous = signal.signal(signal.SIGALRM, lambda *_: session.cancel_running("SIGTERM"))
    try:
        with open_source(conn) as source:
            pid = source.connection.info.backend_pid
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            started = time.monotonic()
            with pytest.raises(SourceError, match=r"cancelled \(SIGTERM\)"), \
                    source.guarded("rendering"), CopyOut(source.connection, SILENT_COPY) as copy:
                list(copy.chunks())
            assert time.monotonic() - started < 5
            seconds_until_no_query(postgres_server.dsn, pid)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def read_all(copy: CopyOut, reader: str) -> None:
    """Read the COPY to the end the way the CSV (chunks) or the Parquet (a CopyStream and its
    reader thread) path does."""
    if reader == "chunks":
        list(copy.chunks())
    else:
        stream = CopyStream(copy)
        while stream.read(1 << 17):
            pass


@pytest.mark.parametrize("query", [SILENT_COPY, STALLED_COPY, SLOW_COPY],
                         ids=["before-the-first-row", "stalled-mid-stream", "streaming"])
@pytest.mark.parametrize("reader", ["chunks", "stream"])
def test_an_exception_mid_copy_cancels_before_closing(postgres_server, reader, query):
    """A task timeout raises while a render waits for the first row, waits mid-stream or
    reads rows (either reader): the server must stop at once, not when its silent 30 s would
    next write to the closed socket."""
    conn = parse_connection("src", postgres_server.dsn)

    def timeout(*_):
        raise TimeoutError("execution_timeout")

    previous = signal.signal(signal.SIGALRM, timeout)
    try:
        with open_source(conn) as source:
            pid = source.connection.info.backend_pid
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            with pytest.raises(TimeoutError, match="execution_timeout"), \
                    CopyOut(source.connection, query) as copy:
                read_all(copy, reader)
            elapsed = seconds_until_no_query(postgres_server.dsn, pid, limit=3.0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert elapsed < 3.0
    assert reader_threads() == []


# 400 KB of rows (more than the reader thread's first chunk), then 3 s of silence.
STALLED_AFTER_A_CHUNK = (b"COPY (SELECT CASE WHEN g <= 4 THEN repeat('x', 100000) ELSE "
                         b"pg_sleep(3)::text END FROM generate_series(1, 5) g) TO STDOUT")


def test_the_reader_thread_is_off_the_connection_before_it_is_closed(postgres_server,
                                                                      monkeypatch):
    """libpq's connection is not thread-safe. When the cancel cannot reach the server, the
    reader thread is still waiting on the socket as the block exits: it must be stopped and
    joined before the connection is closed."""
    monkeypatch.setattr(CopyOut, "cancel", lambda self: None)  # the server is unreachable
    readers_at_close = []
    with open_source(parse_connection("src", postgres_server.dsn)) as source:
        close = source.connection.close

        def recording_close():
            readers_at_close.append(reader_threads())
            close()

        monkeypatch.setattr(source.connection, "close", recording_close)
        with pytest.raises(RuntimeError, match="the sink failed"), \
                CopyOut(source.connection, STALLED_AFTER_A_CHUNK) as copy:
            CopyStream(copy).read(1000)  # the first chunk; the reader thread then waits
            time.sleep(0.3)
            assert reader_threads() == ["copy-reader"]
            raise RuntimeError("the sink failed")
    assert readers_at_close[0] == []


def reader_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "copy-reader"]


# Sends ~1.2 MB of rows, then fails on the server: the error must reach the reader's caller.
FAILING_COPY = (b"COPY (SELECT g, repeat('x', 100), 1 / (20000 - g) FROM generate_series(1, "
                b"30000) g) TO STDOUT")


def test_a_server_error_mid_stream_reaches_the_stream_reader(postgres_server):
    """Parquet's reader thread sees the COPY end with an error after rows have flowed: the
    caller gets the server's error (not a short, clean end) and no reader thread is left."""
    conn = parse_connection("src", postgres_server.dsn)
    received = 0
    with open_source(conn) as source:
        with pytest.raises(psycopg.errors.DivisionByZero, match="division by zero"), \
                CopyOut(source.connection, FAILING_COPY) as copy:
            stream = CopyStream(copy)
            while data := stream.read(1 << 16):
                received += len(data)
        assert copy.rows is None
    assert received > 1 << 20  # rows had reached the caller before the error
    assert reader_threads() == []


def test_source_sessions_carry_statement_timeout_and_keepalives(postgres_server, monkeypatch):
    monkeypatch.delenv(session.STATEMENT_TIMEOUT_ENV, raising=False)
    with open_source(parse_connection("src", postgres_server.dsn)) as source:
        shown = {name: source.connection.execute(f"SHOW {name}").fetchone()[0]
                 for name in ("statement_timeout", "tcp_keepalives_idle",
                              "client_connection_check_interval")}
        assert source.connection.info.get_parameters()["keepalives_idle"] == "60"
    assert shown == {"statement_timeout": "30min", "tcp_keepalives_idle": "60",
                     "client_connection_check_interval": "5s"}

    monkeypatch.setenv(session.STATEMENT_TIMEOUT_ENV, "2h")
    with open_source(parse_connection("src", postgres_server.dsn + "?keepalives_idle=30")) as src:
        assert src.connection.execute("SHOW statement_timeout").fetchone()[0] == "2h"
        assert src.connection.execute("SHOW tcp_keepalives_idle").fetchone()[0] == "30"


def test_statement_timeout_per_source_stops_a_long_query(postgres_server):
    conn = parse_connection("src", postgres_server.dsn + "?statement_timeout=1s")
    with open_source(conn) as source, pytest.raises(SourceError, match="statement timeout"), \
            source.guarded("rendering"), CopyOut(source.connection, SILENT_COPY) as copy:
        list(copy.chunks())


def test_a_bad_statement_timeout_names_the_extra_and_the_fix(postgres_server):
    conn = parse_connection("src", postgres_server.dsn + "?statement_timeout=soon")
    with pytest.raises(ConfigError, match=r"connection 'src' extra statement_timeout: 'soon' is "
                                          r"not a duration; use PostgreSQL units"):
        with open_source(conn):
            pass
