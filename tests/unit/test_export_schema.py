"""The schema of an export's file (export_lib.source.export_schema, ADR 0025): a stable
fingerprint, a diff a person can read, one type mapping for CSV and Parquet — and the table in
docs/reference/schema-contract.md is the one the code implements."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from datetime import UTC, date, datetime
from decimal import Decimal
from io import BytesIO
from pathlib import Path

import pytest
from pydantic import ValidationError

from export_lib.render.csv_format import field_formatter
from export_lib.render.engine import RenderOptions, render
from export_lib.render.parquet_format import arrow_type
from export_lib.source.connections import parse_connection
from export_lib.source.database import classify, describe_columns, open_source
from export_lib.source.export_schema import (
    ExportSchema,
    SchemaColumn,
    observed_schema,
    schema_diff,
    schema_type,
)
from tests.fixtures.render import CUTOFF, T0, T1, spec

DOC = Path(__file__).resolve().parents[2] / "docs" / "reference" / "schema-contract.md"


def _schema(*columns: tuple[str, str, bool]) -> ExportSchema:
    return ExportSchema(columns=tuple(SchemaColumn(name=n, type=t, nullable=null)
                                      for n, t, null in columns))


BEFORE = _schema(("day", "date", False), ("spend", "decimal(14,2)", False),
                 ("note", "string", True))


def test_the_fingerprint_is_the_sha256_of_the_canonical_columns():
    canonical = ('[{"name":"day","nullable":false,"type":"date"},'
                 '{"name":"spend","nullable":false,"type":"decimal(14,2)"},'
                 '{"name":"note","nullable":true,"type":"string"}]')
    assert BEFORE.fingerprint == hashlib.sha256(canonical.encode()).hexdigest()
    # Stable: rebuilt from its JSON (as the ledger and the manifest keep it) it is the same.
    assert ExportSchema.from_json(json.loads(json.dumps(BEFORE.as_json()))).fingerprint == \
        BEFORE.fingerprint


@pytest.mark.parametrize("other", [
    pytest.param(_schema(("spend", "decimal(14,2)", False), ("day", "date", False),
                         ("note", "string", True)), id="order"),
    pytest.param(_schema(("day", "date", False), ("spend", "float64", False),
                         ("note", "string", True)), id="type"),
    pytest.param(_schema(("day", "date", False), ("spend", "decimal(14,2)", True),
                         ("note", "string", True)), id="nullability"),
    pytest.param(_schema(("day", "date", False), ("spend", "decimal(14,3)", False),
                         ("note", "string", True)), id="scale"),
])
def test_every_part_of_a_column_moves_the_fingerprint(other):
    assert other.fingerprint != BEFORE.fingerprint


def test_the_diff_names_each_change_old_to_new():
    after = _schema(("day", "date", False), ("spend", "float64", True),
                    ("clicks", "int64", False))
    assert schema_diff(BEFORE, after) == (
        "added column clicks (int64, not null)",
        "removed column note (string, nullable)",
        "column spend: type decimal(14,2) → float64",
        "column spend: not null → nullable",
    )
    moved = _schema(("spend", "decimal(14,2)", False), ("day", "date", False),
                    ("note", "string", True))
    assert schema_diff(BEFORE, moved) == ("column order: day, spend, note → spend, day, note",)
    assert schema_diff(BEFORE, BEFORE) == ()


def test_a_schema_is_frozen_and_strict():
    with pytest.raises(ValidationError, match="frozen"):
        BEFORE.columns = ()
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        SchemaColumn(name="a", type="int64", nullable=False, precision=3)
    with pytest.raises(ValidationError, match="at least 1 item"):
        ExportSchema(columns=())


# --- the documented type table ---------------------------------------------------------------

# One value of each schema type, as a database driver hands it to the CSV writer.
SAMPLES = {
    "int64": 42, "decimal(14,2)": Decimal("12.3"), "decimal(40,2)": Decimal("12.3"),
    "decimal": Decimal("12.3456789012"), "float32": 0.1, "float64": 0.1, "bool": True,
    "timestamptz": datetime(2026, 3, 1, 5, tzinfo=UTC), "timestamp": datetime(2026, 3, 1, 5),
    "date": date(2026, 3, 1), "string": "spring, sale",
}


def _doc_rows() -> list[tuple[list[str], str, str, str]]:
    """(source types, schema type, CSV example, Parquet type) of each row of the doc's table."""
    text = DOC.read_text()
    table = text.split("| PostgreSQL type | schema type | CSV field (example) | Parquet type |")[1]
    rows = []
    for line in table.strip().splitlines()[1:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        sources = re.findall(r"`([^`]+)`", cells[0])
        rows.append((sources, *(c.strip("`") for c in cells[1:])))
    return rows


def test_the_doc_table_lists_every_schema_type_once():
    assert sorted(row[1] for row in _doc_rows()) == sorted(SAMPLES)


@pytest.mark.parametrize("row", _doc_rows(), ids=lambda row: row[1])
def test_each_documented_row_is_what_the_code_does(row):
    sources, schema, csv_text, parquet = row
    for source in sources:
        sql_type = classify(source, "postgresql")
        assert schema_type(sql_type) == schema, source
        assert str(arrow_type(sql_type, "UTC")) == parquet, source
        formatted = field_formatter(sql_type, zone=UTC, delimiter=",", single_column=False)(
            SAMPLES[schema])
        assert formatted == csv_text, source


# --- what render reports -----------------------------------------------------------------------

@pytest.fixture()
def sqlite_source(tmp_path: Path):
    path = tmp_path / "source.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE ad_metrics (company_id TEXT NOT NULL, event_time TIMESTAMP "
                   "NOT NULL, campaign TEXT, clicks INTEGER, spend NUMERIC(12,2) NOT NULL, "
                   "ctr REAL, active BOOLEAN, ingested_at TIMESTAMP)")
        db.execute("INSERT INTO ad_metrics VALUES ('acme', '2026-03-01 05:00:00', 'a', 1, "
                   "1.5, 0.25, 1, '2026-03-01 06:00:00')")
    with open_source(parse_connection("src", f"sqlite:///{path}")) as source:
        yield source


def test_nullability_comes_from_the_sources_not_null(sqlite_source):
    described = describe_columns(sqlite_source, "ad_metrics")
    assert described["company_id"] == ("text", False)
    assert described["campaign"] == ("text", True)
    assert observed_schema(described, ("spend", "clicks", "event_time"), "sqlite") == _schema(
        ("spend", "decimal(12,2)", False), ("clicks", "int64", True),
        ("event_time", "timestamptz", False))


def test_csv_and_parquet_of_the_same_columns_have_the_same_schema(sqlite_source):
    """Format, delimiter and timestamp zone change the bytes, never the schema."""
    query = spec(ingested_column=None)
    seen = []
    for options in (RenderOptions(format="csv"), RenderOptions(format="parquet"),
                    RenderOptions(format="csv", delimiter=";", timestamps="local",
                                  timezone="Europe/Berlin")):
        checked: list[ExportSchema] = []
        result = render(sqlite_source, query, company_id="acme", window_start=T0,
                        window_end=T1, cutoff=CUTOFF, options=options, sink=BytesIO(),
                        check_schema=checked.append)
        assert checked == [result.export_schema]  # checked before the rows, then reported
        seen.append(result.export_schema)
    assert seen[0] == seen[1] == seen[2]
    assert [c.type for c in seen[0].columns] == [
        "string", "timestamptz", "string", "int64", "decimal(12,2)", "float64", "bool",
        "timestamptz"]


def test_a_failing_check_stops_the_render_before_any_row(sqlite_source):
    class Refused(Exception):
        pass

    def refuse(schema: ExportSchema) -> None:
        raise Refused(schema.fingerprint)

    sink = BytesIO()
    with pytest.raises(Refused):
        render(sqlite_source, spec(ingested_column=None), company_id="acme", window_start=T0,
               window_end=T1, cutoff=CUTOFF, options=RenderOptions(), sink=sink,
               check_schema=refuse)
    assert sink.getvalue() == b""
