"""The generic path's CSV formatting agrees with what PostgreSQL's COPY prints, value by value."""

from __future__ import annotations

import random
import struct
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import psycopg
import pytest
from psycopg import sql

from export_lib.render.csv_format import csv_field, format_decimal, format_float, format_timestamp


def _random_doubles(n: int) -> list[float]:
    rng = random.Random(20260301)
    values = [0.0, -0.0, 1e-4, 9.999999999999999e-05, 1e15, 999999999999999.9, 5e-324,
              1.7976931348623157e308, 0.1, 1 / 3, 2.5e-05, 123456789012345.6]
    while len(values) < n:
        bits = rng.getrandbits(64)
        value = struct.unpack("<d", bits.to_bytes(8, "little"))[0]
        if value == value and abs(value) != float("inf"):
            values.append(value)
        values.append(rng.uniform(-1e6, 1e6) * 10 ** rng.randint(-12, 18))
        # Large integers: where a shortest candidate can sit exactly on a rounding bound.
        values.append(float(rng.getrandbits(rng.randint(20, 80)) * rng.choice((1, -1))))
    return values


@pytest.mark.parametrize("kind", ["float8", "float4"])
def test_float_text_matches_postgres_for_random_bit_patterns(postgres_server, kind):
    values = _random_doubles(6000)
    if kind == "float4":
        values = [v for v in values if v == 0 or 1e-37 < abs(v) < 3e38]
    query = sql.SQL("SELECT x::float8, x::text FROM unnest(%s::{}[]) AS t(x)").format(
        sql.SQL(kind))
    with psycopg.connect(postgres_server.dsn) as conn:
        rows = conn.execute(query, (values,)).fetchall()
    mismatches = [(v, pg, format_float(v, kind == "float4")) for v, pg in rows
                  if format_float(v, kind == "float4") != pg]
    assert mismatches == []
    assert sum("e" in pg for _, pg in rows) > 1000  # the exponent layout is exercised


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "Asia/Kolkata", "America/St_Johns",
                                  "Europe/Amsterdam", "Pacific/Chatham"])
def test_timestamps_match_postgres_iso_datestyle(postgres_server, zone):
    rng = random.Random(zone)
    start = datetime(1880, 1, 1, tzinfo=UTC)
    values = [start + timedelta(microseconds=rng.randrange(0, 160 * 365 * 86400 * 10**6))
              for _ in range(500)]
    values += [datetime(2026, 3, 29, 0, 59, 59, 999999, tzinfo=UTC),
               datetime(2026, 3, 29, 1, tzinfo=UTC), datetime(2026, 10, 25, 1, tzinfo=UTC)]
    with psycopg.connect(postgres_server.dsn) as conn:
        conn.execute("SELECT set_config('TimeZone', %s, false)", (zone,))
        conn.execute("SET DateStyle = 'ISO, YMD'")
        rows = conn.execute("SELECT x::text FROM unnest(%s::timestamptz[]) WITH ORDINALITY "
                            "AS t(x, i) ORDER BY i", (values,)).fetchall()
    printed = [format_timestamp(v, ZoneInfo(zone)) for v in values]
    assert printed == [r[0] for r in rows]


@pytest.mark.parametrize(("value", "expected"), [
    pytest.param("plain", "plain", id="plain"),
    pytest.param("", '""', id="empty-string-differs-from-null"),
    pytest.param("a,b", '"a,b"', id="delimiter"),
    pytest.param('say "hi"', '"say ""hi"""', id="quote"),
    pytest.param("line\nbreak", '"line\nbreak"', id="lf"),
    pytest.param("cr\r", '"cr\r"', id="cr"),
    pytest.param(" padded ", " padded ", id="spaces-kept"),
    pytest.param("naïve €", "naïve €", id="utf8"),
])
def test_csv_field_quotes_like_copy(value, expected):
    assert csv_field(value, ",") == expected


def test_end_of_data_marker_is_quoted_only_as_a_single_column():
    assert csv_field("\\.", ",", single_column=True) == '"\\."'
    assert csv_field("\\.", ",") == "\\."


@pytest.mark.parametrize(("value", "scale", "expected"), [
    pytest.param(Decimal("1E-7"), None, "0.0000001", id="no-exponent"),
    pytest.param(Decimal("1.5E+3"), None, "1500", id="positive-exponent"),
    pytest.param(12.5, 2, "12.50", id="sqlite-real-to-scale"),
    pytest.param(Decimal("2.345"), 2, "2.35", id="half-away-from-zero"),
    pytest.param(Decimal("-2.345"), 2, "-2.35", id="negative-half"),
    pytest.param(Decimal("NaN"), 2, "NaN", id="nan"),
    pytest.param(7, 0, "7", id="integer"),
])
def test_format_decimal(value, scale, expected):
    assert format_decimal(value, scale) == expected
