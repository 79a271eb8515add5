"""The schema of an export's file: its columns' names, types and nullability, and a fingerprint.

ADR 0025 (the schema contract). The schema is what a consumer parses, so its types are the file's
types, not the source's spellings: ``integer`` and ``bigint`` are both ``int64`` (the CSV text
and the Parquet column are the same), ``numeric(14,2)`` is ``decimal(14,2)`` in both formats.
``docs/reference/schema-contract.md`` has the table (source type → schema type → CSV text → Parquet type);
``tests/unit/test_export_schema.py`` checks it against :func:`schema_type` and the renderers.

The fingerprint is the sha256 of the canonical JSON of the ordered columns
(``[{"name": …, "nullable": …, "type": …}, …]``, keys sorted, no spaces): the same columns in
the same order always give the same fingerprint, whatever the output format, the delimiter or
the timestamps' display zone (none of them changes a column's type).
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from export_lib.config.query import Dialect
    from export_lib.source.database import SqlType

class SchemaColumn(BaseModel):
    """One column of an export's file: ``type`` is a schema type (:func:`schema_type`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    type: str
    nullable: bool


class ExportSchema(BaseModel):
    """The ordered columns of an export's file. Frozen; ``fingerprint`` identifies it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    columns: Annotated[tuple[SchemaColumn, ...], Field(min_length=1)]

    @property
    def fingerprint(self) -> str:
        """sha256 of the canonical JSON of the ordered columns (module docstring)."""
        canonical = json.dumps([c.model_dump() for c in self.columns], sort_keys=True,
                               separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def as_json(self) -> list[dict[str, object]]:
        """The columns as the manifest and the ledger carry them."""
        return [c.model_dump() for c in self.columns]

    @classmethod
    def from_json(cls, columns: list[dict[str, object]]) -> ExportSchema:
        """The schema back from :meth:`as_json` (a manifest's ``schema``, a ledger row)."""
        return cls(columns=tuple(SchemaColumn.model_validate(c) for c in columns))


# Rendering kinds whose schema type is spelled otherwise (the rest keep their kind's name:
# bool, timestamptz, timestamp, date, string).
_NAMES = {"int": "int64", "float4": "float32", "float8": "float64"}


def schema_type(sql_type: SqlType) -> str:
    """The schema type of a rendering kind (``decimal(14,2)`` keeps its precision and scale)."""
    if sql_type.kind == "decimal":
        if sql_type.precision:
            return f"decimal({sql_type.precision},{sql_type.scale or 0})"
        return "decimal"
    return _NAMES.get(sql_type.kind, sql_type.kind)


def observed_schema(columns: dict[str, tuple[str, bool]], names: tuple[str, ...],
                    dialect: Dialect) -> ExportSchema:
    """The schema of a file of ``names`` (in that order) from the source's ``columns``
    (name → (declared type, nullable), :func:`export_lib.source.database.describe_columns`)."""
    from export_lib.source.database import classify

    return ExportSchema(columns=tuple(
        SchemaColumn(name=n, type=schema_type(classify(columns[n][0], dialect)),
                     nullable=columns[n][1]) for n in names))


def _nullability(nullable: bool) -> str:
    return "nullable" if nullable else "not null"


def schema_diff(old: ExportSchema, new: ExportSchema) -> tuple[str, ...]:
    """What changed from ``old`` to ``new``, one line per change (old → new), in ``new``'s
    column order: added, removed, retyped, nullability, then the order if only it moved."""
    before = {c.name: c for c in old.columns}
    after = {c.name: c for c in new.columns}
    lines = [f"added column {c.name} ({c.type}, {_nullability(c.nullable)})"
             for c in new.columns if c.name not in before]
    lines += [f"removed column {c.name} ({c.type}, {_nullability(c.nullable)})"
              for c in old.columns if c.name not in after]
    for column in new.columns:
        was = before.get(column.name)
        if was is None:
            continue
        if was.type != column.type:
            lines.append(f"column {column.name}: type {was.type} → {column.type}")
        if was.nullable != column.nullable:
            lines.append(f"column {column.name}: {_nullability(was.nullable)} → "
                         f"{_nullability(column.nullable)}")
    kept_old = [c.name for c in old.columns if c.name in after]
    kept_new = [c.name for c in new.columns if c.name in before]
    if kept_old != kept_new:
        lines.append(f"column order: {', '.join(kept_old)} → {', '.join(kept_new)}")
    return tuple(lines)


__all__ = ["ExportSchema", "SchemaColumn", "observed_schema", "schema_diff",
           "schema_type"]
