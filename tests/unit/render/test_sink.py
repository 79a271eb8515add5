"""HashingSink: the writer thread hashes exactly what the sink accepted and reports its errors."""

from __future__ import annotations

import hashlib
import io
import threading

import pytest

from export_lib.render.sink import HashingSink


class FailingSink(io.BytesIO):
    """Accepts ``limit`` bytes, then fails like a full disk."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def write(self, data) -> int:
        if self.tell() + len(data) > self.limit:
            raise OSError(28, "No space left on device")
        return super().write(data)


def _writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "export-render-writer"]


def test_small_and_large_writes_arrive_in_order_with_the_file_sha256(tmp_path):
    pieces = [b"a" * 10, bytearray(b"b" * 3_000_000), memoryview(b"c" * 700_000), b"d" * 5]
    path = tmp_path / "out.bin"
    with path.open("wb") as file, HashingSink(file, chunk=1 << 20, depth=2) as out:
        for piece in pieces:
            assert out.write(piece) == len(piece)
        assert out.tell() == sum(len(p) for p in pieces)
    data = path.read_bytes()
    assert data == b"".join(bytes(p) for p in pieces)
    assert out.bytes == len(data) and out.sha256 == hashlib.sha256(data).hexdigest()
    assert not _writer_threads()


def test_a_sink_error_reaches_the_caller_and_the_hash_covers_only_accepted_bytes():
    sink = FailingSink(limit=3 << 20)
    out = HashingSink(sink, chunk=1 << 20, depth=2)
    with pytest.raises(OSError, match="No space left"):
        for _ in range(64):  # 64 MiB: far past the limit, the error must surface on a write
            out.write(b"x" * (1 << 20))
        out.close()
    out.abort()
    assert not _writer_threads()
    accepted = sink.getvalue()
    assert len(accepted) == 3 << 20
    assert out.sha256 == hashlib.sha256(accepted).hexdigest()


def test_a_sink_error_on_the_last_chunk_is_raised_by_close():
    sink = FailingSink(limit=10)
    out = HashingSink(sink)
    out.write(b"y" * 100)  # buffered: nothing reaches the sink before close
    with pytest.raises(OSError, match="No space left"):
        out.close()
    assert not _writer_threads() and sink.getvalue() == b""


def test_abort_after_a_failure_elsewhere_stops_the_writer_and_drops_the_buffer():
    sink = io.BytesIO()
    with pytest.raises(RuntimeError, match="boom"), HashingSink(sink) as out:
        out.write(b"z" * 10)
        raise RuntimeError("boom")
    assert out.closed and not _writer_threads() and sink.getvalue() == b""
