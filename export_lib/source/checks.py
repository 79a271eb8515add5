"""What a config can only be checked against its source: column types and rows.

A company file can be right on its own and still not do what it says, which only the source
tells (``exportctl validate`` and ``exportctl preview``, when the source is reachable):

* ``csv: {timestamps: local}`` over a ``timestamp`` (without time zone) column cannot apply:
  such a value is a wall time with no zone, so the file would show it unchanged, not in the
  company's local time. It is an error naming the company file, the export, the column and the
  fix (make the column ``timestamptz``, or ``timestamps: utc``). The renderer refuses it too
  (:func:`local_time_problem` is the one message), for a config validated without its source.
* a company with no row at all in a table its exports read exports header-only files without
  anyone noticing; it is a warning (one ``EXISTS`` query per company and table).

A source that cannot be reached is a warning saying what was not checked; nothing here ever
writes to a source.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from export_lib.config.query import Dialect, QuerySpec
from export_lib.errors import ExportError
from export_lib.source.connections import ConnectionResolver, resolve
from export_lib.source.database import Source, classify, describe_columns, open_source
from export_lib.source.sql import quote_sqlite

if TYPE_CHECKING:
    from export_lib.config.models import Schedule

LOCAL_TIME_FIX = ("make the column timestamp with time zone (timestamptz) in the source, or set "
                  "csv: {timestamps: utc}")
# A check must not hang a command on an unreachable host for libpq's 10 s default.
CONNECT_TIMEOUT_SECONDS = 3


def naive_timestamp_columns(names: Iterable[str], columns: Mapping[str, str],
                            dialect: Dialect) -> list[str]:
    """The columns of ``names`` whose source type (``columns``: name → declared type) is a
    timestamp without time zone. SQLite's TIMESTAMP text counts as UTC, so never there."""
    return [name for name in names if name in columns
            and classify(columns[name], dialect).kind == "timestamp"]


def local_time_problem(column: str, table: str, declared: str) -> str:
    """Why ``timestamps: local`` cannot apply to ``column``, and the fix."""
    return (f"csv.timestamps 'local' cannot apply to column {column!r} of {table}: it is "
            f"{declared}, a wall time with no zone, so the file would show it unchanged, not "
            f"in local time; {LOCAL_TIME_FIX}")


@dataclass(frozen=True)
class SourceFindings:
    """``errors``: ``file: field: message`` lines; ``warnings``: ``warning: …`` lines."""

    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def _label(schedule: Schedule) -> str:
    """The export in its company file, as the isolation checks name it."""
    if schedule.kind == "widget":
        return f"widget_exports[id={schedule.export_id}]"
    return f"data_exports[channel={schedule.channel}].{schedule.kind}"


def _company_file(config_dir: Path, company: str) -> Path:
    yml = config_dir / f"{company}.yml"
    return yml if yml.exists() and not (config_dir / f"{company}.yaml").exists() else (
        config_dir / f"{company}.yaml")


def _where(spec: QuerySpec) -> str:
    return f"{spec.table_schema}.{spec.table}" if spec.table_schema else spec.table


def has_rows(source: Source, spec: QuerySpec, company: str) -> bool:
    """Whether ``spec``'s table holds any row of ``company`` (one ``EXISTS`` query)."""
    with source.guarded(f"looking for rows of {company!r} in {spec.table!r}"):
        if source.dialect == "sqlite":
            table = (f"{quote_sqlite(spec.table_schema)}." if spec.table_schema else "") + \
                quote_sqlite(spec.table)
            row = source.connection.execute(
                f"SELECT EXISTS (SELECT 1 FROM {table} WHERE "
                f"{quote_sqlite(spec.tenant_column)} = ?)", (company,)).fetchone()
            return bool(row[0])
        from psycopg import sql

        table_id = (sql.Identifier(spec.table_schema, spec.table) if spec.table_schema
                    else sql.Identifier(spec.table))
        query = sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE {} = %s)").format(
            table_id, sql.Identifier(spec.tenant_column))
        row = source.connection.execute(query, (company,)).fetchone()
        source.connection.rollback()
        return bool(row[0])


def check_sources(schedules: Iterable[Schedule], config_dir: str | Path, *,
                  resolver: ConnectionResolver | None = None,
                  report_unreachable: bool = True) -> SourceFindings:
    """Check ``schedules`` against their sources (module docstring): each source is opened
    once, each table described once, each company's rows looked for once per table."""
    by_source: dict[str, list[tuple[Schedule, bool]]] = {}
    for schedule in schedules:
        for version in schedule.versions:
            by_source.setdefault(version.query.source, []).append(
                (version, version is schedule))
    errors: list[str] = []
    warnings: list[str] = []
    for name, versions in sorted(by_source.items()):
        try:
            conn = resolve(name, resolver)
            conn = replace(conn, extra={"connect_timeout": CONNECT_TIMEOUT_SECONDS, **conn.extra})
            with open_source(conn) as source:
                found = _check_one(source, versions, Path(config_dir))
        except ExportError as exc:
            if report_unreachable:
                warnings.append(
                    f"warning: source {name!r} could not be checked ({exc}); csv timestamps and "
                    "companies without rows were not checked against it (--no-source skips "
                    "this check)")
            continue
        errors += found.errors
        warnings += found.warnings
    return SourceFindings(tuple(errors), tuple(warnings))


def _check_one(source: Source, versions: list[tuple[Schedule, bool]],
               config_dir: Path) -> SourceFindings:
    described: dict[tuple[str | None, str], dict[str, str]] = {}

    def columns(spec: QuerySpec) -> dict[str, str]:
        key = (spec.table_schema, spec.table)
        if key not in described:
            found = describe_columns(source, spec.table, spec.table_schema)
            described[key] = {n: declared for n, (declared, _) in found.items()}
        return described[key]

    errors: list[str] = []
    for version, current in versions:
        if version.csv.timestamps != "local":
            continue
        types = columns(version.query)
        start = version.effective_from.isoformat() if version.effective_from else "the start"
        suffix = "" if current else f" (its earlier version from {start})"
        for column in naive_timestamp_columns(version.query.columns, types, source.dialect):
            errors.append(f"{_company_file(config_dir, version.company.id)}: "
                          f"{_label(version)}.csv.timestamps{suffix}: "
                          + local_time_problem(column, _where(version.query), types[column])
                          .removeprefix("csv.timestamps "))
    warnings = _empty_companies(source, [v for v, current in versions if current], columns)
    return SourceFindings(tuple(dict.fromkeys(errors)), tuple(warnings))


def _empty_companies(source: Source, versions: list[Schedule],
                     columns: Callable[[QuerySpec], dict[str, str]]) -> list[str]:
    seen: set[tuple[str, str | None, str, str]] = set()
    warnings = []
    for version in versions:
        spec, company = version.query, version.company.id
        key = (company, spec.table_schema, spec.table, spec.tenant_column)
        if key in seen:
            continue
        seen.add(key)
        if spec.tenant_column not in columns(spec):
            continue  # no such table or column: the render says so, with the fix
        if not has_rows(source, spec, company):
            warnings.append(
                f"warning: {company}: the source {spec.source!r} has no rows of company "
                f"{company!r} in {_where(spec)} ({spec.tenant_column} = {company!r}): its "
                f"exports of {spec.table} will be files with only their header until rows "
                f"arrive; check that {spec.tenant_column} holds the company id")
    return warnings


def preview_notes(schedules: Iterable[Schedule], config_dir: str | Path) -> tuple[list[str], bool]:
    """What ``exportctl preview`` prints to stderr about the previewed schedules' sources
    (``config error: …`` lines, then warnings), and whether there is an error. An unreachable
    source is not a preview's business: ``validate`` says so."""
    found = check_sources(schedules, config_dir, report_unreachable=False)
    return ([f"config error: {line}" for line in found.errors] + list(found.warnings),
            bool(found.errors))
