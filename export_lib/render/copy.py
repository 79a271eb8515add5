"""The one ``COPY ... TO STDOUT`` of the render engine, with a reader for each output format.

Both PostgreSQL paths start the COPY through psycopg (``cursor.copy()``) and share its error,
cancel and close handling (:class:`CopyOut`). They read it differently, because they are
limited by different things (bench/README.md, "The COPY readers"):

* CSV (:meth:`CopyOut.chunks`, ~1 MiB chunks to the hashing sink) is limited by the
  server: what counts is how promptly the client drains the socket. psycopg's row iterator
  does that best. 5 M rows, interleaved, median of 3: 6.61 s into a hashing sink against
  6.77 s for bare ``COPY`` into a file, and 7.17-7.42 s for a ``get_copy_data`` loop.
* Parquet (:meth:`CopyOut.pump` on :class:`CopyStream`'s reader thread, read by pyarrow's
  streaming CSV parser) is limited by client CPU, which parsing and encoding need: libpq's
  ``get_copy_data`` in a tight Python loop needs about half the client CPU of psycopg's
  iterator, and on a thread of its own it drains the socket while pyarrow parses and encodes
  (both release the GIL). Same idle machine, same hour: 0.868 x bare COPY at 2 M rows and
  0.890 x at 10 M with the loop inline, 0.967 x and 0.955 x on the reader thread.

Both waits return on a signal and run its handler (psycopg's socket wait, the reader
thread's queue), so Airflow's SIGTERM or a task timeout's alarm ends a render promptly; the
server's query is then cancelled, and the reader thread stopped, before the connection is
closed.
"""

from __future__ import annotations

import io
import queue
import select
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from types import TracebackType

    import psycopg
    from psycopg import sql
    from psycopg.pq.abc import PGconn

CHUNK = 1 << 20
STOP_POLL = 0.2  # seconds: how soon the reader thread sees a stop request
# The reader thread hands pyarrow 256 KiB pieces, at most 8 queued (2 MiB in flight): peak RSS
# at 2 M rows 140 MB, against 150 MB with 1 MiB pieces and no faster.
READ_CHUNK = 256 << 10


class CopyOut:
    """One running ``COPY ... TO STDOUT`` on a psycopg connection. Use as a context manager.

    ``rows`` is set once the COPY has ended successfully; a server error mid-stream raises the
    driver's error from :meth:`chunks` or :meth:`CopyStream.read`. Any exception inside the
    block (the sink is full, a task timeout) cancels the server's query, stops a reader thread
    and closes the connection: the protocol state is unknown then, and closing the socket
    alone would leave the server sorting until it next sends a row.
    """

    def __init__(self, conn: psycopg.Connection[Any], query: sql.Composable) -> None:
        self._conn = conn
        self._query = query
        self.rows: int | None = None
        self._done = False
        self._cursor: psycopg.Cursor[Any] | None = None
        self._block: AbstractContextManager[psycopg.Copy] | None = None  # cursor.copy()
        self._data: Iterator[Any] = iter(())
        self._reader: CopyStream | None = None  # Parquet's reader thread, while it runs

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

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        block, self._block = self._block, None
        if exc_type is None or self._done:
            if block is not None:
                block.__exit__(None, None, None)
            return
        self.cancel()
        if self._reader is not None:  # it must be off the connection before it is closed
            self._reader.stop()
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

    def pump(self, put: Callable[[bytes], bool], stopped: threading.Event,
             size: int = CHUNK) -> int:
        """Hand the COPY's rows to ``put`` in pieces of ~``size`` bytes (whole rows) until the
        end; return libpq's final ``get_copy_data`` status (-1 the end, -2 a broken
        connection), or 0 when ``stopped`` was set or ``put`` refused.

        Parquet's reader, run on :class:`CopyStream`'s reader thread: libpq's
        ``get_copy_data`` in a tight loop needs half the client CPU of psycopg's row iterator,
        and on its own thread it drains the socket while pyarrow parses and encodes (which
        release the GIL) instead of between those steps. Waits are ``select`` with a short
        timeout so a stop request is seen within 0.2 s.
        """
        pgconn = self._conn.pgconn
        get = pgconn.get_copy_data
        sock = pgconn.socket
        buf = bytearray()
        while not stopped.is_set():
            nbytes, data = get(1)
            if nbytes > 0:
                buf += data
                if len(buf) >= size:
                    if not put(bytes(buf)):
                        return 0
                    buf.clear()
            elif nbytes == 0:
                select.select([sock], [], [], STOP_POLL)
                pgconn.consume_input()
            else:
                if buf and not put(bytes(buf)):
                    return 0
                return nbytes
        return 0

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

    def messages(self) -> Iterator[Any]:
        """The COPY's CopyData messages as psycopg returns them (bytes-like), then the end.

        The range scan's reader (:mod:`export_lib.render.range_scan`): the server sends one
        message per row in COPY OUT (the protocol's "always one per row"), so a row is a
        message and a CSV record with an embedded newline needs no parsing to be found.
        """
        yield from self._data
        self._finish()
        self.rows = self._cursor.rowcount

    def _finish(self) -> None:
        self._done = True
        block, self._block = self._block, None
        block.__exit__(None, None, None)  # psycopg ends its COPY (and reads the row count)

    def _end_of_data(self, nbytes: int) -> None:
        """After :meth:`pump` saw the end: the COPY's final result holds the row count.
        Runs on the thread that entered the COPY, once the reader thread has ended."""
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


def _message(pgconn: PGconn) -> str:
    return (pgconn.error_message or b"connection lost during COPY").decode(
        "utf-8", "replace").strip()


def _is_server_error(exc: Exception) -> bool:
    """An error the server reported (bad SQL, a statement timeout): its query has ended."""
    from psycopg import errors

    return isinstance(exc, errors.Error) and getattr(exc, "sqlstate", None) is not None


class CopyStream(io.RawIOBase):
    """A readable binary file over a :class:`CopyOut`, for pyarrow's streaming CSV reader.

    A reader thread runs :meth:`CopyOut.pump` into a queue of ``depth`` pieces of
    ``READ_CHUNK`` bytes (bounded memory: ~2 MiB); :meth:`read` takes from it on the caller's
    thread. The queue wait
    is interruptible, so a signal (a task timeout, Airflow's SIGTERM) still raises in the
    caller; :class:`CopyOut` then cancels the query and :meth:`stop` s the thread before it
    closes the connection, which only one thread may use at a time. At the end the caller's
    thread reads the COPY's result (the row count) after the reader thread has ended.
    """

    def __init__(self, copy: CopyOut, depth: int = 8) -> None:
        super().__init__()
        self._copy = copy
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stopped = threading.Event()
        self._buf = b""
        self._pos = 0
        self._eof = False
        copy._reader = self
        self._thread = threading.Thread(target=self._run, name="copy-reader", daemon=True)
        self._thread.start()

    def _put(self, item: bytes | _End) -> bool:
        while not self._stopped.is_set():
            try:
                self._queue.put(item, timeout=STOP_POLL)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            self._put(_End(self._copy.pump(self._put, self._stopped, READ_CHUNK)))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self._put(_End(0, exc))

    def stop(self) -> None:
        """End the reader thread (the COPY is being abandoned) and wait for it."""
        self._stopped.set()
        self._thread.join()
        self._copy._reader = None

    def readable(self) -> bool:
        return True

    def _more(self) -> bool:
        """Take the next chunk into the buffer; False at the end of the COPY."""
        if self._eof:
            return False
        item = self._queue.get()
        if isinstance(item, _End):
            self._eof = True
            self._thread.join()
            self._copy._reader = None
            if item.error is not None:
                raise item.error
            self._copy._end_of_data(item.nbytes)
            return False
        self._buf, self._pos = item, 0
        return True

    def read(self, size: int = -1) -> bytes:
        if self._pos >= len(self._buf) and not self._more():
            return b""
        if size < 0:
            parts = [self._buf[self._pos:]]
            while self._more():
                parts.append(self._buf)
            self._buf, self._pos = b"", 0
            return b"".join(parts)
        out = self._buf[self._pos:self._pos + size]
        self._pos += len(out)
        return out

    def empty(self) -> bool:
        """True when the COPY produced no data at all (pyarrow rejects an empty CSV)."""
        return self._pos >= len(self._buf) and not self._more()

    def readinto(self, target: bytearray | memoryview) -> int:
        data = self.read(len(target))
        target[: len(data)] = data
        return len(data)


class _End:
    """The reader thread's last item: libpq's final status, or the error it raised."""

    __slots__ = ("nbytes", "error")

    def __init__(self, nbytes: int, error: BaseException | None = None) -> None:
        self.nbytes, self.error = nbytes, error
