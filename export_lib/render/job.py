"""What one render is asked to do, as the output formats see it: :class:`RenderOptions` (how
the file is written) and :class:`RenderJob` (the query, its columns' source types, the bounds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from export_lib.config.query import QuerySpec
from export_lib.errors import UnknownFormatError
from export_lib.formats import get_format
from export_lib.formats.registry import check_pair
from export_lib.source.database import SqlType
from export_lib.source.sql import Bounds, ColumnExpr, build_postgres, total_order


class RenderOptions(BaseModel):
    """How the artifact is written. ``timezone`` (IANA) applies when ``timestamps='local'``.

    ``format`` is a built-in or installed output format's name (UnknownFormatError otherwise);
    ``compression`` wraps the whole file (csv, jsonl); ``parquet_compression`` is the codec of
    a Parquet file's column chunks.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: str = "csv"
    compression: Literal["none", "gzip", "zstd"] = "none"
    delimiter: Literal[",", ";", "\t", "|"] = ","
    timestamps: Literal["utc", "local"] = "utc"
    timezone: str = "UTC"
    # Parquet row groups end at ~row_group_bytes of Arrow data (bounded memory whatever the
    # row width); row_group_rows, when set, also caps the rows per group.
    # 4 MiB: peak RSS at 2 M rows 141 MB, against 154 MB at 8 MiB and 168 MB at 16 MiB.
    row_group_bytes: int = Field(default=4 << 20, ge=1 << 20, le=1 << 30)
    row_group_rows: int | None = Field(default=None, ge=1_000, le=1_048_576)
    parquet_compression: Literal["snappy", "zstd", "gzip", "none"] = "snappy"
    # CSV only: formula-like text cells get a leading ' (render/csv_format.py).
    neutralize_formulas: bool = True

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        try:
            get_format(value)
        except UnknownFormatError as exc:  # a ValidationError here, like every other field's
            raise ValueError(str(exc)) from None
        return value

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

    @model_validator(mode="after")
    def _compressible(self) -> RenderOptions:
        if problem := check_pair(self.format, self.compression):
            raise ValueError(problem)
        return self

    @property
    def output_zone(self) -> str:
        return self.timezone if self.timestamps == "local" else "UTC"


@dataclass(frozen=True)
class RenderJob:
    """One render's query and options, handed to the output format's methods.

    ``types`` maps each exported column to its source type (:func:`classify`d);
    ``dialect`` is the source's (``postgresql``, ``sqlite``).
    """

    spec: QuerySpec
    bounds: Bounds
    types: dict[str, SqlType]
    options: RenderOptions
    dialect: str
    schedule_id: str = ""

    @property
    def columns(self) -> tuple[str, ...]:
        return self.spec.columns

    @property
    def column_types(self) -> list[SqlType]:
        return [self.types[c] for c in self.spec.columns]

    @property
    def order(self) -> tuple[str, ...]:
        return total_order(self.spec, frozenset(c for c, t in self.types.items() if t.unordered))

    def select(self, exprs: dict[str, ColumnExpr] | None = None) -> Any:
        """The tenant-scoped, totally ordered SELECT (a ``psycopg.sql.Composed``), each column
        through its expression in ``exprs`` (``plain`` when absent)."""
        return build_postgres(self.spec, self.bounds, exprs, self.order)

    def neutralized(self, name: str) -> bool:
        """Whether a column's values get formula neutralisation: character columns, except
        the tenant column (it holds the company id, a slug: never a formula)."""
        return (self.options.neutralize_formulas and self.types[name].text
                and name != self.spec.tenant_column)
