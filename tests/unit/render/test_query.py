"""Query specs and SQL building, without a database: injection, tenant scoping, field names."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from psycopg import sql

from export_lib.config.query import load_spec, validate_spec
from export_lib.errors import ConfigError, SchemaDriftError
from export_lib.source.sql import Bounds, build_postgres, build_sqlite, total_order
from tests.fixtures.render import COLUMNS, spec

BASE = {"table": "ad_metrics", "columns": ["company_id", "clicks"],
        "timestamp_column": "event_time", "tenant_column": "company_id"}
BOUNDS = Bounds("acme", datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 2, tzinfo=UTC),
                datetime(2026, 3, 3, tzinfo=UTC))
SOURCE_COLUMNS = {c: "text" for c in COLUMNS}


@pytest.mark.parametrize(("field", "value", "path"), [
    pytest.param("columns", ["clicks", 'x" FROM other_tenant --'], "query.columns",
                 id="column"),
    pytest.param("table", "ad_metrics; DROP TABLE ad_metrics", "query.table", id="table"),
    pytest.param("table_schema", "public.other", "query.table_schema", id="schema"),
    pytest.param("tenant_column", "company_id OR 1=1", "query.tenant_column", id="tenant"),
    pytest.param("order_by", ["(SELECT 1)"], "query.order_by", id="order-by"),
])
def test_sql_in_an_identifier_is_a_config_error_naming_the_field(field, value, path):
    with pytest.raises(ConfigError, match="^" + re.escape(path) + ": .*not a plain column"):
        load_spec({**BASE, field: value})


def test_sql_in_a_filter_column_names_the_filter():
    bad = {"column": "clicks > 0 OR 1", "op": "=", "value": 1}
    with pytest.raises(ConfigError, match=r"query\.filters\[0\]\.column: .*not a plain"):
        load_spec({**BASE, "filters": [bad]})


def test_filtering_on_the_tenant_column_is_rejected():
    other_tenant = {"column": "company_id", "op": "=", "value": "globex"}
    with pytest.raises(ConfigError, match=r"filters\[0\] filters on the tenant column "
                                          r"'company_id'.*remove this filter"):
        load_spec({**BASE, "filters": [other_tenant]})


def test_tenant_scoping_cannot_be_omitted():
    data = {k: v for k, v in BASE.items() if k != "tenant_column"}
    with pytest.raises(ConfigError, match=r"^query\.tenant_column: required field is missing; "
                                          r"add it, e.g\. tenant_column: company_id$"):
        load_spec(data)


@pytest.mark.parametrize(("flt", "message"), [
    pytest.param({"column": "clicks", "op": "in", "value": []}, "non-empty list", id="empty-in"),
    pytest.param({"column": "clicks", "op": "=", "value": {"$gt": 1}}, "is a dict",
                 id="non-scalar"),
    pytest.param({"column": "clicks", "op": "=", "value": None}, "use op 'is_null'",
                 id="null-compare"),
    pytest.param({"column": "clicks", "op": "is_null", "value": 1}, "takes no value",
                 id="null-with-value"),
    pytest.param({"column": "clicks", "op": "LIKE", "value": "%"}, "Input should be",
                 id="unknown-op"),
])
def test_bad_filter_values_are_config_errors(flt, message):
    with pytest.raises(ConfigError, match=rf"query\.filters\[0\].*{message}"):
        load_spec({**BASE, "filters": [flt]})


def test_unknown_column_is_a_config_error_naming_field_and_suggestion():
    bad = spec(columns=("company_id", "clikcs"))
    with pytest.raises(ConfigError, match=r"schedule 'acme/daily': query\.columns\[1\]: column "
                                          r"'clikcs' is not in ad_metrics .*did you mean "
                                          r"'clicks'\?"):
        validate_spec(bad, {**SOURCE_COLUMNS, "clicks": "bigint"}, schedule_id="acme/daily",
                      missing="config")


def test_dropped_column_at_render_time_is_schema_drift_naming_schedule_and_column():
    columns = {c: t for c, t in SOURCE_COLUMNS.items() if c != "spend"}
    with pytest.raises(SchemaDriftError, match=r"schedule 'acme/daily': query\.columns\[4\]: "
                                               r"column 'spend' is not in ad_metrics"):
        validate_spec(spec(), columns, schedule_id="acme/daily")


def test_missing_table_is_schema_drift():
    with pytest.raises(SchemaDriftError, match=r"query\.table 'ad_metrics' does not exist"):
        validate_spec(spec(), {}, schedule_id="acme/daily")


def test_sqlite_sql_binds_every_value_and_scopes_the_tenant_first():
    hostile = "x' OR '1'='1"
    query = spec(filters=({"column": "campaign", "op": "in", "value": [hostile, "b"]},))
    bounds = Bounds(hostile, BOUNDS.window_start, BOUNDS.window_end, BOUNDS.cutoff)
    text, params = build_sqlite(query, bounds)
    assert hostile not in text
    assert "WHERE \"company_id\" = ? AND" in text
    assert params[0] == hostile
    assert params[-2:] == [hostile, "b"]
    assert '"ingested_at"' in text and text.count("?") == len(params)


def test_postgres_sql_quotes_identifiers_and_inlines_values_as_escaped_literals():
    query = spec(filters=({"column": "campaign", "op": "=", "value": "a'); DROP TABLE t; --"},))
    text = build_postgres(query, BOUNDS).as_string(None)
    assert "\"campaign\" = 'a''); DROP TABLE t; --'" in text
    assert text.index("\"company_id\" = 'acme'") < text.index("\"event_time\" >=")
    assert "\"event_time\" < '2026-03-02 00:00:00+00:00'::timestamptz" in text
    assert "\"ingested_at\" < '2026-03-03 00:00:00+00:00'::timestamptz" in text
    assert isinstance(build_postgres(query, BOUNDS), sql.Composed)


def test_total_order_puts_configured_order_first_and_ends_with_every_column():
    order = total_order(spec(order_by=("campaign",)), frozenset({"ctr"}))
    assert order[:2] == ("campaign", "event_time")
    assert set(order) == set(COLUMNS) - {"ctr"}
