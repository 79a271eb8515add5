"""The PostgreSQL COPY path end to end: the one reader, the writer thread, failures mid-stream."""

from __future__ import annotations

import hashlib
import io

import psycopg
import pyarrow.parquet as pq
import pytest

from export_lib.errors import SourceError
from export_lib.formats.registry import parse_label
from export_lib.render.engine import RenderOptions, render
from tests.fixtures.render import T0, T1, spec

ROWS = 30_000  # ~3 MB of CSV: several 1 MiB chunks through the writer thread


@pytest.fixture()
def big(pg_source, pg_schema):
    with psycopg.connect(pg_source.connection.info.dsn, password="exports",
                         autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{pg_schema}".big AS SELECT \'acme\'::text AS company_id, '
                     "timestamptz '2026-03-01' + g * interval '1 second' AS ts, g::bigint AS n, "
                     f"repeat('x', g % 200) AS pad FROM generate_series(0, {ROWS - 1}) g")
    return pg_source, pg_schema


def _render(source, table, sink, label, columns=("ts", "n", "pad"), engine="auto"):
    """``label``: a format, or a format and its compression (``jsonl.gz``)."""
    source, schema = source
    query = spec(table=table, table_schema=schema, columns=columns, timestamp_column="ts",
                 ingested_column=None)
    fmt, compression = parse_label(label)
    return render(source, query, company_id="acme", window_start=T0, window_end=T1, cutoff=None,
                  options=RenderOptions(format=fmt, compression=compression), sink=sink,
                  schedule_id="acme/daily", engine=engine)


@pytest.mark.parametrize("fmt", ["csv", "parquet", "jsonl", "jsonl.gz", "csv.zst"])
def test_sha256_and_size_are_those_of_the_written_file(big, tmp_path, fmt):
    path = tmp_path / f"out.{fmt}"
    with path.open("wb") as sink:
        result = _render(big, "big", sink, fmt)
    data = path.read_bytes()
    assert result.rows == ROWS and result.engine == "postgres_copy"
    assert result.bytes == len(data) and result.sha256 == hashlib.sha256(data).hexdigest()
    generic = io.BytesIO()
    _render(big, "big", generic, fmt, engine="generic")
    assert generic.getvalue() == data  # the fast path and the generic path agree byte for byte
    if fmt == "parquet":
        assert pq.read_table(path).column("n").to_pylist() == list(range(ROWS))


class FullDisk(io.BytesIO):
    def write(self, data) -> int:
        if self.tell() + len(data) > 50_000:
            raise OSError(28, "No space left on device")
        return super().write(data)


@pytest.mark.parametrize("fmt", ["csv", "parquet", "jsonl.gz"])
def test_a_sink_error_on_the_writer_thread_fails_the_render(big, fmt):
    with pytest.raises(OSError, match="No space left on device"):
        _render(big, "big", FullDisk(), fmt)


class KillsTheServerOnFirstWrite(io.BytesIO):
    """Terminates the source's backend as the first chunk lands: the COPY dies mid-stream."""

    def __init__(self, dsn: str, pid: int) -> None:
        super().__init__()
        self.dsn, self.pid = dsn, pid

    def write(self, data) -> int:
        if self.pid:
            with psycopg.connect(self.dsn, password="exports", autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (self.pid,))
            self.pid = 0
        return super().write(data)


# JSON Lines reads through the same CopyStream as Parquet: its failure path is Parquet's.
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_copy_failing_mid_stream_gives_an_error_never_a_result(big, fmt):
    source, schema = big
    with psycopg.connect(source.connection.info.dsn, password="exports",
                         autocommit=True) as conn:
        # ~45 MB of CSV: far more than the socket buffers hold when the server dies.
        conn.execute(f'CREATE TABLE "{schema}".huge AS SELECT \'acme\'::text AS company_id, '
                     "timestamptz '2026-03-01' + g * interval '1 millisecond' AS ts, "
                     "g::bigint AS n, md5(g::text) || repeat('x', g % 100) AS pad "
                     "FROM generate_series(0, 400000) g")
    sink = KillsTheServerOnFirstWrite(source.connection.info.dsn,
                                      source.connection.info.backend_pid)
    with pytest.raises(SourceError, match="connection|terminat|server closed"):
        _render(big, "huge", sink, fmt)
    assert sink.pid == 0  # the server died after output had started
