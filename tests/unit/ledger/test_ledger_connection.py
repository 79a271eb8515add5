"""The ledger's URL from the fields of Airflow's ``export_ledger`` connection (issue 24 item 5;
the lookup itself: tests/dags/test_ledger_connection.py)."""

from __future__ import annotations

import pytest

from export_lib.errors import ConfigError
from export_lib.ledger.database import url_from_fields


def test_a_postgres_connection_is_a_psycopg_url_with_its_database_and_libpq_options():
    url = url_from_fields("postgres", host="db.internal", port=5433, login="exports",
                          password="p@ss/word", schema="exports", conn_id="export_ledger",
                          options={"sslmode": "require"})
    assert url == ("postgresql+psycopg://exports:p%40ss%2Fword@db.internal:5433/exports"
                   "?sslmode=require")


def test_a_sqlite_connection_is_its_file():
    assert url_from_fields("sqlite", host="/srv/ledger.db", port=None, login=None,
                           password=None, schema=None, conn_id="export_ledger") == (
        "sqlite:////srv/ledger.db")


def test_another_kind_of_connection_is_refused_naming_what_works():
    with pytest.raises(ConfigError, match=r"connection 'export_ledger' is of type 'http'; the "
                                          r"ledger needs a postgres connection \(its schema is "
                                          r"the database\) or a sqlite one"):
        url_from_fields("http", host="example.com", port=None, login=None, password=None,
                        schema=None, conn_id="export_ledger")
