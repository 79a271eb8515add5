"""Query specs: what rows an export reads, declared as data (no raw SQL in configs).

Owned by the render engine (issue 5): identifiers are validated against the source's
actual columns and quoted, values are bound parameters, and every query is scoped to one
company through ``tenant_column``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

FilterOp = Literal["=", "!=", "<", "<=", ">", ">=", "in", "not_in", "is_null", "is_not_null"]


class Filter(BaseModel):
    """One ``column op value`` condition; the value is always a bound parameter."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    column: str
    op: FilterOp
    value: Any = None


class QuerySpec(BaseModel):
    """The rows of one export: a table of a source connection, scoped to one company.

    ``timestamp_column`` decides window inclusion (``start <= ts < end``);
    ``tenant_column`` is compared to the company id on every query;
    ``ingested_column`` (if the source has one) gives reproducible content via the run's
    source cutoff (``ingested_at < cutoff``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = "demo_source"
    table: str
    columns: tuple[str, ...] = Field(min_length=1)
    timestamp_column: str
    tenant_column: str
    ingested_column: str | None = None
    filters: tuple[Filter, ...] = ()
    order_by: tuple[str, ...] = ()
