"""The one ``COPY ... TO STDOUT`` reader of the render engine, straight from libpq.

Both PostgreSQL paths read through it: CSV hands its ~1 MiB chunks to the sink
(:meth:`CopyOut.chunks`), Parquet feeds them to pyarrow's streaming CSV reader
(:class:`CopyStream`).

Why not psycopg's ``cursor.copy()`` iterator: it yields one Python object per row and costs
~0.4 µs of generator machinery per row. Measured on the same 2 M-row COPY in the same run,
interleaved, median of 5 (bench/README.md): psycopg's iterator 5.35 s wall / 1.81 s client
CPU, this reader (``PGconn.get_copy_data`` in a tight loop) 4.34 s / 0.97 s. On a 2-core
machine the client's CPU competes with the server's, so halving it is also what leaves room
for hashing and Parquet encoding.

The protocol handling is the one psycopg documents for libpq: COPY_OUT result, data until -1,
then the final COMMAND_OK result whose tuple count is the number of rows (header excluded).
"""

from __future__ import annotations

import io
import select
import sys
from collections.abc import Iterator
from typing import Any

CHUNK = 1 << 20


class CopyOut:
    """One running ``COPY ... TO STDOUT`` on a psycopg connection. Use as a context manager.

    Never blocks inside libpq: rows are taken with ``get_copy_data(async=1)`` and, when
    libpq's buffer is empty, the socket is awaited with ``select``, so a signal (Airflow's
    SIGTERM on a task timeout) interrupts a render promptly instead of waiting for the
    server's next row. ``rows`` is set once the COPY has ended successfully; a server error
    mid-stream raises the driver's error from :meth:`fill` / :meth:`chunks`.
    """

    def __init__(self, conn: Any, query: Any) -> None:
        self._conn = conn
        self._pgconn = conn.pgconn
        self._query = query.as_bytes(conn) if hasattr(query, "as_bytes") else query
        self.rows: int | None = None
        self._done = False

    def __enter__(self) -> CopyOut:
        from psycopg import errors, pq

        pgconn = self._pgconn
        pgconn.send_query(self._query)
        try:
            while pgconn.flush():  # 1 while the query is not fully sent
                self._wait(write=True)
            result = self._result()  # a sorting query sends nothing for a while
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        if result is None or result.status != pq.ExecStatus.COPY_OUT:
            self._drain()
            if result is None:
                raise errors.OperationalError(self._message())
            raise errors.error_from_result(result, encoding=self._conn.info.encoding)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None and not self._done:
            # Mid-stream failure (the sink is full, a task timeout's exception): the protocol
            # state is unknown, so the connection is not reusable. Closing the socket alone
            # would leave the server sorting until it next sends a row: cancel first.
            self.cancel()
            self._conn.close()

    def cancel(self) -> None:
        """Ask the server to stop this COPY (libpq's cancel request on its own connection);
        safe from another thread or a signal handler. The reader then sees the server's
        ``QueryCanceled`` error."""
        from export_lib.source.session import cancel_connection

        try:
            cancel_connection(self._conn, "postgresql")
        except Exception:  # the server is unreachable: closing the socket is all we can do
            pass

    def fill(self, buf: bytearray, size: int) -> bool:
        """Append rows to ``buf`` until it holds ``size`` bytes (all if < 0); True at the end."""
        if self._done:
            return True
        get = self._pgconn.get_copy_data
        want = size if size >= 0 else 1 << 62
        while len(buf) < want:
            nbytes, data = get(1)
            if nbytes > 0:
                buf += data
            elif nbytes == 0:
                self._wait()
            else:
                self._finish(nbytes)
                return True
        return False

    def chunks(self, size: int = CHUNK) -> Iterator[bytes]:
        """The whole COPY output in pieces of ~``size`` bytes (whole rows; the last smaller)."""
        buf = bytearray()
        while True:
            end = self.fill(buf, size)
            if buf:
                yield bytes(buf)
                buf.clear()
            if end:
                return

    def _wait(self, write: bool = False) -> None:
        """Sleep until the socket is ready, then let libpq read what arrived."""
        fd = self._pgconn.socket
        if write:
            select.select([fd], [fd], [])
        else:
            select.select([fd], [], [])
        self._pgconn.consume_input()

    def _result(self) -> Any:
        pgconn = self._pgconn
        pgconn.consume_input()
        while pgconn.is_busy():
            self._wait()
        return pgconn.get_result()

    def _finish(self, nbytes: int) -> None:
        from psycopg import errors, pq

        self._done = True
        if nbytes == -2:
            raise errors.OperationalError(self._message())
        result = self._result()
        self._drain()
        if result is None or result.status != pq.ExecStatus.COMMAND_OK:
            if result is None:
                raise errors.OperationalError(self._message())
            raise errors.error_from_result(result, encoding=self._conn.info.encoding)
        self.rows = result.command_tuples

    def _drain(self) -> None:
        while self._result() is not None:
            pass

    def _message(self) -> str:
        return (self._pgconn.error_message or b"connection lost during COPY").decode(
            "utf-8", "replace").strip()


class CopyStream(io.RawIOBase):
    """A readable binary file over a :class:`CopyOut`, for pyarrow's streaming CSV reader."""

    def __init__(self, copy: CopyOut) -> None:
        super().__init__()
        self._copy = copy
        self._buf = bytearray()
        self._eof = False

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        buf = self._buf
        if not self._eof and (size < 0 or len(buf) < size):
            self._eof = self._copy.fill(buf, size)
        if size < 0 or size >= len(buf):
            out = bytes(buf)
            buf.clear()
        else:
            out = bytes(buf[:size])
            del buf[:size]
        return out

    def empty(self) -> bool:
        """True when the COPY produced no data at all (pyarrow rejects an empty CSV)."""
        if not self._buf and not self._eof:
            self._eof = self._copy.fill(self._buf, 1)
        return not self._buf

    def readinto(self, target: Any) -> int:
        data = self.read(len(target))
        target[: len(data)] = data
        return len(data)
