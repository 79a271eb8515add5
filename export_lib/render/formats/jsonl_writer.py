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

On PostgreSQL the server prints every line, as a CSV COPY whose fields alternate between the
keys (constant text: ``{"id":``, ``,"name":``, ..., ``}``) and the values, each printed as its
JSON text (:func:`json_expression`: integers and numbers as the server prints them, strings
through ``to_json``, timestamps quoted), with ``NULL 'null'``. The delimiter and the quote
character are 0x1F and 0x1E, which JSON text never contains unescaped, so no field is ever
quoted and the client only deletes the 0x1F between the fields (``bytes.replace``, C speed),
after quoting a NaN or an infinity: a number field that is exactly ``NaN``, ``Infinity`` or
``-Infinity`` between two delimiters. The tenant column, equal to the company id on every row,
is part of its key's constant. The COPY is read by :meth:`CopyOut.pump` on a reader thread
(half the client CPU of psycopg's row iterator; with compression, client CPU counts).

Measured on the bench table (500,000 rows, 11 columns, best of 4 on a shared 2-core machine):
this COPY took 1.6-1.8 x the CSV COPY's time (its output is 2.1 x as long), a concatenation
of each row's JSON in SQL (``'{"id":' || id::text || ...``) 2.0-2.2 x, ``row_to_json`` 3.6 x.
Converting the CSV COPY to JSON on the client in Arrow's kernels was no faster on that machine
and cost ~110 MB more peak RSS (pyarrow.compute). The generic path prints the same bytes:
PostgreSQL's ``to_json`` and Python's ``json`` escape strings alike (``\\"``, ``\\\\``,
``\\n``..., ``\\u001f`` for the other control characters, everything else as UTF-8).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import date, datetime
from typing import Any, BinaryIO
from zoneinfo import ZoneInfo

from export_lib.formats.base import CopyPlan, OutputFormat
from export_lib.source.database import SqlType

_string = json.JSONEncoder(ensure_ascii=False).encode


class JsonLinesFormat(OutputFormat):
    """JSON Lines (https://jsonlines.org): UTF-8, one object per line."""

    name = "jsonl"
    extension = "jsonl"
    content_type = "application/jsonl"

    def copy_plan(self, job: Any) -> CopyPlan:
        return CopyPlan(self.copy_statement(job, job.select()), job.options.output_zone)

    @staticmethod
    def copy_statement(job: Any, select: Any, leading: Any = None) -> Any:
        """The COPY printing ``select``'s rows as JSON Lines fields, after the ``leading``
        column when given (the range scan's period number, ADR 0038)."""
        from psycopg import sql

        fields, key = [leading] if leading is not None else [], "{"
        for name in job.columns:
            key += _string(name) + ":"
            if name == job.spec.tenant_column and job.types[name].text:
                key += _string(job.bounds.company_id) + ","  # WHERE tenant = company
                continue
            fields += [sql.Literal(key), json_expression(sql.Identifier(name), job.types[name])]
            key = ","
        fields.append(sql.Literal("}" if key == "," else key[:-1] + "}"))
        return sql.SQL(
            "COPY (SELECT {} FROM ({}) AS export_rows) "
            "TO STDOUT (FORMAT csv, DELIMITER {}, QUOTE {}, NULL 'null')"
        ).format(sql.SQL(", ").join(fields), select, sql.Literal(_SEP.decode()),
                 sql.Literal("\x1e"))

    @staticmethod
    def rewrite(job: Any) -> Callable[[bytes], bytes]:
        """What the client does to the COPY's whole rows: quote a NaN or an infinity, delete
        the field delimiters."""
        numbers = any(t.kind in _NUMBERS for t in job.column_types)

        def lines(data: bytes) -> bytes:
            if numbers:
                for bare, quoted in _NOT_NUMBERS:
                    data = data.replace(bare, quoted)
            return data.replace(_SEP, b"")

        return lines

    def write_copy(self, job: Any, copy: Any, out: BinaryIO) -> int:
        from export_lib.render.copy import CopyStream

        rewrite = self.rewrite(job)
        stream = CopyStream(copy)
        # read() hands back at most the rest of one piece of the reader thread, and a piece
        # is whole rows: a NaN field is never cut between two reads.
        while data := stream.read(1 << 30):
            out.write(rewrite(data))
        return copy.rows or 0

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


_SEP = b"\x1f"
_NUMBERS = ("decimal", "float4", "float8")
# A number field the server printed as a value JSON has no number for: quoted, as the generic
# path does. Only a number field can be exactly this between two delimiters (a string field
# starts with a quote).
_NOT_NUMBERS = [(_SEP + word + _SEP, _SEP + b'"' + word + b'"' + _SEP)
                for word in (b"NaN", b"Infinity", b"-Infinity")]


def json_expression(column: Any, sql_type: SqlType) -> Any:
    """The SQL expression printing a non-NULL value of ``column`` as its JSON text (NULL stays
    NULL, which the COPY prints as ``null``): what :func:`value_formatter` prints."""
    from psycopg import sql

    kind = sql_type.kind
    if kind in ("int", *_NUMBERS):
        return column  # as the server prints it, the CSV's digits
    if kind == "bool":
        return sql.SQL("to_json({})").format(column)
    if kind in ("timestamptz", "timestamp", "date"):
        # Printed under the session's TimeZone and DateStyle ISO, like the CSV; never holds a
        # character JSON escapes, so it is quoted as it is.
        return sql.SQL("'\"' || {}::text || '\"'").format(column)
    if sql_type.text:
        return sql.SQL("to_json({})").format(column)
    return sql.SQL("to_json({}::text)").format(column)


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
