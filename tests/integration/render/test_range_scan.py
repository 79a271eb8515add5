"""One COPY for many periods (ADR 0038) on a real PostgreSQL: each period's file is the file a
render of that period alone writes (same sha256), under its own cutoff; the scan streams (it
never holds more than one chunk); a source failure mid-scan fails the period being written and
stops the scan."""

from __future__ import annotations

import hashlib
import io
from datetime import datetime, timedelta

import psycopg
import pytest

from export_lib.errors import RenderError, SourceError
from export_lib.formats.registry import parse_label
from export_lib.render import copy as copy_module
from export_lib.render.engine import RenderOptions, render
from export_lib.render.range_scan import RangeScan, Window
from tests.fixtures.render import T0, spec
from tests.integration.render.test_streaming import KillsTheServerOnFirstWrite


def _h(hour: float) -> datetime:
    return T0 + timedelta(hours=hour)


# tests/fixtures/render.py's rows of acme on 1 March: 00:00 (ingested 01:00), 05:30 (a quote,
# a comma-free newline), 08:00 (ingested 4 March: late), 12:00 (NULL campaign, ingested
# 2 March 02:00), 23:59:59.999999 (an empty string and NULLs); globex at 09:00.
WINDOWS = [
    Window(_h(0), _h(5), _h(0.5)),         # its row was ingested after the cutoff: empty
    Window(_h(5), _h(6), _h(48)),          # 'say "hi"\nbye'
    Window(_h(6), _h(8), _h(48)),          # no rows at all
    Window(_h(8), _h(12.5), _h(27)),       # 12:00 only: the late 08:00 row is after its cutoff
    Window(_h(12.5), _h(24), _h(96)),      # a cutoff that would take the late row in
]
ROWS = [0, 2, 0, 1, 1]  # with a NaN row added to the second (JSON Lines quotes it)


class CopyCounter:
    """Counts the COPY statements run through the one COPY reader."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.statements: list[str] = []
        original = copy_module.CopyOut.__init__

        def counting(copy, conn, query) -> None:
            self.statements.append(query.as_string(conn))
            original(copy, conn, query)

        monkeypatch.setattr(copy_module.CopyOut, "__init__", counting)


def _alone(source, query, window, options) -> tuple[bytes, int]:
    sink = io.BytesIO()
    result = render(source, query, company_id="acme", window_start=window.start,
                    window_end=window.end, cutoff=window.cutoff, options=options, sink=sink,
                    schedule_id="acme/daily")
    assert result.sha256 == hashlib.sha256(sink.getvalue()).hexdigest()
    return sink.getvalue(), result.rows


@pytest.mark.parametrize("label,timestamps", [("csv", "utc"), ("csv.gz", "local"),
                                              ("csv.zst", "utc"), ("jsonl", "local"),
                                              ("jsonl.gz", "utc")])
def test_each_period_is_the_file_of_its_own_render(pg_source, pg_schema, monkeypatch, label,
                                                   timestamps):
    with psycopg.connect(pg_source.connection.info.dsn, password="exports",
                         autocommit=True) as conn:
        conn.execute(f'INSERT INTO "{pg_schema}".ad_metrics VALUES (%s, %s, %s, %s, %s, %s, '
                     "%s, %s)", ("acme", _h(5.75), "not a number", 1, 1, float("nan"), True,
                                 _h(6)))
    fmt, compression = parse_label(label)
    options = RenderOptions(format=fmt, compression=compression, timestamps=timestamps,
                            timezone="Europe/Berlin")
    query = spec(table_schema=pg_schema)
    copies = CopyCounter(monkeypatch)
    files = []
    with RangeScan(pg_source, query, company_id="acme", windows=WINDOWS, options=options,
                   schedule_id="acme/daily") as scan:
        for index in range(len(WINDOWS)):
            sink = io.BytesIO()
            result = scan.render_period(index, sink)
            assert (result.sha256, result.bytes) == (
                hashlib.sha256(sink.getvalue()).hexdigest(), len(sink.getvalue()))
            files.append((sink.getvalue(), result.rows))
    assert len(copies.statements) == 1 and "width_bucket" in copies.statements[0]
    assert scan.served == set(range(len(WINDOWS))) and scan.broken is None
    assert [rows for _, rows in files] == ROWS
    for window, got in zip(WINDOWS, files, strict=True):
        assert got == _alone(pg_source, query, window, options), window
    if label == "jsonl":
        assert b'"campaign":"say \\"hi\\"\\nbye"' in files[1][0]
        assert b'"ctr":"NaN"' in files[1][0]
    if label == "csv":
        assert b'"say ""hi""\nbye"' in files[1][0]
        assert b"late arrival" not in b"".join(data for data, _ in files)
        assert b"GLOBEX" not in b"".join(data for data, _ in files)


def test_a_period_passed_over_is_dropped_and_the_next_still_gets_its_rows(pg_source, pg_schema):
    options = RenderOptions()
    query = spec(table_schema=pg_schema)
    with RangeScan(pg_source, query, company_id="acme", windows=WINDOWS,
                   options=options) as scan:
        scan.render_period(0, io.BytesIO())
        sink = io.BytesIO()
        scan.render_period(3, sink)  # periods 2 and 3 never asked for
    assert sink.getvalue() == _alone(pg_source, query, WINDOWS[3], options)[0]
    assert scan.served == {0, 3}


BIG = 200_000


@pytest.fixture()
def big(pg_source, pg_schema):
    with psycopg.connect(pg_source.connection.info.dsn, password="exports",
                         autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{pg_schema}".big AS SELECT \'acme\'::text AS company_id, '
                     "timestamptz '2026-03-01' + g * interval '400 milliseconds' AS ts, "
                     "g::bigint AS n, md5(g::text) || repeat('x', g % 50) AS pad "
                     f"FROM generate_series(0, {BIG - 1}) g")
    return spec(table="big", table_schema=pg_schema, columns=("ts", "n", "pad"),
                timestamp_column="ts", ingested_column=None)


def test_200k_rows_over_four_periods_stream_through_one_chunk(pg_source, big):
    """Memory is bounded by construction (one piece at a time, written before the next is
    read); this checks the splitter never held more than its chunk."""
    windows = [Window(T0 + timedelta(hours=6 * i), T0 + timedelta(hours=6 * i + 6), None)
               for i in range(4)]  # 200,000 rows x 0.4 s = 22.2 h
    options = RenderOptions()
    chunk = 64 << 10
    digests = []
    with RangeScan(pg_source, big, company_id="acme", windows=windows, options=options,
                   chunk=chunk) as scan:
        for index in range(4):
            sink = io.BytesIO()
            result = scan.render_period(index, sink)
            digests.append((result.sha256, result.rows))
    assert 0 < scan.splitter.max_held <= chunk
    assert sum(rows for _, rows in digests) == BIG
    for window, (sha, rows) in zip(windows, digests, strict=True):
        data, alone_rows = _alone(pg_source, big, window, options)
        assert (sha, rows) == (hashlib.sha256(data).hexdigest(), alone_rows)


def test_a_source_failure_mid_scan_fails_the_period_being_written(pg_source, pg_schema):
    with psycopg.connect(pg_source.connection.info.dsn, password="exports",
                         autocommit=True) as conn:
        # ~35 MB of CSV in the second period: far more than the socket buffers hold.
        conn.execute(f'CREATE TABLE "{pg_schema}".huge AS SELECT \'acme\'::text AS company_id, '
                     "timestamptz '2026-03-01 12:00' + g * interval '100 milliseconds' AS ts, "
                     "g::bigint AS n, md5(g::text) || repeat('x', 60) AS pad "
                     "FROM generate_series(0, 350000) g")
        conn.execute(f"INSERT INTO \"{pg_schema}\".huge VALUES ('acme', '2026-03-01 01:00Z', "
                     "-1, 'first period')")
    query = spec(table="huge", table_schema=pg_schema, columns=("ts", "n", "pad"),
                 timestamp_column="ts", ingested_column=None)
    windows = [Window(T0, _h(12), None), Window(_h(12), _h(24), None),
               Window(_h(24), _h(36), None)]
    info = pg_source.connection.info
    with RangeScan(pg_source, query, company_id="acme", windows=windows,
                   options=RenderOptions()) as scan:
        first = io.BytesIO()
        assert scan.render_period(0, first).rows == 1
        killer = KillsTheServerOnFirstWrite(info.dsn, info.backend_pid)
        with pytest.raises(SourceError, match="one read for 3 periods.*(connection|terminat)"):
            scan.render_period(1, killer)
        assert killer.pid == 0 and isinstance(scan.broken, SourceError)
        with pytest.raises(RenderError, match="the range scan failed before this period"):
            scan.render_period(2, io.BytesIO())
    assert scan.served == {0}
    assert first.getvalue() == b"ts,n,pad\n2026-03-01 01:00:00+00,-1,first period\n"


def test_a_scan_is_late_at_half_the_source_statement_timeout(pg_connection, pg_schema):
    """One statement serves every period: from half the source's statement_timeout on, the
    batch reads the rest one by one instead of letting the timeout fail a period."""
    import dataclasses
    import time

    from export_lib.source.database import open_source

    timed = dataclasses.replace(pg_connection,
                                extra={**pg_connection.extra, "statement_timeout": "1s"})
    with open_source(timed) as source, RangeScan(
            source, spec(table_schema=pg_schema), company_id="acme", windows=WINDOWS,
            options=RenderOptions()) as scan:
        scan.render_period(0, io.BytesIO())
        assert not scan.late
        time.sleep(0.6)
        assert scan.late
        assert scan.render_period(1, io.BytesIO()).rows == 1  # not refused: the caller's call
    with open_source(pg_connection) as source, RangeScan(  # the default: 30 min
            source, spec(table_schema=pg_schema), company_id="acme", windows=WINDOWS,
            options=RenderOptions()) as scan:
        time.sleep(0.6)
        assert not scan.late


@pytest.mark.parametrize("windows", [
    [Window(_h(0), _h(5), None), Window(_h(6), _h(8), None)],         # a gap
    [Window(_h(0), _h(5), None), Window(_h(4), _h(8), None)],         # an overlap
    [Window(_h(0), _h(5), None), Window(_h(5), _h(8), _h(9))],        # a cutoff on one only
])
def test_a_scan_is_refused_windows_it_cannot_split_exactly(pg_source, windows):
    with pytest.raises(RenderError, match=r"a range scan reads contiguous windows with a "
                       r"cutoff on all or none: \[2026-03-01T00:00:00\+00:00, "):
        RangeScan(pg_source, spec(), company_id="acme", windows=windows,
                  options=RenderOptions())
