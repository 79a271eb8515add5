"""Render one export window of one company into a CSV or Parquet artifact, streaming.

``render`` validates the spec against the live source, builds a tenant-scoped, half-open
window query (``tenant = company AND start <= ts < end [AND ingested < cutoff]``) and streams
the rows into ``sink`` (any writable binary file object), computing sha256 and the byte count
on the way: the artifact is never re-read and never held in memory.

Engines: PostgreSQL CSV is ``COPY (SELECT ...) TO STDOUT (FORMAT csv, HEADER)`` read in
~1 MiB chunks and passed to the sink; PostgreSQL Parquet parses the same COPY output (raw
values, no header) with pyarrow's streaming CSV reader. Both read through the one COPY reader,
:class:`export_lib.render.copy.CopyOut`. SQLite (and any DB-API source) reads ``fetchmany``
batches. Both CSV engines print byte-identical files (conventions in
:mod:`export_lib.render.csv_format`); both Parquet engines write identical files.
Hashing and writing run on a writer thread (:mod:`export_lib.render.sink`), off the read loop.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, BinaryIO, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator

from export_lib.config.query import QuerySpec, validate_spec
from export_lib.errors import ConfigError, RenderError, WindowError
from export_lib.logfmt import get_logger
from export_lib.render.sink import HashingSink
from export_lib.source.checks import local_time_problem, naive_timestamp_columns
from export_lib.source.database import Source, SqlType, classify, describe_columns
from export_lib.source.export_schema import ExportSchema, observed_schema
from export_lib.source.sql import Bounds, ColumnExpr, build_postgres, build_sqlite, total_order

log = get_logger(__name__)

FETCH_ROWS = 10_000
Engine = Literal["postgres_copy", "generic"]


class RenderOptions(BaseModel):
    """How the artifact is written. ``timezone`` (IANA) applies when ``timestamps='local'``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["csv", "parquet"] = "csv"
    delimiter: Literal[",", ";", "\t", "|"] = ","
    timestamps: Literal["utc", "local"] = "utc"
    timezone: str = "UTC"
    # Parquet row groups end at ~row_group_bytes of Arrow data (bounded memory whatever the
    # row width); row_group_rows, when set, also caps the rows per group.
    # 4 MiB: peak RSS at 2 M rows 141 MB, against 154 MB at 8 MiB and 168 MB at 16 MiB.
    row_group_bytes: int = Field(default=4 << 20, ge=1 << 20, le=1 << 30)
    row_group_rows: int | None = Field(default=None, ge=1_000, le=1_048_576)
    compression: Literal["snappy", "zstd", "gzip", "none"] = "snappy"
    # CSV only: formula-like text cells get a leading ' (render/csv_format.py).
    neutralize_formulas: bool = True

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {value!r}; use an IANA name such as 'Europe/Berlin'"
            ) from None
        return value

    @property
    def output_zone(self) -> str:
        return self.timezone if self.timestamps == "local" else "UTC"


class RenderResult(BaseModel):
    """What was written. ``reproducible`` is False when the spec has no ``ingested_column``
    (a retry may then see late rows the first attempt did not); ``export_schema`` is the file's
    schema (names, types, nullability; ADR 0025), the same for CSV and Parquet."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rows: int
    bytes: int
    sha256: str
    columns: tuple[str, ...]
    format: Literal["csv", "parquet"]
    reproducible: bool
    engine: Engine
    export_schema: ExportSchema

    def as_xcom(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def render(
    source: Source,
    spec: QuerySpec,
    *,
    company_id: str,
    window_start: datetime,
    window_end: datetime,
    cutoff: datetime | None,
    options: RenderOptions,
    sink: BinaryIO,
    schedule_id: str = "",
    engine: Literal["auto", "generic"] = "auto",
    check_schema: Callable[[ExportSchema], None] | None = None,
) -> RenderResult:
    """Stream the company's rows of ``[window_start, window_end)`` into ``sink``.

    Raises SchemaDriftError (a configured column left the source), SourceError (retryable:
    the source went away), RenderError, WindowError (naive or empty window), ConfigError
    (``timestamps='local'`` over a timestamp column without time zone). ``engine``
    "generic" forces the DB-API path (used by tests to prove both engines agree).
    ``check_schema`` is called with the file's schema before any row is read (the schema
    contract's check, ADR 0025): whatever it raises ends the render before the query runs.
    """
    _check_bounds(company_id, window_start, window_end, cutoff)
    described = describe_columns(source, spec.table, spec.table_schema)
    columns = {name: declared for name, (declared, _) in described.items()}
    validate_spec(spec, columns, schedule_id=schedule_id)
    if options.timestamps == "local":
        # Refused, not ignored: a zone-less column would print its wall time unchanged.
        for name in naive_timestamp_columns(spec.columns, columns, source.dialect):
            raise ConfigError(f"schedule {schedule_id!r}: " + local_time_problem(
                name, spec.table, columns[name]))
    schema = observed_schema(described, spec.columns, source.dialect)
    if check_schema is not None:
        check_schema(schema)
    naive = frozenset(c for c, t in columns.items() if classify(t, source.dialect).kind
                      == "timestamp")
    bounds = Bounds(company_id, window_start, window_end, cutoff, naive)
    types = {c: classify(columns[c], source.dialect) for c in spec.columns}
    fast = engine == "auto" and source.dialect == "postgresql"
    period = f"[{window_start.isoformat()}, {window_end.isoformat()})"
    # The caller's run context adds run and period (render_run binds them).
    fields = {"company": company_id, "schedule": schedule_id or None}
    if not spec.ingested_column:
        log.warning("company=%s schedule=%s period=%s: %s has no ingested_column; the artifact "
                    "is not reproducible", company_id, schedule_id, period, spec.table,
                    extra=fields)
    with source.guarded(f"rendering {spec.table} for company {company_id!r}"), \
            HashingSink(sink) as out:
        if options.format == "csv":
            rows = (_copy_csv if fast else _generic_csv)(source, spec, bounds, types, options, out)
        else:
            rows = (_copy_parquet if fast else _generic_parquet)(
                source, spec, bounds, types, options, out)
    result = RenderResult(
        rows=rows, bytes=out.bytes, sha256=out.sha256, columns=spec.columns,
        format=options.format, reproducible=spec.ingested_column is not None,
        engine="postgres_copy" if fast else "generic", export_schema=schema,
    )
    log.info("company=%s schedule=%s period=%s: rendered %s rows, %s bytes of %s (%s), sha256 %s",
             company_id, schedule_id, period, result.rows, result.bytes, result.format,
             result.engine, result.sha256, extra=fields)
    return result


def _check_bounds(company_id: str, start: datetime, end: datetime,
                  cutoff: datetime | None) -> None:
    for name, value in (("window_start", start), ("window_end", end), ("cutoff", cutoff)):
        if value is not None and value.utcoffset() is None:
            raise WindowError(f"{name} {value.isoformat()} is naive; pass a timezone-aware value")
    if not start < end:
        raise WindowError(f"empty window: window_start {start.isoformat()} is not before "
                          f"window_end {end.isoformat()}")
    if not company_id:
        raise RenderError("company_id is empty; every export is scoped to one company")


RENDER_APP_PREFIX = "export_lib render "


def _set_zone(source: Source, zone: str, company_id: str) -> None:
    # Transaction-local: the COPY below runs in the same transaction, nothing leaks. The
    # application name shows a DBA whose export a query in pg_stat_activity is.
    source.connection.execute(
        "SELECT set_config('TimeZone', %s, true), set_config('application_name', %s, true)",
        (zone, (RENDER_APP_PREFIX + company_id)[:63]))


def _copy_csv(source: Source, spec: QuerySpec, bounds: Bounds, types: dict[str, SqlType],
              options: RenderOptions, out: HashingSink) -> int:
    from psycopg import sql

    from export_lib.render.copy import CopyOut

    exprs: dict[str, ColumnExpr] = {}
    # Floats go out as the server prints them (docs/adr/0004-float-text.md).
    for name, sql_type in types.items():
        if sql_type.kind == "bool":
            exprs[name] = "bool_text"
        elif _neutralized(name, sql_type, spec, options):
            exprs[name] = "neutral_text"
    query = sql.SQL("COPY ({}) TO STDOUT (FORMAT csv, HEADER, DELIMITER {})").format(
        build_postgres(spec, bounds, exprs, _order(spec, types)), sql.Literal(options.delimiter))
    _set_zone(source, options.output_zone, bounds.company_id)
    with CopyOut(source.connection, query) as copy:
        for chunk in copy.chunks():
            out.write(chunk)
    source.connection.rollback()
    return copy.rows or 0


def _neutralized(name: str, sql_type: SqlType, spec: QuerySpec, options: RenderOptions) -> bool:
    """Whether a column's values get formula neutralisation: character columns, except the
    tenant column (it holds the company id, a slug: never a formula)."""
    return options.neutralize_formulas and sql_type.text and name != spec.tenant_column


def _order(spec: QuerySpec, types: dict[str, SqlType]) -> tuple[str, ...]:
    return total_order(spec, frozenset(c for c, t in types.items() if t.unordered))


def _generic_cursor(source: Source, spec: QuerySpec, bounds: Bounds,
                    order: tuple[str, ...]) -> Any:
    if source.dialect == "sqlite":
        text, params = build_sqlite(spec, bounds, order)
        return source.connection.execute(text, params)
    # Any other DB-API source: a server-side cursor keeps memory bounded.
    cursor = source.connection.cursor(name="export_render")
    cursor.itersize = FETCH_ROWS
    cursor.execute(build_postgres(spec, bounds, order=order))
    return cursor


def _generic_csv(source: Source, spec: QuerySpec, bounds: Bounds, types: dict[str, SqlType],
                 options: RenderOptions, out: HashingSink) -> int:
    from export_lib.render.csv_format import field_formatter, header_line, row_encoder

    zone = ZoneInfo(options.output_zone)
    single = len(spec.columns) == 1
    encode = row_encoder(
        [field_formatter(types[c], zone=zone, delimiter=options.delimiter, single_column=single,
                         neutralize_formulas=_neutralized(c, types[c], spec, options))
         for c in spec.columns],
        options.delimiter,
    )
    out.write(header_line(spec.columns, options.delimiter))
    cursor = _generic_cursor(source, spec, bounds, _order(spec, types))
    rows = 0
    while batch := cursor.fetchmany(FETCH_ROWS):
        out.write(encode(batch))
        rows += len(batch)
    cursor.close()
    _end_read(source)
    return rows


def _generic_parquet(source: Source, spec: QuerySpec, bounds: Bounds,
                     types: dict[str, SqlType], options: RenderOptions, out: HashingSink) -> int:
    from export_lib.render.parquet_format import RowGroupWriter, arrow_schema, batches_from_rows

    schema = arrow_schema(spec.columns, types, options.output_zone)
    writer = RowGroupWriter(out, schema, group_bytes=options.row_group_bytes,
                            max_rows=options.row_group_rows, compression=options.compression)
    cursor = _generic_cursor(source, spec, bounds, _order(spec, types))
    try:
        for batch in batches_from_rows(lambda: cursor.fetchmany(FETCH_ROWS), schema,
                                       [types[c] for c in spec.columns]):
            writer.add(batch)
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise RenderError(f"a value of {spec.table} does not fit the Parquet schema "
                          f"{schema}: {exc}") from exc
    finally:
        writer.close()
    cursor.close()
    _end_read(source)
    return writer.rows


def _copy_parquet(source: Source, spec: QuerySpec, bounds: Bounds, types: dict[str, SqlType],
                  options: RenderOptions, out: HashingSink) -> int:
    import pyarrow as pa
    import pyarrow.csv as pcsv
    from psycopg import sql

    from export_lib.render.copy import CopyOut, CopyStream
    from export_lib.render.parquet_format import RowGroupWriter, arrow_schema, csv_read_options

    schema = arrow_schema(spec.columns, types, options.output_zone)
    exprs: dict[str, ColumnExpr] = {
        c: "numeric_38_9" for c, t in types.items() if t.kind == "decimal" and not t.precision}
    query = sql.SQL("COPY ({}) TO STDOUT (FORMAT csv)").format(
        build_postgres(spec, bounds, exprs, _order(spec, types)))
    _set_zone(source, "UTC", bounds.company_id)
    writer = RowGroupWriter(out, schema, group_bytes=options.row_group_bytes,
                            max_rows=options.row_group_rows, compression=options.compression)
    try:
        with CopyOut(source.connection, query) as copy:
            stream = CopyStream(copy)
            if not stream.empty():
                for batch in pcsv.open_csv(stream, *csv_read_options(schema)):
                    writer.add(batch)
    except pa.ArrowInvalid as exc:
        raise RenderError(f"a value of {spec.table} does not fit the Parquet schema: {exc}; "
                          "declare the column's precision in the source or cast it in a view"
                          ) from exc
    finally:
        writer.close()
    source.connection.rollback()
    if copy.rows != writer.rows:
        raise RenderError(f"COPY reported {copy.rows} rows but {writer.rows} were written; "
                          "the artifact is incomplete and must not be published")
    return writer.rows


def _end_read(source: Source) -> None:
    if source.dialect == "postgresql":
        source.connection.rollback()
