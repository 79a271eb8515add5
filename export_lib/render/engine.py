"""Render one export window of one company into an artifact of any output format, streaming.

``render`` validates the spec against the live source, builds a tenant-scoped, half-open
window query (``tenant = company AND start <= ts < end [AND ingested < cutoff]``) and streams
the rows into ``sink`` (any writable binary file object), computing sha256 and the byte count
on the way: the artifact is never re-read and never held in memory.

The file's bytes come from the output format (:mod:`export_lib.formats`: CSV, JSON Lines and
Parquet built in, others installed as plugins). On PostgreSQL a format with a COPY plan reads
its own ``COPY (SELECT ...) TO STDOUT`` through the one COPY reader,
:class:`export_lib.render.copy.CopyOut` (CSV and JSON Lines pass the server's bytes through;
Parquet parses them with pyarrow); otherwise, and on SQLite or any DB-API source, it is fed
``fetchmany`` batches. Both paths print byte-identical files. ``compression`` (gzip, zstd)
wraps what the format writes on a thread of its own; hashing and writing run on the sink's
writer thread (:mod:`export_lib.render.sink`), off the read loop, over the compressed bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, BinaryIO, Literal

from pydantic import BaseModel, ConfigDict

from export_lib.config.query import QuerySpec, validate_spec
from export_lib.errors import ConfigError, RenderError, WindowError
from export_lib.formats import OutputFormat, compressed, get_format
from export_lib.formats.registry import format_label
from export_lib.logfmt import get_logger
from export_lib.render.job import RenderJob, RenderOptions
from export_lib.render.sink import HashingSink
from export_lib.source.checks import local_time_problem, naive_timestamp_columns
from export_lib.source.database import Source, classify, describe_columns
from export_lib.source.export_schema import ExportSchema, observed_schema
from export_lib.source.sql import Bounds, build_postgres, build_sqlite

__all__ = ["RENDER_APP_PREFIX", "RenderOptions", "RenderResult", "prepare_job", "render"]

log = get_logger(__name__)

FETCH_ROWS = 10_000
Engine = Literal["postgres_copy", "generic"]


class RenderResult(BaseModel):
    """What was written. ``format`` is the file's label (``csv``, ``jsonl.gz``: the format and
    its compression); ``bytes`` and ``sha256`` are the file's, compressed. ``reproducible`` is
    False when the spec has no ``ingested_column`` (a retry may then see late rows the first
    attempt did not); ``export_schema`` is the file's schema (names, types, nullability;
    ADR 0025), the same whatever the format."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rows: int
    bytes: int
    sha256: str
    columns: tuple[str, ...]
    format: str
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
    job, schema = prepare_job(source, spec, company_id=company_id, window_start=window_start,
                              window_end=window_end, cutoff=cutoff, options=options,
                              schedule_id=schedule_id)
    if check_schema is not None:
        check_schema(schema)
    fmt = get_format(options.format)
    plan = (fmt.copy_plan(job) if engine == "auto" and source.dialect == "postgresql"
            else None)
    period = f"[{window_start.isoformat()}, {window_end.isoformat()})"
    # The caller's run context adds run and period (render_run binds them).
    fields = {"company": company_id, "schedule": schedule_id or None}
    if not spec.ingested_column:
        log.warning("company=%s schedule=%s period=%s: %s has no ingested_column; the artifact "
                    "is not reproducible", company_id, schedule_id, period, spec.table,
                    extra=fields)
    with source.guarded(f"rendering {spec.table} for company {company_id!r}"), \
            HashingSink(sink) as hashed:
        out = compressed(hashed, options.compression)
        try:
            rows = (_write_copy(source, job, fmt, plan, out) if plan is not None
                    else _write_rows(source, job, fmt, out))
        except BaseException:
            if out is not hashed:
                out.abort()
            raise
        if out is not hashed:
            out.close()  # the compressed stream's end, before the sink's last write
    result = RenderResult(
        rows=rows, bytes=hashed.bytes, sha256=hashed.sha256, columns=spec.columns,
        format=format_label(options.format, options.compression),
        reproducible=spec.ingested_column is not None,
        engine="postgres_copy" if plan is not None else "generic", export_schema=schema,
    )
    log.info("company=%s schedule=%s period=%s: rendered %s rows, %s bytes of %s (%s), sha256 %s",
             company_id, schedule_id, period, result.rows, result.bytes, result.format,
             result.engine, result.sha256, extra=fields)
    return result


def prepare_job(source: Source, spec: QuerySpec, *, company_id: str, window_start: datetime,
                window_end: datetime, cutoff: datetime | None, options: RenderOptions,
                schedule_id: str = "") -> tuple[RenderJob, ExportSchema]:
    """The checks of :func:`render` before its query (bounds, the spec against the live
    source's columns) and what they give: the job and the file's schema. The range scan
    (:mod:`export_lib.render.range_scan`) makes the same checks, once for its periods."""
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
    naive = frozenset(c for c, t in columns.items() if classify(t, source.dialect).kind
                      == "timestamp")
    bounds = Bounds(company_id, window_start, window_end, cutoff, naive)
    types = {c: classify(columns[c], source.dialect) for c in spec.columns}
    return RenderJob(spec, bounds, types, options, source.dialect, schedule_id), schema


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


def _write_copy(source: Source, job: RenderJob, fmt: OutputFormat, plan: Any,
                out: BinaryIO) -> int:
    from export_lib.render.copy import CopyOut

    _set_zone(source, plan.zone, job.bounds.company_id)
    with CopyOut(source.connection, plan.statement) as copy:
        rows = fmt.write_copy(job, copy, out)
    source.connection.rollback()
    return rows


def _write_rows(source: Source, job: RenderJob, fmt: OutputFormat, out: BinaryIO) -> int:
    cursor = _generic_cursor(source, job)
    rows = fmt.write_rows(job, lambda: cursor.fetchmany(FETCH_ROWS), out)
    cursor.close()
    if source.dialect == "postgresql":
        source.connection.rollback()
    return rows


def _generic_cursor(source: Source, job: RenderJob) -> Any:
    if source.dialect == "sqlite":
        text, params = build_sqlite(job.spec, job.bounds, job.order)
        return source.connection.execute(text, params)
    # Any other DB-API source: a server-side cursor keeps memory bounded.
    cursor = source.connection.cursor(name="export_render")
    cursor.itersize = FETCH_ROWS
    cursor.execute(build_postgres(job.spec, job.bounds, order=job.order))
    return cursor
