"""SQL building from a query spec: quoted identifiers, bound values, the tenant predicate first.

PostgreSQL COPY cannot take parameters, so there values are rendered client-side by psycopg's
``sql.Literal``, never by string concatenation; ``tenant_column = company_id`` is ANDed to every
query and there is no OR, so a filter can only narrow the company's rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, Literal

from export_lib.config.query import LIST_OPS, NULL_OPS, QuerySpec

# "text": the value as the server prints it (JSON Lines writes timestamps so, like the CSV).
ColumnExpr = Literal["plain", "bool_text", "text", "numeric_38_9", "neutral_text"]
# CSV formula neutralisation (csv_format.FORMULA_STARTS): tab, CR, '+', '-', '=', '@'.
# Server CPU for 2 M rows with one text column (bench table, median of 7, interleaved): no
# expression 2.46 s; ascii(c) IN (...) 2.65 s; left(c, 1) IN (...) 2.97 s; c ~ '^[...]' 2.92 s;
# ascii(c) < 65 AND ascii(c) IN (...) 2.54 s — the range test rejects most values (letters)
# before the list is compared, and costs about what ascii() alone does (2.57 s).
_FORMULA_CODES = "9, 13, 43, 45, 61, 64"


@dataclass(frozen=True)
class Bounds:
    """The run's bounds: company, half-open window and (optional) source cutoff. UTC-aware.

    ``naive_columns``: columns of type ``timestamp without time zone``; their bounds are
    compared as naive UTC, so the result never depends on the session's TimeZone (which the
    fast path sets to the company zone for local-time output).
    """

    company_id: str
    window_start: datetime
    window_end: datetime
    cutoff: datetime | None = None
    naive_columns: frozenset[str] = frozenset()

    def bound(self, column: str, value: datetime) -> datetime:
        if column in self.naive_columns:
            return value.astimezone(UTC).replace(tzinfo=None)
        return value


_SQL_OPS = {"=": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def _conditions(spec: QuerySpec, bounds: Bounds) -> list[tuple[str, str, Any]]:
    """(column, op, value) triples ANDed together; the tenant predicate is always first."""
    conds: list[tuple[str, str, Any]] = [
        (spec.tenant_column, "=", bounds.company_id),
        (spec.timestamp_column, "ts>=", bounds.bound(spec.timestamp_column, bounds.window_start)),
        (spec.timestamp_column, "ts<", bounds.bound(spec.timestamp_column, bounds.window_end)),
    ]
    if spec.ingested_column and bounds.cutoff is not None:
        conds.append((spec.ingested_column, "ts<",
                      bounds.bound(spec.ingested_column, bounds.cutoff)))
    conds += [(f.column, f.op, f.value) for f in spec.filters]
    return conds


def _pg_expr(name: str, kind: ColumnExpr) -> Any:
    from psycopg import sql

    col = sql.Identifier(name)
    if kind in ("bool_text", "text"):
        return sql.SQL("{c}::text AS {c}").format(c=col)
    if kind == "numeric_38_9":
        return sql.SQL("{c}::numeric(38,9) AS {c}").format(c=col)
    if kind == "neutral_text":
        return sql.SQL("CASE WHEN ascii({c}) < 65 AND ascii({c}) IN (" + _FORMULA_CODES + ") "
                       "THEN '''' || {c} ELSE {c} END AS {c}").format(c=col)
    return col


def total_order(spec: QuerySpec, unsortable: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """``order_by``, then the timestamp column, then every exported column: a total order.

    Without it the same rows could come back in another order on a retry (synchronized
    sequential scans, a different plan, VACUUM), and the bytes would differ. Columns whose
    type has no ordering (json, xml) are skipped as tie-breakers.
    """
    keys = [*spec.order_by, spec.timestamp_column, *spec.columns]
    return tuple(dict.fromkeys(k for k in keys if k not in unsortable or k in spec.order_by))


def build_postgres(
    spec: QuerySpec,
    bounds: Bounds,
    exprs: dict[str, ColumnExpr] | None = None,
    order: tuple[str, ...] | None = None,
) -> Any:
    """A ``psycopg.sql.Composed`` SELECT with every value as ``sql.Literal`` (COPY-safe)."""
    from psycopg import sql

    query = sql.SQL("SELECT {cols} FROM {table} WHERE {where}").format(
        cols=sql.SQL(", ").join(map(sql.Identifier, spec.columns)),
        table=_pg_table(spec),
        where=sql.SQL(" AND ").join(_pg_where(spec, bounds)),
    )
    return _pg_sorted(spec, query, exprs or {}, spec.order_by if order is None else order)


def build_postgres_periods(
    spec: QuerySpec,
    periods: list[Bounds],
    exprs: dict[str, ColumnExpr] | None = None,
    order: tuple[str, ...] = (),
) -> Any:
    """One SELECT over consecutive, contiguous periods (ADR 0038): the rows every period's own
    :func:`build_postgres` selects, each led by its period's number (``width_bucket`` over
    the periods' starts: 1 for the first), sorted by that number, then ``order``. So within a
    period the rows come in exactly that period's own order. Each period's cutoff applies to
    its own rows: ``ingested < (ARRAY[cutoff, ...])[number]``, one AND like the others (no
    OR: the tenant predicate still narrows every row).
    """
    from psycopg import sql

    first, last = periods[0], periods[-1]
    union = Bounds(first.company_id, first.window_start, last.window_end, None,
                   first.naive_columns)
    ts = spec.timestamp_column
    number = sql.SQL("width_bucket({}, ARRAY[{}])").format(
        sql.Identifier(ts), sql.SQL(", ").join(
            sql.Literal(union.bound(ts, p.window_start)) for p in periods))
    where = _pg_where(spec, union)
    if spec.ingested_column and first.cutoff is not None:
        cutoffs = sql.SQL(", ").join(sql.Literal(union.bound(spec.ingested_column, p.cutoff))
                                     for p in periods)
        # Where the single-period query has its cutoff: after the window, before the filters.
        where.insert(3, sql.SQL("{} < (ARRAY[{}])[{}]").format(
            sql.Identifier(spec.ingested_column), cutoffs, number))
    query = sql.SQL("SELECT {number} AS {period}, {cols} FROM {table} WHERE {where}").format(
        number=number, period=sql.Identifier(PERIOD_COLUMN),
        cols=sql.SQL(", ").join(map(sql.Identifier, spec.columns)),
        table=_pg_table(spec),
        where=sql.SQL(" AND ").join(where),
    )
    return _pg_sorted(spec, query, exprs or {}, order, leading=PERIOD_COLUMN)


# The period number's column in build_postgres_periods' output (first; the client strips it).
PERIOD_COLUMN = "export_lib_period"


def _pg_table(spec: QuerySpec) -> Any:
    from psycopg import sql

    return (sql.Identifier(spec.table_schema, spec.table) if spec.table_schema
            else sql.Identifier(spec.table))


def _pg_where(spec: QuerySpec, bounds: Bounds) -> list[Any]:
    from psycopg import sql

    where = []
    for column, op, value in _conditions(spec, bounds):
        col = sql.Identifier(column)
        if op in NULL_OPS:
            where.append(sql.SQL("{} IS NULL" if op == "is_null" else "{} IS NOT NULL").format(col))
        elif op in LIST_OPS:
            items = sql.SQL(", ").join(sql.Literal(v) for v in value)
            # SQL semantics, documented for configs: not_in never matches a NULL value.
            word = "IN" if op == "in" else "NOT IN"
            where.append(sql.SQL("{} {} ({})").format(col, sql.SQL(word), items))
        else:
            sql_op = {"ts>=": ">=", "ts<": "<"}.get(op) or _SQL_OPS[op]
            where.append(sql.SQL("{} {} {}").format(col, sql.SQL(sql_op), sql.Literal(value)))
    return where


def _pg_sorted(spec: QuerySpec, query: Any, exprs: dict[str, ColumnExpr],
               order: tuple[str, ...], leading: str | None = None) -> Any:
    """``query`` with its ORDER BY (after the ``leading`` output column, when given) and the
    formatting expressions on top."""
    from psycopg import sql

    keys = [sql.SQL("{}.{}").format(sql.Identifier(spec.table), sql.Identifier(k))
            for k in order]
    if leading:
        keys.insert(0, sql.Identifier(leading))
    if keys:
        query += sql.SQL(" ORDER BY {}").format(sql.SQL(", ").join(keys))
    if not any(kind != "plain" for kind in exprs.values()):
        return query
    # Formatting expressions go on top of the sorted rows: evaluated below the sort they
    # would widen every sorted tuple (measured: +19 % server time for one float column,
    # against +7 % here). A subquery with ORDER BY is never flattened, and a projection
    # over it keeps its order.
    cols = [_pg_expr(c, exprs.get(c, "plain")) for c in spec.columns]
    if leading:
        cols.insert(0, sql.Identifier(leading))
    return sql.SQL("SELECT {cols} FROM ({query}) AS export_rows").format(
        cols=sql.SQL(", ").join(cols), query=query)


def quote_sqlite(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_SQLITE_TS = "strftime('%Y-%m-%d %H:%M:%f', {})"


def build_sqlite(
    spec: QuerySpec, bounds: Bounds, order: tuple[str, ...] | None = None
) -> tuple[str, list[Any]]:
    """SELECT text with ``?`` placeholders and its parameters.

    SQLite timestamps are text; comparing ``strftime`` normalisations of both sides makes
    ``T``/space, ``Z``/offset spellings compare as instants (millisecond resolution).
    """
    params: list[Any] = []
    where = []
    for column, op, value in _conditions(spec, bounds):
        col = quote_sqlite(column)
        if op in NULL_OPS:
            where.append(f"{col} IS {'NOT ' if op == 'is_not_null' else ''}NULL")
        elif op in LIST_OPS:
            where.append(f"{col} {'IN' if op == 'in' else 'NOT IN'} "
                         f"({', '.join('?' for _ in value)})")
            params += [_sqlite_value(v) for v in value]
        elif op in ("ts>=", "ts<"):
            where.append(f"{_SQLITE_TS.format(col)} {op[2:]} {_SQLITE_TS.format('?')}")
            params.append(value.isoformat())
        else:
            where.append(f"{col} {_SQL_OPS[op]} ?")
            params.append(_sqlite_value(value))
    table = quote_sqlite(spec.table)
    if spec.table_schema:
        table = f"{quote_sqlite(spec.table_schema)}.{table}"
    text = (f"SELECT {', '.join(map(quote_sqlite, spec.columns))} FROM {table} "
            f"WHERE {' AND '.join(where)}")
    order = spec.order_by if order is None else order
    if order:
        # The window column sorts as an instant, like it compares (its text may mix spellings).
        text += " ORDER BY " + ", ".join(
            _SQLITE_TS.format(quote_sqlite(k)) if k == spec.timestamp_column else quote_sqlite(k)
            for k in order)
    return text, params


def _sqlite_value(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value
