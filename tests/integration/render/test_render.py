"""Rendering against real PostgreSQL (COPY fast path and generic path) and SQLite files."""

from __future__ import annotations

import hashlib
import io
import re
import sqlite3
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from export_lib.errors import ConfigError, SchemaDriftError, SourceError, WindowError
from export_lib.render.engine import RenderOptions, render
from export_lib.source.connections import parse_connection
from export_lib.source.database import open_source, source_columns, watermark, watermark_passed
from tests.fixtures.render import CUTOFF, T0, T1, spec

HEADER = b"company_id,event_time,campaign,clicks,spend,ctr,active,ingested_at\n"
EXPECTED_UTC = HEADER + (
    b'acme,2026-03-01 00:00:00+00,"spring, sale",10,12.50,0.25,true,2026-03-01 01:00:00+00\n'
    b'acme,2026-03-01 05:30:00.5+00,"say ""hi""\nbye",0,0.00,1e-07,false,'
    b"2026-03-01 06:00:00+00\n"
    b"acme,2026-03-01 12:00:00+00,,3,-7.10,-2.5e-05,true,2026-03-02 02:00:00+00\n"
    b'acme,2026-03-01 23:59:59.999999+00,"",,,1.5e+20,,2026-03-02 01:00:00+00\n'
)


def run(source, query=None, *, company="acme", start=T0, end=T1, cutoff=CUTOFF, engine="auto",
        **options):
    sink = io.BytesIO()
    result = render(source, query or spec(table_schema=_schema(source)), company_id=company,
                    window_start=start, window_end=end, cutoff=cutoff,
                    options=RenderOptions(**options), sink=sink, schedule_id="acme/daily",
                    engine=engine)
    return sink.getvalue(), result


def _schema(source):
    if source.dialect != "postgresql":
        return None
    return source.connection.execute("SELECT current_setting('test.schema', true)").fetchone()[0]


def test_every_engine_prints_the_same_documented_bytes(any_source):
    source, engine = any_source
    data, result = run(source, engine=engine)
    assert data == EXPECTED_UTC
    assert result.rows == 4  # header excluded, even from COPY's count
    assert result.bytes == len(data)
    assert result.sha256 == hashlib.sha256(data).hexdigest()
    assert result.reproducible is True


def test_same_run_twice_gives_identical_bytes_and_sha256(pg):
    first, r1 = run(pg)
    second, r2 = run(pg)
    assert first == second and r1.sha256 == r2.sha256 and r1.engine == "postgres_copy"


def test_window_is_half_open_and_late_rows_after_the_cutoff_are_excluded(pg):
    data, _ = run(pg)
    assert b"at end: excluded" not in data and b"before start" not in data
    assert b"late arrival" not in data
    data, result = run(pg, cutoff=None)
    assert b"late arrival" in data and result.rows == 5
    start_row, _ = run(pg, start=datetime(2026, 3, 2, tzinfo=UTC),
                       end=datetime(2026, 3, 2, 0, 0, 1, tzinfo=UTC))
    assert b"at end: excluded" in start_row  # the same instant as a window start is included


def test_another_tenants_rows_never_appear(pg):
    data, _ = run(pg)
    assert b"globex" not in data and b"GLOBEX" not in data
    hostile = spec(table_schema=_schema(pg),
                   filters=({"column": "campaign", "op": "=", "value": "GLOBEX SECRET"},))
    data, result = run(pg, hostile)
    assert result.rows == 0 and data == HEADER
    data, result = run(pg, company="acme' OR '1'='1")
    assert result.rows == 0 and data == HEADER
    data, result = run(pg, company="globex")
    assert result.rows == 1 and b"acme" not in data


def test_sql_in_a_filter_value_is_inert(pg, pg_schema):
    payload = "x'); DROP TABLE ad_metrics; --"
    query = spec(table_schema=pg_schema, filters=(
        {"column": "campaign", "op": "in", "value": [payload, "spring, sale"]},))
    data, result = run(pg, query)
    assert result.rows == 1 and b"spring, sale" in data
    assert "company_id" in source_columns(pg, "ad_metrics", pg_schema)


@pytest.mark.parametrize(("flt", "rows"), [
    pytest.param({"column": "clicks", "op": ">=", "value": 3}, 2, id="ge"),
    pytest.param({"column": "clicks", "op": "is_null"}, 1, id="is-null"),
    pytest.param({"column": "campaign", "op": "not_in", "value": ["spring, sale"]}, 2,
                 id="not-in-drops-nulls"),
    pytest.param({"column": "spend", "op": "!=", "value": Decimal("0.00")}, 2, id="ne-decimal"),
])
def test_filters(any_source, flt, rows):
    source, engine = any_source
    _, result = run(source, spec(table_schema=_schema(source), filters=(flt,)), engine=engine)
    assert result.rows == rows


@pytest.mark.parametrize(("delimiter", "line"), [
    pytest.param(";", b'acme;2026-03-01 00:00:00+00;spring, sale;10;12.50;0.25;true;', id="semi"),
    pytest.param("\t", b"acme\t2026-03-01 00:00:00+00\tspring, sale\t10\t12.50", id="tab"),
])
def test_delimiter_option(any_source, delimiter, line):
    source, engine = any_source
    data, _ = run(source, engine=engine, delimiter=delimiter)
    assert data.split(b"\n")[1].startswith(line)
    assert data.split(b"\n")[0] == HEADER.strip().replace(b",", delimiter.encode())


@pytest.mark.parametrize(("zone", "first"), [
    pytest.param("Europe/Berlin", b"2026-03-01 01:00:00+01", id="berlin"),
    pytest.param("Asia/Kolkata", b"2026-03-01 05:30:00+05:30", id="half-hour-offset"),
])
def test_local_time_timestamps(any_source, zone, first):
    source, engine = any_source
    data, _ = run(source, engine=engine, timestamps="local", timezone=zone)
    assert data.split(b"\n")[1].split(b",")[1] == first


def test_floats_are_printed_as_postgresql_prints_them(pg, pg_schema):
    values = [1e-07, 1.5e20, 1e15, 1e-300, 123456789012345.6, 5e-324, -0.0, 1e16]
    with psycopg.connect(pg.connection.info.dsn, password="exports", autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{pg_schema}".floats (company_id text, ts timestamptz, '
                     "x double precision, y real)")
        for v in values:
            conn.execute(f'INSERT INTO "{pg_schema}".floats VALUES (%s, %s, %s, %s)',
                         ("acme", T0, v, v if abs(v) > 1e-30 and abs(v) < 1e30 else 0.5))
    query = spec(table="floats", table_schema=pg_schema, columns=("x", "y"),
                 timestamp_column="ts", ingested_column=None)
    fast, result = run(pg, query)
    generic, _ = run(pg, query, engine="generic")
    assert fast == generic and result.rows == len(values) and result.reproducible is False
    # Rows come in total order (x ascending); y is real, so it keeps 8 significant digits.
    assert fast.split(b"\n")[1:-1] == [
        b"-0,0.5", b"5e-324,0.5", b"1e-300,0.5", b"1e-07,1e-07",
        b"123456789012345.6,1.2345679e+14", b"1e+15,1e+15", b"1e+16,1e+16", b"1.5e+20,1.5e+20"]


def test_zero_rows_give_a_header_only_csv_and_a_schema_only_parquet(any_source):
    source, engine = any_source
    empty = dict(start=datetime(2025, 1, 1, tzinfo=UTC), end=datetime(2025, 1, 2, tzinfo=UTC))
    data, result = run(source, engine=engine, **empty)
    assert data == HEADER and result.rows == 0
    data, result = run(source, engine=engine, format="parquet", **empty)
    table = pq.read_table(io.BytesIO(data))
    assert result.rows == 0 and table.num_rows == 0
    assert table.schema.names == list(spec().columns)


def test_parquet_schema_mapping_and_values(any_source):
    source, engine = any_source
    data, result = run(source, engine=engine, format="parquet")
    table = pq.read_table(io.BytesIO(data))
    assert table.schema.field("event_time").type == pa.timestamp("us", tz="UTC")
    assert table.schema.field("spend").type == pa.decimal128(12, 2)
    assert table.schema.field("clicks").type == pa.int64()
    assert table.schema.field("ctr").type == pa.float64()
    assert table.schema.field("active").type == pa.bool_()
    assert table.schema.field("campaign").type == pa.string()
    rows = table.to_pylist()
    assert result.rows == 4 and [r["campaign"] for r in rows] == [
        "spring, sale", 'say "hi"\nbye', None, ""]
    assert rows[1]["event_time"] == datetime(2026, 3, 1, 5, 30, 0, 500000, tzinfo=UTC)
    assert rows[2]["spend"] == Decimal("-7.10") and rows[3]["spend"] is None
    assert rows[1]["ctr"] == 1e-07 and rows[3]["active"] is None


def test_parquet_is_byte_identical_across_runs_and_engines(pg):
    first, r1 = run(pg, format="parquet", row_group_rows=1000)
    second, _ = run(pg, format="parquet", row_group_rows=1000)
    generic, r3 = run(pg, format="parquet", row_group_rows=1000, engine="generic")
    assert first == second == generic and r1.sha256 == r3.sha256
    assert r1.engine == "postgres_copy" and r3.engine == "generic"


def test_parquet_local_timestamps_carry_the_company_zone(pg):
    data, _ = run(pg, format="parquet", timestamps="local", timezone="Europe/Berlin")
    table = pq.read_table(io.BytesIO(data))
    assert table.schema.field("event_time").type == pa.timestamp("us", tz="Europe/Berlin")
    assert table.column("event_time")[0].as_py() == datetime(2026, 3, 1, tzinfo=UTC)


def test_dropped_column_is_schema_drift_naming_schedule_and_column(pg, pg_schema, pg_connection):
    with psycopg.connect(pg.connection.info.dsn, password="exports", autocommit=True) as conn:
        conn.execute(f'ALTER TABLE "{pg_schema}".ad_metrics DROP COLUMN spend')
    with pytest.raises(SchemaDriftError, match=r"schedule 'acme/daily': query\.columns\[4\]: "
                                               r"column 'spend' is not in"):
        run(pg)


def test_source_down_is_retryable_naming_the_connection_with_the_password_masked():
    from tests.services.ports import free_port

    conn = parse_connection("warehouse", f"postgresql://reader:S3cr3t-pw@127.0.0.1:{free_port()}/db")
    with pytest.raises(SourceError, match=r"source 'warehouse' \(postgresql://"
                                          r"127\.0\.0\.1:\d+\): connecting failed") as info:
        with open_source(conn):
            pass
    assert info.value.retryable is True
    assert "S3cr3t-pw" not in str(info.value) and info.value.__cause__ is None


def test_missing_sqlite_file_is_a_source_error(tmp_path):
    conn = parse_connection("demo_source", f"sqlite:///{tmp_path}/gone.db")
    with pytest.raises(SourceError, match=r"source 'demo_source'.*gone\.db' does not exist"):
        with open_source(conn):
            pass


def test_naive_or_empty_window_is_rejected(pg):
    with pytest.raises(WindowError, match="window_start 2026-03-01T00:00:00 is naive"):
        run(pg, start=datetime(2026, 3, 1))
    with pytest.raises(WindowError, match="empty window"):
        run(pg, start=T1, end=T0)


def test_watermark_is_the_max_ingested_at(any_source):
    source, _ = any_source
    query = spec(table_schema=_schema(source))
    assert watermark(source, query) == datetime(2026, 3, 4, tzinfo=UTC)
    assert watermark(source, query, company_id="globex") == datetime(2026, 3, 1, 10, tzinfo=UTC)
    now = datetime(2026, 3, 10, tzinfo=UTC)
    assert watermark_passed(source, query, window_end=T1, grace=timedelta(hours=2), now=now)
    assert not watermark_passed(source, query, window_end=T1, grace=timedelta(days=3), now=now)
    clockless = spec(table_schema=_schema(source), ingested_column=None)
    assert watermark_passed(source, clockless, window_end=T1, grace=timedelta(days=3), now=now)
    assert not watermark_passed(source, clockless, window_end=T1, grace=timedelta(days=9),
                                now=now)


def test_source_lost_after_opening_is_retryable(pg, pg_schema, postgres_server):
    with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pg.connection.info.backend_pid,))
    with pytest.raises(SourceError, match=r"source 'src' \(postgresql://127\.0\.0\.1:\d+\): "
                                          r"reading the columns of 'ad_metrics' failed") as info:
        run(pg, spec(table_schema=pg_schema))
    assert info.value.retryable is True


def test_parquet_row_groups_are_exact_whatever_the_batch_boundaries(pg, pg_schema):
    with psycopg.connect(pg.connection.info.dsn, password="exports", autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{pg_schema}".big AS SELECT \'acme\'::text AS company_id, '
                     "timestamptz '2026-03-01' + g * interval '1 second' AS ts, g::bigint AS n, "
                     "repeat('x', g % 200) AS pad FROM generate_series(0, 24999) g")
    query = spec(table="big", table_schema=pg_schema, columns=("ts", "n", "pad"),
                 timestamp_column="ts", ingested_column=None)
    fast, result = run(pg, query, format="parquet", row_group_rows=10_000)
    generic, _ = run(pg, query, format="parquet", row_group_rows=10_000, engine="generic")
    meta = pq.ParquetFile(io.BytesIO(fast)).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [
        10_000, 10_000, 5_000]
    assert fast == generic and result.rows == 25_000
    assert pq.read_table(io.BytesIO(fast)).column("n").to_pylist() == list(range(25_000))


@pytest.mark.parametrize(("options", "message"), [
    pytest.param({"timezone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'", id="zone"),
    pytest.param({"delimiter": '"'}, "Input should be ',', ';', '\\\\t' or '\\|'", id="quote"),
    pytest.param({"format": "xlsx"}, "unknown output format 'xlsx'; the installed formats are "
                 "csv, jsonl, parquet", id="format"),
])
def test_render_options_are_validated(options, message):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=message):
        RenderOptions(**options)


def test_sqlite_timestamps_in_any_iso_spelling_compare_as_instants(tmp_path):
    import sqlite3

    path = tmp_path / "mixed.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE m (company_id TEXT, ts DATETIME, n INTEGER)")
        db.executemany("INSERT INTO m VALUES ('acme', ?, ?)", [
            ("2026-03-01T05:00:00Z", 1),          # T and Z
            ("2026-03-01 06:00:00", 2),           # naive: UTC
            ("2026-03-02 00:30:00+01:00", 3),     # = 23:30 UTC on the 1st: inside
            ("2026-03-01T00:59:59-01:00", 4),     # = 01:59:59 UTC: inside
            ("2026-02-28 23:30:00-01:00", 5),     # = 00:30 UTC on the 1st: inside
            ("2026-03-02T00:00:00+00:00", 6),     # the window end: excluded
        ])
    db.close()
    query = spec(table="m", columns=("ts", "n"), timestamp_column="ts", ingested_column=None)
    with open_source(parse_connection("src", f"sqlite:///{path}")) as source:
        data, result = run(source, query)
    assert data == (b"ts,n\n2026-03-01 00:30:00+00,5\n2026-03-01 01:59:59+00,4\n"
                    b"2026-03-01 05:00:00+00,1\n2026-03-01 06:00:00+00,2\n"
                    b"2026-03-01 23:30:00+00,3\n")
    assert result.rows == 5


def test_log_lines_name_company_schedule_and_period(pg, caplog):
    with caplog.at_level("INFO", logger="export_lib.render.engine"):
        _, result = run(pg)
    assert (f"company=acme schedule=acme/daily period=[2026-03-01T00:00:00+00:00, "
            f"2026-03-02T00:00:00+00:00): rendered 4 rows, {result.bytes} bytes of csv "
            f"(postgres_copy), sha256 {result.sha256}") in caplog.text


def test_naive_timestamp_window_is_utc_and_local_output_is_refused(pg, pg_schema):
    """A ``timestamp`` (no zone) column holds UTC for the window, and ``timestamps: local``
    cannot apply to it (its wall time would be printed unchanged): refused, naming the column
    and the fix, before a row is read."""
    with psycopg.connect(pg.connection.info.dsn, password="exports", autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{pg_schema}".naive (company_id text, ts timestamp, n int)')
        conn.execute(f"INSERT INTO \"{pg_schema}\".naive VALUES ('acme', '2026-03-01 00:00', 1), "
                     "('acme', '2026-03-01 23:30', 2), ('acme', '2026-02-28 23:30', 3)")
    query = spec(table="naive", table_schema=pg_schema, columns=("ts", "n"),
                 timestamp_column="ts", ingested_column=None)
    expected = b"ts,n\n2026-03-01 00:00:00,1\n2026-03-01 23:30:00,2\n"
    for engine in ("auto", "generic"):
        data, _ = run(pg, query, engine=engine)
        assert data == expected, engine
        with pytest.raises(ConfigError, match=re.escape(
                "schedule 'acme/daily': csv.timestamps 'local' cannot apply to column 'ts' of "
                "naive: it is timestamp without time zone, a wall time with no zone, so the file "
                "would show it unchanged, not in local time; make the column timestamp with "
                "time zone (timestamptz) in the source, or set csv: {timestamps: utc}")):
            run(pg, query, engine=engine, timestamps="local", timezone="Asia/Tokyo")


def test_unsupported_connection_type_is_a_config_error_listing_the_valid_ones():
    from export_lib.errors import ConfigError

    conn = parse_connection("crm", "mysql://u:pw@127.0.0.1:3306/crm")
    with pytest.raises(ConfigError, match=r"connection 'crm': conn_type 'mysql' cannot be a query "
                                          r"source; valid options are: postgres, postgresql, "
                                          r"sqlite"):
        with open_source(conn):
            pass


HOSTILE_CELLS = ("=HYPERLINK(\"http://evil\")", "+1+2", "-3", "@SUM(A1)", "\tx", "\rx",
                 "plain", "a=b", "'=already", "")
T5 = datetime(2026, 3, 5, tzinfo=UTC)


def _add_hostile_rows(source) -> None:
    rows = [("acme", T5 + timedelta(minutes=i), cell, i, None, None, None, T5)
            for i, cell in enumerate(HOSTILE_CELLS)]
    if source.dialect == "postgresql":
        table = f'"{_schema(source)}".ad_metrics'
        with psycopg.connect(source.connection.info.dsn, password="exports",
                             autocommit=True) as conn, conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", rows)
        return
    path = source.connection.execute("PRAGMA database_list").fetchone()[2]
    with sqlite3.connect(path) as db:
        db.executemany("INSERT INTO ad_metrics VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       [(r[0], r[1].isoformat(), *r[2:7], r[7].isoformat()) for r in rows])
    db.close()


def test_formula_cells_are_neutralized_identically_by_every_engine(any_source):
    """CSV injection (issue 12): text cells starting with = + - @ tab CR get a leading ', in
    the COPY expression and in the generic formatter alike; other columns are untouched."""
    source, engine = any_source
    _add_hostile_rows(source)
    query = spec(table_schema=_schema(source), columns=("company_id", "campaign", "clicks"))
    data, _ = run(source, query, start=T5, end=T5 + timedelta(days=1), cutoff=None,
                  engine=engine)
    assert data == (b"company_id,campaign,clicks\n"
                    b"acme,\"'=HYPERLINK(\"\"http://evil\"\")\",0\n"
                    b"acme,'+1+2,1\nacme,'-3,2\nacme,'@SUM(A1),3\nacme,'\tx,4\n"
                    b"acme,\"'\rx\",5\nacme,plain,6\nacme,a=b,7\nacme,'=already,8\nacme,\"\",9\n")
    off, _ = run(source, query, start=T5, end=T5 + timedelta(days=1), cutoff=None,
                 engine=engine, neutralize_formulas=False)
    assert b"acme,-3,2\n" in off and b"acme,+1+2,1\n" in off
