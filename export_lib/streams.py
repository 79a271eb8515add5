"""A write-only binary file whose pieces are consumed on a thread of their own.

Writes are coalesced into ~1 MiB pieces and handed through a bounded queue to one thread, so
the caller (the COPY read loop, pyarrow's parser) keeps its socket drained while the previous
piece is consumed: hashed and written (:class:`export_lib.render.sink.HashingSink`) or
compressed (:class:`export_lib.formats.compression.CompressingWriter`). hashlib, zlib,
zstandard and file writes release the GIL, so the two really run side by side; memory stays
bounded at ``depth + 2`` pieces (queued, being consumed, being filled).

An error of the consumer is raised in the caller's thread on its next ``write`` or at
``close``, as the original exception; pieces queued after it are dropped.
"""

from __future__ import annotations

import queue
import threading
from types import TracebackType
from typing import Self

CHUNK = 1 << 20
DEPTH = 4


class ThreadedWriter:
    """Subclasses say what happens to a piece (:meth:`_consume`, on the thread) and at the
    stream's successful end (:meth:`_finish`, in the caller's thread, after the last piece).

    Use as a context manager, or call :meth:`close` (success) / :meth:`abort` (failure: the
    buffered bytes are dropped, :meth:`_finish` is not called); both stop the thread.
    """

    def __init__(self, *, chunk: int = CHUNK, depth: int = DEPTH, name: str) -> None:
        self._chunk = chunk
        self._buf = bytearray()
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._count = 0
        self.closed = False
        self._thread = threading.Thread(target=self._drain, name=name, daemon=True)
        self._thread.start()

    def _consume(self, piece: bytes) -> None:
        raise NotImplementedError

    def _finish(self) -> None:
        """The stream ended well (every piece consumed)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def write(self, data: bytes | bytearray | memoryview) -> int:
        if self._error is not None:
            raise self._error
        if self.closed:
            raise ValueError(f"write to a closed {type(self).__name__}")
        size = memoryview(data).nbytes
        if not self._buf and size >= self._chunk and isinstance(data, bytes):
            self._queue.put(data)  # already a big immutable piece: no copy
        else:
            self._buf += data
            if len(self._buf) >= self._chunk:
                self._queue.put(bytes(self._buf))
                self._buf.clear()
        self._count += size
        return size

    def tell(self) -> int:
        return self._count

    def flush(self) -> None:
        # pyarrow calls this now and then; the real flush happens once, in close().
        if self._error is not None:
            raise self._error

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        """Consume what is buffered, wait for the thread, end the stream; raise its error."""
        if self.closed:
            return
        if self._buf:
            self._queue.put(bytes(self._buf))
            self._buf.clear()
        self._stop()
        if self._error is None:
            try:
                self._finish()
            except BaseException as exc:  # noqa: BLE001 - raised below, like the thread's
                self._error = exc
        if self._error is not None:
            raise self._error

    def abort(self) -> None:
        """Stop the thread after a failure elsewhere; buffered bytes are dropped."""
        if not self.closed:
            self._buf.clear()
            self._stop()

    def _stop(self) -> None:
        self.closed = True
        self._queue.put(None)  # the thread always drains, so this never blocks for long
        self._thread.join()

    def _drain(self) -> None:
        while (piece := self._queue.get()) is not None:
            if self._error is not None:
                continue  # keep draining so the producer never blocks on a dead thread
            try:
                self._consume(piece)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                self._error = exc
