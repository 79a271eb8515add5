"""CSV conventions, spelled once so the COPY fast path and the generic path agree byte for byte.

The PostgreSQL fast path lets the server print (``COPY ... (FORMAT csv, HEADER)`` under
``DateStyle=ISO``, ``TimeZone`` = UTC or the company zone); this module makes the generic path
(SQLite, any DB-API cursor) print exactly what the server prints:

* UTF-8, a header row, ``\\n`` line ends (COPY cannot write CRLF; mainstream CSV readers
  accept LF), the configured delimiter.
* Quoting as RFC 4180 / COPY: a field is quoted when it contains the delimiter, ``"``, CR or
  LF, with ``"`` doubled. NULL is an empty field; an empty string is ``""`` (so they differ).
* Timestamps: ISO 8601 as PostgreSQL's ISO DateStyle prints them, ``2026-03-01 05:00:00+00``
  (space separator, fraction only when non-zero and without trailing zeros, offset ``+HH`` or
  ``+HH:MM``), in UTC or the company zone. A ``T`` separator would cost the server ~15 % per
  timestamp column (measured, see bench/README.md), so the space form RFC 3339 §5.6 allows is
  used. ``timestamp without time zone`` values are printed as stored, without offset.
* Numbers as PostgreSQL prints them: integers and ``numeric`` positionally; floats in
  shortest round-trip form, with an exponent outside ``1e-4 <= |x| < 1e15`` (``real``:
  ``< 1e6``), e.g. ``0.25``, ``1e-07``, ``1.5e+20`` (docs/adr/0004-float-text.md: every CSV
  reader parses it, and rewriting it cost the server ~8 % per float column).
* Booleans ``true``/``false``; dates ``YYYY-MM-DD``.
* Formula neutralisation (``csv.neutralize_formulas``, on by default): a value of a character
  column (text, varchar, char) starting with ``=``, ``+``, ``-``, ``@``, a tab or a CR gets a
  ``'`` in front, so a spreadsheet shows it as text instead of evaluating it (CSV injection).
  The tenant column is left alone: it holds the company id, a slug that never starts so.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import date, datetime, tzinfo
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from export_lib.source.database import SqlType, parse_sqlite_timestamp

Formatter = Callable[[Any], str]
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def neutralize(text: str) -> str:
    """``'`` in front of a cell a spreadsheet would run as a formula."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def csv_field(text: str, delimiter: str, *, single_column: bool = False) -> str:
    """Quote ``text`` the way COPY's CSV mode does."""
    if text == "" or (single_column and text == "\\."):
        return f'"{text}"'
    if delimiter in text or '"' in text or "\n" in text or "\r" in text:
        return '"' + text.replace('"', '""') + '"'
    return text


def format_float(value: float, float32: bool = False) -> str:
    """``float8out``/``float4out`` exactly: shortest round-trip digits, NaN/Infinity spelled out.

    Python's repr differs in where the exponent starts (it switches at 1e16, PostgreSQL at
    1e15, and at 1e6 for ``real``) and in its ``.0`` suffix, so the digits are re-laid out.
    """
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign, digits, exponent = Decimal(_shortest(value, float32)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0")
    if not text:  # a double below float32's range, read as real
        return "-0" if sign else "0"
    exponent = int(exponent) + len(digits) - len(text)
    scientific = exponent + len(text) - 1  # the power of ten of the first digit
    prefix = "-" if sign else ""
    if -4 <= scientific < (6 if float32 else 15):
        return prefix + format(Decimal(f"{text}E{exponent}"), "f")
    mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
    return f"{prefix}{mantissa}e{'-' if scientific < 0 else '+'}{abs(scientific):02d}"


def _shortest(value: float, float32: bool) -> str:
    """The digits PostgreSQL's Ryu prints (``float8out``/``float4out``).

    Python's repr (and numpy's float32 str) may return a shortest candidate lying exactly on
    the rounding interval's bound (valid under round-half-even); Ryu treats that bound as
    excluded there and prints more digits. That tie is only possible for large magnitudes
    (|x| >= 2**51, float32 >= 2**21): only those values pay for the exact check.
    """
    if float32:
        import numpy

        text = str(numpy.float32(value))
        if abs(value) < 2.0**21:
            return text
        lower = float(numpy.nextafter(numpy.float32(value), numpy.float32(0)))
        upper = float(numpy.nextafter(numpy.float32(value), numpy.float32(value * 2)))
    else:
        text = repr(value)
        if abs(value) < 2.0**51:
            return text
        lower = math.nextafter(value, 0.0)
        upper = math.nextafter(value, value * 2)
    exact = Decimal(value)
    candidate = Decimal(text)
    if candidate not in ((exact + Decimal(lower)) / 2, (exact + Decimal(upper)) / 2):
        return text
    low, high = sorted(((exact + Decimal(lower)) / 2, (exact + Decimal(upper)) / 2))
    digits = len(candidate.as_tuple().digits)
    for precision in range(digits + 1, 18):
        text = f"{value:.{precision - 1}e}"
        if low < Decimal(text) < high:
            return text
    return f"{value:.16e}"


def format_decimal(value: Any, scale: int | None) -> str:
    number = value if isinstance(value, Decimal) else Decimal(
        repr(value) if isinstance(value, float) else str(value))
    if scale is not None and number.is_finite():
        number = number.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)
    if number.is_nan():
        return "NaN"
    return format(number, "f")


def format_timestamp(value: datetime, zone: tzinfo | None) -> str:
    """PostgreSQL ISO DateStyle; ``zone`` None keeps a naive value as it is."""
    if zone is not None:
        value = value.astimezone(zone)
    # isoformat is C: 'YYYY-MM-DD HH:MM:SS[.ffffff][+HH:MM[:SS[.ffffff]]]'; PostgreSQL trims
    # the fraction's trailing zeros and a zero minute offset ('+01:00' -> '+01').
    text = value.isoformat(" ")
    if len(text) == 19:
        return text
    rest = text[19:]
    frac = ""
    if rest[0] == ".":
        frac, rest = rest[:7].rstrip("0"), rest[7:]
    if len(rest) == 6 and rest.endswith(":00"):
        rest = rest[:3]
    return text[:19] + frac + rest


def _to_datetime(value: Any) -> datetime:
    return value if isinstance(value, datetime) else parse_sqlite_timestamp(value)


def _to_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def field_formatter(
    sql_type: SqlType, *, zone: tzinfo, delimiter: str, single_column: bool,
    neutralize_formulas: bool = False,
) -> Formatter:
    """A function turning one non-NULL value of this column into its CSV field.

    :param neutralize_formulas: prefix ``'`` to formula-like values of a character column.
    """
    kind = sql_type.kind
    if kind == "int":
        return lambda v: str(int(v)) if isinstance(v, bool | float) else str(v)
    if kind == "decimal":
        return lambda v: format_decimal(v, sql_type.scale)
    if kind in ("float4", "float8"):
        as32 = kind == "float4"
        return lambda v: format_float(float(v), as32)
    if kind == "bool":
        return lambda v: "true" if v and v not in ("f", "false", "0") else "false"
    if kind == "timestamptz":
        return lambda v: format_timestamp(_to_datetime(v), zone)
    if kind == "timestamp":
        return lambda v: format_timestamp(
            v if isinstance(v, datetime) else datetime.fromisoformat(v), None)
    if kind == "date":
        return lambda v: v.isoformat() if isinstance(v, date) else str(v)
    if neutralize_formulas and sql_type.text:
        return lambda v: csv_field(neutralize(_to_text(v)), delimiter, single_column=single_column)
    return lambda v: csv_field(_to_text(v), delimiter, single_column=single_column)


def header_line(columns: tuple[str, ...], delimiter: str) -> bytes:
    # Column names are plain identifiers (query.IDENTIFIER): never need quoting.
    return (delimiter.join(columns) + "\n").encode()


def row_encoder(formatters: list[Formatter], delimiter: str) -> Callable[[list[tuple]], bytes]:
    """Encode a fetched batch of rows to CSV bytes (one ``join`` per row, one encode per batch)."""
    fmts = formatters  # a short local name keeps the hot comprehension on one line

    def encode(rows: list[tuple]) -> bytes:
        lines = [
            delimiter.join(["" if v is None else f(v) for f, v in zip(fmts, row, strict=True)])
            for row in rows
        ]
        lines.append("")
        return "\n".join(lines).encode("utf-8")

    return encode
