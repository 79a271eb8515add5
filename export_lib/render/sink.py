"""The artifact sink: sha256 and byte count on the way, writes off the reader's thread.

:class:`HashingSink` coalesces writes into ~1 MiB chunks and hands them through a bounded
queue to one writer thread that hashes and writes them
(:class:`export_lib.streams.ThreadedWriter`). ``hashlib`` and file writes release the GIL, so
the COPY read loop (or pyarrow's parser) keeps the socket drained while the previous chunk is
hashed and written; memory stays bounded at ``depth + 2`` chunks (queued, being written,
being filled).

A sink error (disk full, a staging upload that fails) is raised in the caller's thread on
its next ``write`` or at ``close``, as the original exception; chunks queued after it are
dropped, so the hash always covers exactly the bytes the sink accepted.
"""

from __future__ import annotations

import hashlib
from typing import BinaryIO

from export_lib.streams import CHUNK, DEPTH, ThreadedWriter

__all__ = ["CHUNK", "DEPTH", "HashingSink"]


class HashingSink(ThreadedWriter):
    """A write-only binary file over ``sink`` (which the caller owns: flushed, never closed).

    Use as a context manager, or call :meth:`close` (success) / :meth:`abort` (failure):
    both stop the writer thread. ``bytes`` and ``sha256`` are final after :meth:`close`.
    """

    def __init__(self, sink: BinaryIO, *, chunk: int = CHUNK, depth: int = DEPTH) -> None:
        self._sink = sink
        self._hash = hashlib.sha256()
        super().__init__(chunk=chunk, depth=depth, name="export-render-writer")

    @property
    def bytes(self) -> int:
        return self._count

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()

    def _consume(self, piece: bytes) -> None:
        view = memoryview(piece)
        while view:  # a raw file may accept only part of a piece
            written = self._sink.write(view)
            view = view[len(view) if written is None else written:]
        self._hash.update(piece)

    def _finish(self) -> None:
        self._sink.flush()
