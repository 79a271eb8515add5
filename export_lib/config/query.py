"""Query specs: what rows an export reads, declared as data (no raw SQL in configs).

Owned by the render engine. Three layers keep a config from reading what it must not:

1. the spec itself (pydantic): identifiers must be plain names (``^[A-Za-z_][A-Za-z0-9_]*$``),
   filter values must be scalars (lists for ``in``/``not_in``), and the tenant column may not
   be filtered on (the tenant predicate is the engine's, never the config's);
2. :func:`validate_spec` against the source's *actual* columns (unknown → ``ConfigError`` when
   checking a config, ``SchemaDriftError`` at render time: the column was there when the config
   was accepted, so the source changed);
3. SQL building: identifiers are quoted, values are bound parameters (PostgreSQL COPY cannot
   take parameters, so there values are rendered client-side by psycopg's ``sql.Literal``, never
   by string concatenation), and ``tenant_column = company_id`` is ANDed to every query.
   Every condition is ANDed (there is no OR), so a filter can only narrow the company's rows,
   never widen them to another tenant's.
"""

from __future__ import annotations

import difflib
import re
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from export_lib.config.limits import (
    MAX_COLUMNS,
    MAX_FILTER_VALUES,
    MAX_FILTERS,
    MAX_VALUE_TEXT,
    shown,
)
from export_lib.config.messages import issues_from_validation
from export_lib.config.patterns import SOURCE_NAME
from export_lib.errors import ConfigError, SchemaDriftError

FilterOp = Literal["=", "!=", "<", "<=", ">", ">=", "in", "not_in", "is_null", "is_not_null"]
Dialect = Literal["postgresql", "sqlite"]

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")  # always fullmatch ('$' allows '\n')
# Schemas no export may read: the catalog (``pg_authid``...) and the SQL standard views of it.
SYSTEM_SCHEMAS = ("pg_catalog", "information_schema", "pg_toast")
SYSTEM_TABLE_PREFIXES = ("pg_", "sqlite_")
SCALARS = (str, int, float, Decimal, bool, date, datetime)
LIST_OPS = ("in", "not_in")
NULL_OPS = ("is_null", "is_not_null")


def check_identifier(value: str) -> str:
    if not isinstance(value, str) or not IDENTIFIER.fullmatch(value):
        raise ValueError(
            f"{shown(value)} is not a plain column/table name: use letters, digits and _ only "
            "(max 63 chars, not starting with a digit); expose other names through a view"
        )
    return value


def check_not_system(table: str, schema: str | None) -> None:
    """Refuse the database's own catalog: ``pg_catalog.pg_authid`` is not export data, and an
    unqualified ``pg_*`` name resolves to ``pg_catalog`` whatever the ``search_path``."""
    lowered = (schema or "").lower()
    if lowered in SYSTEM_SCHEMAS or lowered.startswith("pg_"):
        raise ValueError(f"table_schema {schema!r} is a system schema; exports read only the "
                         "tables listed under 'sources' in defaults.yaml")
    if table.lower().startswith(SYSTEM_TABLE_PREFIXES):
        raise ValueError(f"table {table!r} looks like a system catalog table "
                         f"({', '.join(SYSTEM_TABLE_PREFIXES)}*); exports read only the tables "
                         "listed under 'sources' in defaults.yaml")


class Filter(BaseModel):
    """One ``column op value`` condition; the value is always a bound parameter."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    column: str = Field(description="The column compared (not the tenant column).",
                        examples=["channel"])
    op: FilterOp = Field(description="The comparison: = != < <= > >= take one value; in and "
                         "not_in a non-empty list; is_null and is_not_null no value.",
                         examples=["in"])
    value: Any = Field(None, description="A string, number, boolean, date or timestamp (a list "
                       "of them for in/not_in; none for is_null/is_not_null), always sent as a "
                       "bound parameter.", examples=[["search", "display"]])

    @field_validator("value")
    @classmethod
    def _bounded(cls, value: Any) -> Any:
        items = value if isinstance(value, tuple) else (value,)
        if len(items) > MAX_FILTER_VALUES:
            raise ValueError(f"at most {MAX_FILTER_VALUES} values (got {len(items)}); filter on a "
                             "column with fewer distinct values or use a view")
        if any(isinstance(v, str) and len(v) > MAX_VALUE_TEXT for v in items):
            raise ValueError(f"text values are at most {MAX_VALUE_TEXT} characters")
        return value

    @field_validator("column")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        return check_identifier(value)

    @field_validator("value", mode="before")
    @classmethod
    def _immutable(cls, value: Any) -> Any:
        return tuple(value) if isinstance(value, list) else value

    @model_validator(mode="after")
    def _value_fits_op(self) -> Filter:
        if self.op in NULL_OPS:
            if self.value is not None:
                raise ValueError(f"op {self.op!r} takes no value (got {shown(self.value)}); "
                                 "remove it")
        elif self.op in LIST_OPS:
            if not isinstance(self.value, tuple) or not self.value:
                raise ValueError(
                    f"op {self.op!r} needs a non-empty list value (got {shown(self.value)})")
            for item in self.value:
                _check_scalar(item, self.op)
        else:
            _check_scalar(self.value, self.op)
        return self


def _check_scalar(value: Any, op: str) -> None:
    if value is None:
        raise ValueError(f"op {op!r} cannot compare with null; use op 'is_null' instead")
    if not isinstance(value, SCALARS):
        raise ValueError(
            f"value {shown(value)} is a {type(value).__name__}; use a string, number, boolean, "
            "date or timestamp"
        )


class QuerySpec(BaseModel):
    """The rows of one export: a table of a source connection, scoped to one company.

    ``timestamp_column`` decides window inclusion (``start <= ts < end``);
    ``tenant_column`` is compared to the company id on every query;
    ``ingested_column`` (if the source has one) gives reproducible content via the run's
    source cutoff (``ingested_at < cutoff``); without it the artifact is marked not
    reproducible. ``table_schema`` qualifies the table (PostgreSQL schema); None means the
    connection's ``search_path``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(default="demo_source", pattern=SOURCE_NAME, description="The source "
                        "connection, one listed under sources in defaults.yaml.",
                        examples=["demo_source"])
    table: str = Field(description="The table (or view) read; one listed for the source in "
                       "defaults.yaml.", examples=["widget_metrics"])
    table_schema: str | None = Field(None, description="The PostgreSQL schema of the table; "
                                     "left out: the connection's search_path.",
                                     examples=["reporting"])
    columns: tuple[str, ...] = Field(min_length=1, max_length=MAX_COLUMNS,
                                     description="The columns written to the file, in order.",
                                     examples=[["company_id", "event_time", "value"]])
    timestamp_column: str = Field(description="The column that puts a row in a window "
                                  "(start <= value < end).", examples=["event_time"])
    tenant_column: str = Field(description="The column holding the company id (as listed in "
                               "defaults.yaml); every query is scoped to the run's company.",
                               examples=["company_id"])
    ingested_column: str | None = Field(
        None, description="When the source wrote each row: rows written after the run's cutoff "
        "are left out, so exporting a period again gives the same file; left out: the file is "
        "marked not reproducible.", examples=["ingested_at"])
    filters: tuple[Filter, ...] = Field(default=(), max_length=MAX_FILTERS,
                                        description="Conditions every row must meet (ANDed).",
                                        examples=[[{"column": "channel", "op": "=",
                                                    "value": "search"}]])
    order_by: tuple[str, ...] = Field(default=(), max_length=MAX_COLUMNS,
                                      description="Columns the rows are sorted by, ascending; "
                                      "left out: no order is promised.",
                                      examples=[["event_time", "widget_id"]])

    @field_validator("table", "table_schema", "timestamp_column", "tenant_column",
                     "ingested_column")
    @classmethod
    def _plain_name(cls, value: str | None) -> str | None:
        return None if value is None else check_identifier(value)

    @model_validator(mode="after")
    def _not_a_system_table(self) -> QuerySpec:
        check_not_system(self.table, self.table_schema)
        return self

    @field_validator("columns", "order_by")
    @classmethod
    def _plain_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            check_identifier(name)
        if len(set(value)) != len(value):
            dupes = sorted({n for n in value if value.count(n) > 1})
            raise ValueError(f"names must be unique; {', '.join(dupes)} repeated")
        return value

    @model_validator(mode="after")
    def _tenant_is_engine_owned(self) -> QuerySpec:
        for i, flt in enumerate(self.filters):
            if flt.column == self.tenant_column:
                raise ValueError(
                    f"filters[{i}] filters on the tenant column {self.tenant_column!r}; the "
                    "engine scopes every query to the run's company, remove this filter"
                )
        return self

    def referenced(self) -> list[tuple[str, str]]:
        """Every (field path, column name) the spec reads, in config order."""
        refs = [(f"columns[{i}]", c) for i, c in enumerate(self.columns)]
        refs += [("timestamp_column", self.timestamp_column), ("tenant_column", self.tenant_column)]
        if self.ingested_column:
            refs.append(("ingested_column", self.ingested_column))
        refs += [(f"filters[{i}].column", f.column) for i, f in enumerate(self.filters)]
        refs += [(f"order_by[{i}]", c) for i, c in enumerate(self.order_by)]
        return refs


def load_spec(data: dict[str, Any], *, where: str = "query") -> QuerySpec:
    """Build a QuerySpec from config data; every problem becomes one ConfigError line.

    ``where`` prefixes the field paths (``config/companies/acme.yaml: channels[0].query``).
    """
    try:
        return QuerySpec.model_validate(data)
    except ValidationError as exc:
        issues = issues_from_validation("", QuerySpec, exc, within=where)
        raise ConfigError("\n".join(issues), issues) from None


def validate_spec(
    spec: QuerySpec,
    columns: dict[str, str],
    *,
    schedule_id: str,
    missing: Literal["drift", "config"] = "drift",
) -> None:
    """Check every column the spec names exists in the source (``columns``: name → type).

    ``missing="drift"`` (render time, the default) raises SchemaDriftError naming schedule and
    column; ``missing="config"`` (checking a new config) raises ConfigError naming the field.
    All problems are reported at once.
    """
    where = f"{spec.table_schema}.{spec.table}" if spec.table_schema else spec.table
    if not columns:
        msg = (f"schedule {schedule_id!r}: query.table {where!r} does not exist in source "
               f"{spec.source!r} (or has no columns); fix the table name or create it")
        raise (SchemaDriftError if missing == "drift" else ConfigError)(msg)
    issues = []
    for path, name in spec.referenced():
        if name in columns:
            continue
        close = difflib.get_close_matches(name, list(columns), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        issues.append(
            f"schedule {schedule_id!r}: query.{path}: column {name!r} is not in {where} of "
            f"source {spec.source!r} (it has: {', '.join(columns)}){hint}"
        )
    if not issues:
        return
    if missing == "config":
        raise ConfigError(issues[0] if len(issues) == 1 else "\n".join(issues), issues)
    raise SchemaDriftError(
        "\n".join(issues)
        + "\nthe source changed since the config was accepted: restore the column in the source "
        "or remove it from the schedule's query"
    )
