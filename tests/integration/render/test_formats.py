"""Output formats against a real PostgreSQL (and SQLite): every built-in format and compression
reads back the same rows, JSON Lines prints the same bytes on every engine, the sha256 is the
compressed file's, and a format installed as a package (a real dist-info on sys.path, found
through the ``export_lib.formats`` entry point group) is used by name."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import textwrap
from datetime import UTC, datetime
from decimal import Decimal

import pyarrow.parquet as pq
import pytest
import zstandard
from pydantic import ValidationError

from export_lib.errors import ConfigError, UnknownFormatError
from export_lib.formats import get_format, installed_formats
from export_lib.render.engine import RenderOptions
from tests.fixtures.render import spec
from tests.integration.render.test_render import EXPECTED_UTC, _schema, run

EXPECTED_JSONL = (
    b'{"company_id":"acme","event_time":"2026-03-01 00:00:00+00","campaign":"spring, sale",'
    b'"clicks":10,"spend":12.50,"ctr":0.25,"active":true,'
    b'"ingested_at":"2026-03-01 01:00:00+00"}\n'
    b'{"company_id":"acme","event_time":"2026-03-01 05:30:00.5+00",'
    b'"campaign":"say \\"hi\\"\\nbye","clicks":0,"spend":0.00,"ctr":1e-07,"active":false,'
    b'"ingested_at":"2026-03-01 06:00:00+00"}\n'
    b'{"company_id":"acme","event_time":"2026-03-01 12:00:00+00","campaign":null,"clicks":3,'
    b'"spend":-7.10,"ctr":-2.5e-05,"active":true,"ingested_at":"2026-03-02 02:00:00+00"}\n'
    b'{"company_id":"acme","event_time":"2026-03-01 23:59:59.999999+00","campaign":"",'
    b'"clicks":null,"spend":null,"ctr":1.5e+20,"active":null,'
    b'"ingested_at":"2026-03-02 01:00:00+00"}\n'
)


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


# The four rows of the window as Python values (NULL None, "" kept apart from it).
ROWS = [
    ("acme", _ts("2026-03-01 00:00:00+00:00"), "spring, sale", 10, Decimal("12.50"), 0.25,
     True, _ts("2026-03-01 01:00:00+00:00")),
    ("acme", _ts("2026-03-01 05:30:00.5+00:00"), 'say "hi"\nbye', 0, Decimal("0.00"), 1e-07,
     False, _ts("2026-03-01 06:00:00+00:00")),
    ("acme", _ts("2026-03-01 12:00:00+00:00"), None, 3, Decimal("-7.10"), -2.5e-05, True,
     _ts("2026-03-02 02:00:00+00:00")),
    ("acme", _ts("2026-03-01 23:59:59.999999+00:00"), "", None, None, 1.5e20, None,
     _ts("2026-03-02 01:00:00+00:00")),
]


def decompress(data: bytes, compression: str) -> bytes:
    if compression == "gzip":
        return gzip.decompress(data)
    if compression == "zstd":
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)) as reader:
            return reader.read()
    return data


def _pg_ts(text: str) -> datetime:
    return _ts(text + ":00" if text[-3] in "+-" else text)


def rows_of(fmt: str, plain: bytes) -> list[tuple]:
    """The file's rows as Python values, read with each format's ordinary reader."""
    if fmt == "parquet":
        table = pq.read_table(io.BytesIO(plain))
        return [tuple(r.values()) for r in table.to_pylist()]
    if fmt == "jsonl":
        records = [json.loads(line, parse_float=Decimal) for line in plain.splitlines()]
        return [(r["company_id"], _pg_ts(r["event_time"]), r["campaign"], r["clicks"],
                 r["spend"], None if r["ctr"] is None else float(r["ctr"]), r["active"],
                 _pg_ts(r["ingested_at"])) for r in records]
    # CSV: Python's csv module reads NULL and "" alike (the exact bytes are checked apart).
    reader = csv.reader(io.StringIO(plain.decode(), newline=""))
    next(reader)
    return [(c, _pg_ts(t), camp or None, int(n) if n else None, Decimal(s) if s else None,
             float(r), {"true": True, "false": False}.get(a), _pg_ts(i))
            for c, t, camp, n, s, r, a, i in reader]


def expected_rows(fmt: str) -> list[tuple]:
    return [(*r[:2], r[2] or None, *r[3:]) for r in ROWS] if fmt == "csv" else ROWS


@pytest.mark.parametrize(("fmt", "compression"), [
    ("csv", "none"), ("csv", "gzip"), ("csv", "zstd"), ("jsonl", "none"), ("jsonl", "gzip"),
    ("jsonl", "zstd"), ("parquet", "none")])
def test_every_format_reads_back_the_same_rows_from_postgresql(pg, fmt, compression):
    data, result = run(pg, format=fmt, compression=compression)
    assert (result.rows, result.engine) == (4, "postgres_copy")
    # The digest and the size are the delivered (compressed) file's.
    assert (result.sha256, result.bytes) == (hashlib.sha256(data).hexdigest(), len(data))
    label = {"none": "", "gzip": ".gz", "zstd": ".zst"}[compression]
    assert result.format == fmt + label
    plain = decompress(data, compression)
    assert rows_of(fmt, plain) == expected_rows(fmt)
    if fmt != "parquet":
        assert plain == {"csv": EXPECTED_UTC, "jsonl": EXPECTED_JSONL}[fmt]


def test_json_lines_are_the_same_bytes_on_every_engine(any_source):
    source, engine = any_source
    data, result = run(source, engine=engine, format="jsonl")
    assert (data, result.rows, result.format) == (EXPECTED_JSONL, 4, "jsonl")


def test_json_lines_write_timestamps_as_the_csv_does_in_the_company_zone(pg):
    options = {"timestamps": "local", "timezone": "Europe/Berlin"}
    text, _ = run(pg, **options)
    lines, _ = run(pg, format="jsonl", **options)
    csv_rows = list(csv.DictReader(io.StringIO(text.decode(), newline="")))
    records = [json.loads(line) for line in lines.splitlines()]
    assert [(r["event_time"], r["ingested_at"]) for r in records] == [
        (r["event_time"], r["ingested_at"]) for r in csv_rows]
    assert records[0]["event_time"] == "2026-03-01 01:00:00+01"


def _odd_table(conn, schema: str) -> None:
    conn.execute(
        f'CREATE TABLE "{schema}".odd (company_id text, ts timestamptz, t text, n numeric, '
        "f real, d date, naive timestamp, u uuid, j jsonb, b boolean)")
    conn.execute(
        f'INSERT INTO "{schema}".odd VALUES '
        "('acme', '2026-03-01 01:00+00', E'tab\\there\\\\ \\u001f \\u2028 é ☃ \"q\"', "
        "'NaN', 'Infinity', '2026-03-01', '2026-03-01 02:03:04.5', "
        "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"k\": [1, \"x\"]}', true), "
        "('acme', '2026-03-01 02:00+00', '=1+2', '-0.000100', '-Infinity', NULL, NULL, NULL, "
        "'[]', false)")


def test_json_lines_escape_strings_and_print_odd_values_identically_on_both_engines(
        pg, pg_schema, postgres_server):
    """Control characters, backslashes, non-ASCII, NaN/Infinity, uuid/jsonb/date/naive
    timestamps: the server's row_to_json and the generic encoder agree byte for byte."""
    import psycopg

    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        _odd_table(conn, pg_schema)
    query = dict(table="odd", table_schema=pg_schema,
                 columns=("company_id", "ts", "t", "n", "f", "d", "naive", "u", "j", "b"),
                 timestamp_column="ts", tenant_column="company_id", ingested_column=None)

    fast, fast_result = run(pg, spec(**query), format="jsonl")
    generic, generic_result = run(pg, spec(**query), format="jsonl", engine="generic")
    assert (fast_result.engine, generic_result.engine) == ("postgres_copy", "generic")
    assert fast == generic
    first, second = (json.loads(line) for line in fast.splitlines())
    assert first == {"company_id": "acme", "ts": "2026-03-01 01:00:00+00",
                     "t": 'tab\there\\ \x1f \u2028 é ☃ "q"', "n": "NaN", "f": "Infinity",
                     "d": "2026-03-01", "naive": "2026-03-01 02:03:04.5",
                     "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "j": '{"k": [1, "x"]}',
                     "b": True}
    # Not neutralised (no spreadsheet opens JSON); numeric keeps the server's digits.
    assert (second["t"], second["f"], second["d"], second["j"]) == (
        "=1+2", "-Infinity", None, "[]")
    assert b'"n":-0.000100,' in fast.splitlines()[1]


def test_a_compressed_file_is_the_same_bytes_on_every_render(pg):
    """gzip without a time or name in its header: unchanged rows give an unchanged sha256."""
    first, r1 = run(pg, format="jsonl", compression="gzip")
    second, r2 = run(pg, format="jsonl", compression="gzip")
    assert first == second and r1.sha256 == r2.sha256
    assert first[4:8] == b"\0\0\0\0"  # MTIME: none


def test_parquet_cannot_be_compressed_again_and_the_error_names_the_fix():
    with pytest.raises(ValidationError, match=(
            r"compression 'gzip' cannot wrap format 'parquet': a parquet file compresses its "
            r"own content, .* remove 'compression' \(or set it to none\), or choose format "
            r"'csv' or 'jsonl'")):
        RenderOptions(format="parquet", compression="gzip")


def test_an_unknown_format_names_the_installed_ones():
    with pytest.raises(UnknownFormatError, match=(
            r"^unknown output format 'xlsx'; the installed formats are csv, jsonl, parquet\. "
            r"Use one of them, or install the package that registers 'xlsx' under the "
            r"export_lib.formats entry point group$")):
        get_format("xlsx")


PLUGIN = '''
from export_lib.formats import OutputFormat


class PipeFormat(OutputFormat):
    """Pipe-separated values with no quoting: a toy third-party format."""

    name = "pipes"
    extension = "psv"
    content_type = "text/plain"

    def write_rows(self, job, fetch, out):
        out.write(("|".join(job.columns) + "\\n").encode())
        rows = 0
        while batch := fetch():
            out.write("".join("|".join("" if v is None else str(v) for v in row) + "\\n"
                              for row in batch).encode())
            rows += len(batch)
        return rows
'''


@pytest.fixture()
def installed_plugin(tmp_path, monkeypatch):
    """A package installed the way pip leaves one: its module and a dist-info directory whose
    entry_points.txt registers the format, on sys.path (importlib.metadata finds it there)."""
    site = tmp_path / "site"
    (site / "pipes_format").mkdir(parents=True)
    (site / "pipes_format" / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    info = site / "pipes_format-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pipes-format\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[export_lib.formats]\npipes = pipes_format:PipeFormat\n"
        "pipes_with_a_long_name = pipes_format:PipeFormat\n")
    monkeypatch.syspath_prepend(str(site))
    yield
    from export_lib.formats import registry

    registry._loaded.pop("pipes", None)


def test_a_format_installed_as_a_package_is_found_by_its_entry_point_and_used(
        pg, installed_plugin):
    assert installed_formats() == ["csv", "jsonl", "parquet", "pipes", "pipes_with_a_long_name"]
    data, result = run(pg, format="pipes", compression="zstd")
    # No COPY plan: the generic path feeds it batches, on PostgreSQL too.
    assert (result.format, result.engine, result.rows) == ("pipes.zst", "generic", 4)
    lines = decompress(data, "zstd").decode().splitlines()
    assert lines[0] == "company_id|event_time|campaign|clicks|spend|ctr|active|ingested_at"
    assert lines[1] == ("acme|2026-03-01 00:00:00+00:00|spring, sale|10|12.50|0.25|True|"
                        "2026-03-01 01:00:00+00:00")
    with pytest.raises(UnknownFormatError, match=r"installed formats are csv, jsonl, parquet, "
                                                 r"pipes, pipes_with_a_long_name\. "):
        get_format("pipe")
    # The ledger records the name (and .zst) in 20 characters.
    with pytest.raises(ConfigError, match=(
            r"^output format 'pipes_with_a_long_name' \(entry point 'pipes_format:PipeFormat' "
            r"of package pipes-format 1\.0\) has a name of 22 characters; the ledger records "
            r"at most 16 \(with \.zst\): register it under a shorter name$")):
        get_format("pipes_with_a_long_name")


@pytest.mark.parametrize("columns", [
    ("event_time", "company_id"), ("company_id",), ("clicks", "company_id", "campaign")],
    ids=["tenant-last", "tenant-only", "tenant-between"])
def test_json_lines_of_any_column_order_are_the_same_on_both_engines(pg, columns):
    query = spec(table_schema=_schema(pg), columns=columns)
    fast, fast_result = run(pg, query, format="jsonl")
    generic, _ = run(pg, query, format="jsonl", engine="generic")
    assert fast_result.engine == "postgres_copy" and fast == generic
    assert [list(json.loads(line)) for line in fast.splitlines()] == [list(columns)] * 4
