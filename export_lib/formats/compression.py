"""Streamed compression of an artifact: gzip or zstd around a format's bytes, on a thread.

:func:`compressed` returns a writable binary file over ``out`` (the hashing sink): what the
format writes is coalesced into ~1 MiB pieces and handed through a bounded queue to one
compressor thread, which writes the compressed bytes to ``out``. zlib and zstandard release
the GIL while they work, so compression runs beside the COPY read loop instead of between its
reads; memory stays bounded at ``depth + 2`` pieces whatever the export's size. The hashing
sink sees the compressed bytes: the artifact's sha256 is the sha256 of the file delivered.

The output is deterministic (the same rows give the same bytes, so a re-render of unchanged
data is recognised as unchanged): gzip through zlib with ``wbits=31`` writes no file name and a
zero modification time; zstd frames carry no time at all.
"""

from __future__ import annotations

import zlib
from typing import Any, BinaryIO, Literal

from export_lib.streams import ThreadedWriter

Compression = Literal["none", "gzip", "zstd"]
# codec -> (file name suffix without the dot, media type of the compressed file)
CODECS: dict[str, tuple[str, str]] = {"gzip": ("gz", "application/gzip"),
                                      "zstd": ("zst", "application/zstd")}
# gzip's own default; zstd's default level 3 compresses better than gzip 6 at several times
# its speed.
GZIP_LEVEL = 6
ZSTD_LEVEL = 3
CHUNK = 1 << 20
DEPTH = 4


def suffix(compression: str) -> str:
    """``.gz`` / ``.zst`` after the format's extension; empty for ``none``."""
    return "." + CODECS[compression][0] if compression in CODECS else ""


def compressor(compression: str) -> Any:
    """A fresh streaming compressor object with ``compress(bytes)`` and ``flush()``."""
    if compression == "gzip":
        return zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # 31: a gzip member
    if compression == "zstd":
        import zstandard

        return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compressobj()
    raise ValueError(f"unknown compression {compression!r}; use none, gzip or zstd")


def decompressed_reader(compression: str, stream: BinaryIO) -> BinaryIO:
    """A readable binary file of ``stream``'s decompressed bytes (for checks of a staged file)."""
    if compression == "gzip":
        import gzip

        return gzip.GzipFile(fileobj=stream, mode="rb")  # type: ignore[return-value]
    if compression == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(stream)  # type: ignore[return-value]
    return stream


def compressed(out: BinaryIO, compression: str) -> BinaryIO | CompressingWriter:
    """``out`` itself for ``none``, else a :class:`CompressingWriter` over it."""
    if compression == "none":
        return out
    return CompressingWriter(out, compression)


class CompressingWriter(ThreadedWriter):
    """A write-only binary file compressing into ``out`` on its own thread.

    Use as a context manager, or call :meth:`close` (success: the stream's end is written) or
    :meth:`abort` (failure: nothing more is written). An error of the compressor or of ``out``
    is raised in the caller's thread on its next :meth:`write` or at :meth:`close`.
    """

    def __init__(self, out: BinaryIO, compression: str, *, chunk: int = CHUNK,
                 depth: int = DEPTH) -> None:
        self._out = out
        self._codec = compressor(compression)
        super().__init__(chunk=chunk, depth=depth, name="export-render-compressor")

    @property
    def bytes_in(self) -> int:
        return self._count

    def _consume(self, piece: bytes) -> None:
        if packed := self._codec.compress(piece):
            self._out.write(packed)

    def _finish(self) -> None:
        self._out.write(self._codec.flush())
