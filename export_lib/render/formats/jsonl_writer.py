"""JSON Lines: one JSON object per row, keys in the export's column order, ``\\n`` after each.

Values are written as the CSV writes them (:mod:`export_lib.render.csv_format`), typed where
JSON has the type:

* integers, ``numeric`` and floats are JSON numbers with the CSV's digits (``12.50``,
  ``1e-07``; read ``numeric`` with a decimal parser to keep them exact); a NaN or an infinity
  is a string (``"NaN"``, ``"Infinity"``), as JSON has no such number;
* booleans ``true``/``false``; NULL ``null``;
* timestamps and dates strings as the CSV prints them (``"2026-03-01 05:00:00+00"``, UTC or
  the company zone per ``csv.timestamps``); everything else (text, uuid, json, arrays) the
  string of its text form. No formula neutralisation: no spreadsheet opens JSON.

On PostgreSQL the server prints every line: ``COPY (SELECT row_to_json(r) FROM (...) r) TO
STDOUT`` in CSV mode, with a delimiter and quote character (0x1F, 0x1E) that JSON text never
contains unescaped, so each line is passed through exactly as ``row_to_json`` printed it (text
mode would double every backslash). The generic path prints the same bytes: PostgreSQL and
Python's ``json`` escape strings alike (``\\"``, ``\\\\``, ``\\n``..., ``\\u001f`` for the
other control characters, everything else as UTF-8).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import date, datetime
from typing import Any, BinaryIO
from zoneinfo import ZoneInfo

from export_lib.formats.base import CopyPlan, OutputFormat
from export_lib.source.database import SqlType
from export_lib.source.sql import ColumnExpr

# Kinds row_to_json prints the way the CSV does; every other column goes through ::text.
_AS_IS = ("int", "decimal", "float4", "float8", "bool")
_string = json.JSONEncoder(ensure_ascii=False).encode


class JsonLinesFormat(OutputFormat):
    """JSON Lines (https://jsonlines.org): UTF-8, one object per line."""

    name = "jsonl"
    extension = "jsonl"
    content_type = "application/jsonl"

    def copy_plan(self, job: Any) -> CopyPlan:
        from psycopg import sql

        exprs: dict[str, ColumnExpr] = {
            c: "text" for c, t in job.types.items() if t.kind not in _AS_IS and not t.text}
        statement = sql.SQL(
            "COPY (SELECT row_to_json(export_json) FROM ({}) AS export_json) "
            "TO STDOUT (FORMAT csv, DELIMITER {}, QUOTE {})"
        ).format(job.select(exprs), sql.Literal("\x1f"), sql.Literal("\x1e"))
        return CopyPlan(statement, job.options.output_zone)

    def write_rows(self, job: Any, fetch: Callable[[], Sequence[tuple[Any, ...]]],
                   out: BinaryIO) -> int:
        zone = ZoneInfo(job.options.output_zone)
        keys = [_string(c) + ":" for c in job.columns]
        fmts = [value_formatter(t, zone) for t in job.column_types]
        rows = 0
        while batch := fetch():
            lines = ["{" + ",".join([k + ("null" if v is None else f(v))
                                     for k, f, v in zip(keys, fmts, row, strict=True)]) + "}"
                     for row in batch]
            lines.append("")
            out.write("\n".join(lines).encode("utf-8"))
            rows += len(batch)
        return rows


def _number(text: str) -> str:
    """A JSON number, or the string of a value JSON cannot hold (NaN, Infinity)."""
    return text if text[-1].isdigit() else _string(text)


def value_formatter(sql_type: SqlType, zone: ZoneInfo) -> Callable[[Any], str]:
    """A function turning one non-NULL value of this column into its JSON text."""
    from export_lib.render.csv_format import (
        _to_datetime,
        _to_text,
        format_decimal,
        format_float,
        format_timestamp,
    )

    kind = sql_type.kind
    if kind == "int":
        return lambda v: str(int(v)) if isinstance(v, bool | float) else str(v)
    if kind == "decimal":
        return lambda v: _number(format_decimal(v, sql_type.scale))
    if kind in ("float4", "float8"):
        as32 = kind == "float4"
        return lambda v: _number(format_float(float(v), as32))
    if kind == "bool":
        return lambda v: "true" if v and v not in ("f", "false", "0") else "false"
    if kind == "timestamptz":
        return lambda v: _string(format_timestamp(_to_datetime(v), zone))
    if kind == "timestamp":
        return lambda v: _string(format_timestamp(
            v if isinstance(v, datetime) else datetime.fromisoformat(v), None))
    if kind == "date":
        return lambda v: _string(v.isoformat() if isinstance(v, date) else str(v))
    return lambda v: _string(_to_text(v))
