"""The artifact sink: sha256 and byte count on the way, writes off the reader's thread.

:class:`HashingSink` coalesces writes into ~1 MiB chunks and hands them through a bounded
queue to one writer thread that hashes and writes them. ``hashlib`` and file writes release
the GIL, so the COPY read loop (or pyarrow's parser) keeps the socket drained while the
previous chunk is hashed and written; memory stays bounded at ``depth + 2`` chunks
(queued, being written, being filled).

A sink error (disk full, a staging upload that fails) is raised in the caller's thread on
its next ``write`` or at ``close``, as the original exception; chunks queued after it are
dropped, so the hash always covers exactly the bytes the sink accepted.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from types import TracebackType
from typing import BinaryIO

CHUNK = 1 << 20
DEPTH = 4


class HashingSink:
    """A write-only binary file over ``sink`` (which the caller owns: flushed, never closed).

    Use as a context manager, or call :meth:`close` (success) / :meth:`abort` (failure):
    both stop the writer thread. ``bytes`` and ``sha256`` are final after :meth:`close`.
    """

    def __init__(self, sink: BinaryIO, *, chunk: int = CHUNK, depth: int = DEPTH) -> None:
        self._sink = sink
        self._chunk = chunk
        self._hash = hashlib.sha256()
        self._buf = bytearray()
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self.bytes = 0
        self.closed = False
        self._thread = threading.Thread(target=self._drain, name="export-render-writer",
                                        daemon=True)
        self._thread.start()

    def __enter__(self) -> HashingSink:
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
            raise ValueError("write to a closed HashingSink")
        size = memoryview(data).nbytes
        if not self._buf and size >= self._chunk and isinstance(data, bytes):
            self._queue.put(data)  # already a big immutable chunk: no copy
        else:
            self._buf += data
            if len(self._buf) >= self._chunk:
                self._queue.put(bytes(self._buf))
                self._buf.clear()
        self.bytes += size
        return size

    def tell(self) -> int:
        return self.bytes

    def flush(self) -> None:
        # pyarrow calls this now and then; the real flush happens once, in close().
        if self._error is not None:
            raise self._error

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        """Write what is buffered, wait for the writer, flush ``sink``; raise its error."""
        if self.closed:
            return
        if self._buf:
            self._queue.put(bytes(self._buf))
            self._buf.clear()
        self._stop()
        if self._error is None:
            self._sink.flush()
        if self._error is not None:
            raise self._error

    def abort(self) -> None:
        """Stop the writer after a failure elsewhere; buffered bytes are dropped."""
        if not self.closed:
            self._buf.clear()
            self._stop()

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()

    def _stop(self) -> None:
        self.closed = True
        self._queue.put(None)  # the writer always drains, so this never blocks for long
        self._thread.join()

    def _drain(self) -> None:
        while (chunk := self._queue.get()) is not None:
            if self._error is not None:
                continue  # keep draining so the producer never blocks on a dead writer
            try:
                view = memoryview(chunk)
                while view:  # a raw file may accept only part of a chunk
                    written = self._sink.write(view)
                    view = view[len(view) if written is None else written:]
                self._hash.update(chunk)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                self._error = exc
