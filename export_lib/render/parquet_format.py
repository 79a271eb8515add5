"""Parquet artifacts: the Arrow schema mapped from source types, written in bounded row groups.

Type mapping (validated: an unmappable value fails the render, it is never silently changed):

=========================  ============================================================
source                     Parquet / Arrow
=========================  ============================================================
smallint/integer/bigint    int64
numeric(p, s)              decimal128(p, s)  (p > 38 → decimal256(p, s))
numeric (unconstrained)    decimal128(38, 9), rounded half away from zero to 9 places
real / double precision    float32 / float64
boolean                    bool
timestamptz                timestamp[us, tz=UTC] (``timestamps: local`` → tz=company zone;
                           the stored instants are identical, only the reader's display zone)
timestamp                  timestamp[us] (no zone)
date                       date32
everything else            string (uuid, json, text, varchar, ...)
=========================  ============================================================

Row groups hold exactly ``row_group_rows`` rows (the last one fewer), whatever the batch
sizes upstream, so the same rows always give the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from export_lib.source.database import SqlType, parse_sqlite_timestamp

DEFAULT_DECIMAL = (38, 9)


def arrow_type(sql_type: SqlType, tz: str) -> pa.DataType:
    kind = sql_type.kind
    if kind == "int":
        return pa.int64()
    if kind == "decimal":
        precision, scale = ((sql_type.precision, sql_type.scale) if sql_type.precision
                            else DEFAULT_DECIMAL)
        return (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, scale)
    if kind == "float4":
        return pa.float32()
    if kind == "float8":
        return pa.float64()
    if kind == "bool":
        return pa.bool_()
    if kind == "timestamptz":
        return pa.timestamp("us", tz=tz)
    if kind == "timestamp":
        return pa.timestamp("us")
    if kind == "date":
        return pa.date32()
    return pa.string()


def arrow_schema(columns: tuple[str, ...], types: dict[str, SqlType], tz: str) -> pa.Schema:
    return pa.schema([pa.field(c, arrow_type(types[c], tz)) for c in columns])


class RowGroupWriter:
    """Buffers record batches and writes row groups of exactly ``rows_per_group`` rows."""

    def __init__(self, sink: Any, schema: pa.Schema, *, rows_per_group: int,
                 compression: str) -> None:
        self.schema = schema
        self.rows = 0
        self._per_group = rows_per_group
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._writer = pq.ParquetWriter(
            sink, schema, compression=None if compression == "none" else compression,
            version="2.6", write_statistics=True, store_schema=True,
            # Dictionary-encode text only: on high-cardinality numbers and timestamps the
            # dictionary builder costs ~30 MB per column before falling back to plain.
            use_dictionary=[f.name for f in schema if pa.types.is_string(f.type)],
        )

    def add(self, batch: pa.RecordBatch) -> None:
        if batch.schema != self.schema:
            batch = batch.cast(self.schema)
        self._pending.append(batch)
        self._pending_rows += batch.num_rows
        while self._pending_rows >= self._per_group:
            table = pa.Table.from_batches(self._pending, self.schema)
            self._write(table.slice(0, self._per_group))
            rest = table.slice(self._per_group)
            self._pending = rest.to_batches()
            self._pending_rows = rest.num_rows

    def close(self) -> None:
        if self._pending_rows:
            self._write(pa.Table.from_batches(self._pending, self.schema))
        self._pending = []
        self._writer.close()

    def _write(self, table: pa.Table) -> None:
        self._writer.write_table(table, row_group_size=self._per_group)
        self.rows += table.num_rows


def _decimal_converter(t: pa.DataType) -> Callable[[Any], Any]:
    quantum = Decimal(1).scaleb(-t.scale)

    def convert(v: Any) -> Decimal:
        d = v if isinstance(v, Decimal) else Decimal(repr(v) if isinstance(v, float) else str(v))
        return d.quantize(quantum, rounding=ROUND_HALF_UP) if d.is_finite() else d

    return convert


def value_converter(sql_type: SqlType, t: pa.DataType) -> Callable[[Any], Any] | None:
    """DB-API value → what ``pa.array`` accepts for ``t``; None when no conversion is needed."""
    kind = sql_type.kind
    if kind == "decimal":
        return _decimal_converter(t)
    if kind == "timestamptz":
        return lambda v: v if isinstance(v, datetime) else parse_sqlite_timestamp(v)
    if kind == "timestamp":
        return lambda v: v if isinstance(v, datetime) else datetime.fromisoformat(v)
    if kind == "date":
        return lambda v: v if isinstance(v, date) else date.fromisoformat(v)
    if kind == "bool":
        return lambda v: bool(v) and v not in ("f", "false", "0")
    if kind in ("float4", "float8"):
        return float
    if kind == "string":
        from export_lib.render.csv_format import _to_text

        return _to_text
    return None


def batches_from_rows(
    fetch: Callable[[], list[tuple]], schema: pa.Schema, types: list[SqlType]
) -> Iterator[pa.RecordBatch]:
    """Record batches from a DB-API ``fetchmany``, one batch per fetch, NULLs preserved."""
    converters = [value_converter(st, f.type) for st, f in zip(types, schema, strict=True)]
    while rows := fetch():
        arrays = []
        for i, (conv, fld) in enumerate(zip(converters, schema, strict=True)):
            values = [r[i] for r in rows]
            if conv is not None:
                values = [None if v is None else conv(v) for v in values]
            arrays.append(pa.array(values, type=fld.type))
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def csv_read_options(schema: pa.Schema, delimiter: str = ",") -> tuple[Any, Any, Any]:
    """pyarrow CSV options matching COPY's raw CSV (NULL unquoted empty, ``""`` empty string)."""
    import pyarrow.csv as pcsv

    read = pcsv.ReadOptions(column_names=schema.names, block_size=1 << 20, use_threads=True)
    parse = pcsv.ParseOptions(delimiter=delimiter, newlines_in_values=True)
    convert = pcsv.ConvertOptions(
        column_types={f.name: f.type for f in schema}, null_values=[""],
        strings_can_be_null=True, quoted_strings_can_be_null=False,
        true_values=["t"], false_values=["f"],
    )
    return read, parse, convert
