"""The one ``COPY ... TO STDOUT`` of the render engine, with a reader for each output format.

Both PostgreSQL paths start the COPY through psycopg (``cursor.copy()``) and share its error,
cancel and close handling (:class:`CopyOut`). They read it differently, because they are
limited by different things (bench/README.md, "The COPY readers"):

* CSV (:meth:`CopyOut.chunks`, ~1 MiB chunks to the hashing sink) is limited by the
  server: what counts is how promptly the client drains the socket. psycopg's row iterator
  does that best. 5 M rows, interleaved, median of 3: 6.61 s into a hashing sink against
  6.77 s for bare ``COPY`` into a file, and 7.17-7.42 s for a ``get_copy_data`` loop.
* Parquet (:meth:`CopyOut.fill` via :class:`CopyStream`, read by pyarrow's streaming CSV
  parser) is limited by client CPU, which parsing and encoding need: libpq's
  ``get_copy_data`` in a tight Python loop needs about half the client CPU of psycopg's
  iterator. 10 M rows: 0.90-0.93 x bare COPY with it, 0.79 x with psycopg's iterator.

Both waits return on a signal and run its handler (psycopg's socket wait, ``select``), so Airflow's
SIGTERM or a task timeout's alarm ends a render promptly; the server's query is then
cancelled before the connection is closed.
"""

from __future__ import annotations

import io
import select
from collections.abc import Iterator
from typing import Any

CHUNK = 1 << 20


class CopyOut:
    """One running ``COPY ... TO STDOUT`` on a psycopg connection. Use as a context manager.

    ``rows`` is set once the COPY has ended successfully; a server error mid-stream raises the
    driver's error from :meth:`fill` / :meth:`chunks`. Any exception inside the block (the
    sink is full, a task timeout) cancels the server's query and closes the connection: the
    protocol state is unknown then, and closing the socket alone would leave the server
    sorting until it next sends a row.
    """

    def __init__(self, conn: Any, query: Any) -> None:
        self._conn = conn
        self._query = query
        self.rows: int | None = None
        self._done = False
        self._cursor: Any = None
        self._block: Any = None  # cursor.copy()'s context manager
        self._data: Iterator[Any] = iter(())

    def __enter__(self) -> CopyOut:
        self._cursor = self._conn.cursor()
        block = self._cursor.copy(self._query)
        try:
            self._data = iter(block.__enter__())  # a sorting query may send nothing for a while
        except BaseException as exc:
            if isinstance(exc, Exception) and _is_server_error(exc):
                raise  # the server refused or ended the query: nothing is left running
            self.cancel()
            self._conn.close()
            raise
        self._block = block
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        block, self._block = self._block, None
        if exc_type is None or self._done:
            if block is not None:
                block.__exit__(None, None, None)
            return
        self.cancel()
        self._conn.close()
        try:  # releases psycopg's connection lock; the connection is already closed
            block.__exit__(exc_type, exc, tb)
        except Exception:  # noqa: BLE001 - the original exception is the one to report
            pass

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
        """Append rows to ``buf`` until it holds ``size`` bytes (all if < 0); True at the end.

        Parquet's reader: libpq's ``get_copy_data`` in a tight loop, which needs half the
        client CPU of psycopg's row iterator; Parquet's parsing and encoding compete for that
        CPU (see the module docstring). It waits in ``select``, so a signal still interrupts it.
        """
        if self._done:
            return True
        pgconn = self._conn.pgconn
        get = pgconn.get_copy_data
        want = size if size >= 0 else 1 << 62
        while len(buf) < want:
            nbytes, data = get(1)
            if nbytes > 0:
                buf += data
            elif nbytes == 0:
                select.select([pgconn.socket], [], [])
                pgconn.consume_input()
            else:
                self._end_of_data(nbytes)
                return True
        return False

    def chunks(self, size: int = CHUNK) -> Iterator[bytes]:
        """The whole COPY output in pieces of ~``size`` bytes (whole rows; the last smaller).

        CSV's reader: psycopg's row iterator, which drains the socket faster (module docstring).
        """
        buf = bytearray()
        for data in self._data:
            buf += data
            if len(buf) >= size:
                yield bytes(buf)
                buf.clear()
        if buf:
            yield bytes(buf)
        self._finish()
        self.rows = self._cursor.rowcount

    def _finish(self) -> None:
        self._done = True
        block, self._block = self._block, None
        block.__exit__(None, None, None)  # psycopg ends its COPY (and reads the row count)

    def _end_of_data(self, nbytes: int) -> None:
        """After :meth:`fill` saw the end: the COPY's final result holds the row count."""
        from psycopg import errors, pq

        pgconn = self._conn.pgconn
        if nbytes == -2:  # the connection broke: __exit__ cancels and closes it
            raise errors.OperationalError(_message(pgconn))
        results = []
        while True:
            pgconn.consume_input()
            while pgconn.is_busy():
                select.select([pgconn.socket], [], [])
                pgconn.consume_input()
            if (result := pgconn.get_result()) is None:
                break
            results.append(result)
        self._done = True
        if not results or results[0].status != pq.ExecStatus.COMMAND_OK:
            if not results:
                raise errors.OperationalError(_message(pgconn))
            raise errors.error_from_result(results[0], encoding=self._conn.info.encoding)
        self.rows = results[0].command_tuples
        self._finish()


def _message(pgconn: Any) -> str:
    return (pgconn.error_message or b"connection lost during COPY").decode(
        "utf-8", "replace").strip()


def _is_server_error(exc: Exception) -> bool:
    """An error the server reported (bad SQL, a statement timeout): its query has ended."""
    from psycopg import errors

    return isinstance(exc, errors.Error) and getattr(exc, "sqlstate", None) is not None


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
