"""A connection value that cannot be parsed is never echoed (issue 23): a URI without its
scheme (``reader:PW@db:5432/x``) is all password to a reader. The error gives the variable,
the value's length and what is wrong with its shape; the password appears nowhere — not in
the exception, the ledger (where the obligations page and the alert mail read it), nor the
logs."""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa

from export_lib.config.destinations import WebhookDestination
from export_lib.errors import ConfigError, DeliveryError
from export_lib.source.connections import parse_connection
from tests.fixtures.delivery import ArtifactFactory
from tests.services.http import WebhookReceiver
from tests.support.delivery import run

PLANTED = "Pl4nted-pw-7731"
HOOK = WebhookDestination(id="notify", conn_id="acme_hook", endpoint="/exports",
                          timeout_seconds=1.0)

# (value, what the error says is wrong with it)
MALFORMED = [
    (f"reader:{PLANTED}@db.internal:5432/warehouse", r"not a connection URI \(no scheme://\)"),
    (f"postgresql//reader:{PLANTED}@db.internal/x", r"not a connection URI \(no scheme://\)"),
    (f"//reader:{PLANTED}@db.internal/x", r"not a connection URI \(no scheme://\)"),
    (f"{PLANTED}", r"not a connection URI \(no scheme://\)"),
    (f"https://u:{PLANTED}@hooks.example.com:{PLANTED}/",
     "a connection whose port is not a number from 1 to 65535"),
    (f"https://[{PLANTED}/x", "a URI with a malformed IPv6 host"),
    (f'{{"conn_type": "postgres", "password": "{PLANTED}", "port": "{PLANTED}"}}',
     "a connection whose port is not a number from 1 to 65535"),
    (f'["{PLANTED}"]', r"not a connection URI \(no scheme://\)"),
    (f'{{"conn_type": "http", "extra": "{PLANTED} is not JSON"}}',
     r"not valid JSON \(line 1 column 1: Expecting value\)"),
    (f'{{"conn_type": "http", "password": "{PLANTED}", "extra": ["{PLANTED}"]}}',
     "JSON whose 'extra' is not an object"),
    (f'{{"conn_type": "http", "password": ["{PLANTED}"]}}',
     "JSON whose conn_type/host/login/password/schema are not all text"),
    (f'{{"conn_type": "http", "password": "{PLANTED}", ', r"not valid JSON \(line 1 column"),
]
IDS = [f"case{i}" for i in range(len(MALFORMED))]


@pytest.mark.parametrize(("value", "why"), MALFORMED, ids=IDS)
def test_a_malformed_connection_value_is_described_never_shown(value: str, why: str) -> None:
    with pytest.raises(ConfigError, match=(
            rf"^connection 'acme_db' \(AIRFLOW_CONN_ACME_DB\): the value \({len(value.strip())} "
            rf"characters, not shown\) is {why}.*; write a URI such as postgresql://")) as info:
        parse_connection("acme_db", value)
    assert PLANTED not in str(info.value) and "\n" not in str(info.value)
    # the parser's own exception (its text quotes the value) is not chained either
    assert info.value.__cause__ is None
    assert info.value.__context__ is None or info.value.__suppress_context__


@pytest.mark.parametrize(("value", "why"), MALFORMED[:2] + MALFORMED[6:7], ids=IDS[:2] + IDS[6:7])
def test_nothing_of_it_reaches_the_ledger_or_the_logs(
    sqlite_engine: sa.Engine, webhook: WebhookReceiver,  # noqa: F811
    make_artifact: ArtifactFactory, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
    caplog: pytest.LogCaptureFixture, value: str, why: str,
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK", value)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(DeliveryError, match=rf"destination 'notify': connection 'acme_hook' "
                       rf"\(AIRFLOW_CONN_ACME_HOOK\): the value \({len(value)} characters, not "
                       rf"shown\) is {why}") as info:
        run(sqlite_engine, HOOK, make_artifact())
    assert info.value.retryable is False and webhook.state.requests == []
    with sqlite_engine.connect() as conn:
        stored = [str(tuple(row)) for table in sa.inspect(sqlite_engine).get_table_names()
                  for row in conn.execute(sa.text(f"SELECT * FROM {table}"))]  # noqa: S608
    assert any("not shown" in row for row in stored)  # the error was recorded, described
    assert not [row for row in stored if PLANTED in row]
    assert PLANTED not in caplog.text and PLANTED not in str(info.value)
