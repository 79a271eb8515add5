"""Hostile connection URIs (issue 12's corpus): each webhook connection that must not be used is
refused with one clear error naming the connection, before anything is sent; and no message,
``repr`` or masked form of any connection shows a credential, a path or a query string."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from export_lib.config.destinations import WebhookDestination
from export_lib.errors import DeliveryError
from export_lib.masking import mask_uri
from export_lib.source.connections import parse_connection
from tests.fixtures.delivery import ArtifactFactory
from tests.services.http import WebhookReceiver
from tests.support.delivery import only_record, run

HOOK = WebhookDestination(id="notify", conn_id="acme_hook", endpoint="/exports",
                          timeout_seconds=1.0)
SECRET = "Zq7-secret-value"

REFUSED = [
    ("http://{host}/hooks?token=" + SECRET, "sends credentials over plain http"),
    ("http://svc:" + SECRET + "@{host}/hooks", "sends credentials over plain http"),
    ("http://" + SECRET + "@{host}/hooks", "sends credentials over plain http"),
    ('{{"conn_type": "http", "host": "127.0.0.1", "port": {port}, '
     '"extra": "{{\\"token\\": \\"' + SECRET + '\\"}}"}}', "sends credentials over plain http"),
    ("ftp://u:" + SECRET + "@{host}/hooks", "has type 'ftp'; a webhook needs an http"),
    ("file:///etc/passwd?token=" + SECRET, "has type 'file'; a webhook needs an http"),
    # no scheme:// at all: refused while parsing, the value described, never shown
    ("javascript:alert('" + SECRET + "')", r"the value \(\d+ characters, not shown\) is not a "
                                           "connection URI"),
]


@pytest.mark.parametrize(("uri", "reason"), REFUSED, ids=[r[1][:20] + str(i)
                                                          for i, r in enumerate(REFUSED)])
def test_unusable_webhook_connection_is_refused_before_sending(
    sqlite_engine: sa.Engine, webhook: WebhookReceiver,  # noqa: F811
    make_artifact: ArtifactFactory, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
    uri: str, reason: str,
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK",
                       uri.format(host=f"127.0.0.1:{webhook.port}", port=webhook.port))
    with pytest.raises(DeliveryError, match=rf"connection 'acme_hook' .*{reason}") as info:
        run(sqlite_engine, HOOK, make_artifact())
    assert info.value.retryable is False
    assert webhook.state.requests == []
    assert SECRET not in str(info.value) and SECRET not in str(only_record(sqlite_engine))


@pytest.mark.parametrize(("uri", "shown"), [
    ("https://u:" + SECRET + "@hooks.example.com:8443/T0/" + SECRET + "?token=" + SECRET + "#f",
     "https://hooks.example.com:8443"),
    ("postgresql+psycopg://reader:" + SECRET + "@db.internal:5432/warehouse?sslmode=require",
     "postgresql://db.internal:5432"),
    ("aws://AKIA:" + SECRET + "@/?endpoint_url=http%3A%2F%2Fminio%3A9000", "aws://"),
    ("smtp://relay:" + SECRET + "@[::1]:587/", "smtp://[::1]:587"),
    ("sqlite:////var/lib/exports/ledger.db", "sqlite:////var/lib/exports/ledger.db"),
    ("https://h:99999999/" + SECRET, "https://***"),  # unparseable port: nothing but the scheme
    ("no scheme " + SECRET, "***"),
])
def test_mask_uri_keeps_scheme_host_and_port_only(uri: str, shown: str) -> None:
    assert mask_uri(uri) == shown


def test_connection_repr_and_masked_form_hide_password_path_and_extra_values() -> None:
    conn = parse_connection("acme_hook", json.dumps({
        "conn_type": "https", "host": "hooks.example.com", "login": "svc", "password": SECRET,
        "schema": f"services/{SECRET}", "extra": {"token": SECRET, "signing_secret": SECRET,
                                                  "ca_file": "/etc/ca.pem"}}))
    for shown in (repr(conn), str(conn), conn.masked_uri(), f"{conn!r}"):
        assert SECRET not in shown
    assert repr(conn) == ("Connection(conn_id='acme_hook', location='https://hooks.example.com', "
                          "login='svc', password='***', extra_keys=['ca_file', "
                          "'signing_secret', 'token'])")
    assert conn.scrub(f"GET /services/{SECRET} failed (token {SECRET})") == (
        "GET /*** failed (token ***)")


def test_an_unexpected_error_quoting_the_connection_is_scrubbed_everywhere(
    sqlite_engine: sa.Engine, webhook: WebhookReceiver,  # noqa: F811
    make_artifact: ArtifactFactory, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The last line of defence: a bug (here, our own send raising with the full URL and
    token in its message) must not carry a secret into the ledger, the raised error or logs."""
    from export_lib.delivery.transports.webhook import WebhookTransport

    def buggy_send(self: WebhookTransport, artifact: object, ctx: object) -> str:
        raise RuntimeError(f"bug while posting to {self.url()} with token "
                           f"{self._conn.extra['token']}")  # type: ignore[union-attr]

    monkeypatch.setattr(WebhookTransport, "send", buggy_send)
    monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK", f"https://127.0.0.1:{webhook.port}/hooks/"
                       f"{SECRET}-path?token={SECRET}-token")
    with caplog.at_level("DEBUG"), pytest.raises(
            DeliveryError, match=r"unexpected RuntimeError: bug while posting to "
                                 r"https://127\.0\.0\.1:\d+/\*\*\*/exports with token \*\*\*") as info:
        run(sqlite_engine, HOOK, make_artifact())
    assert info.value.__cause__ is None and info.value.__suppress_context__ is True
    shown = [str(info.value), str(only_record(sqlite_engine)), caplog.text]
    assert "Traceback" in caplog.text  # the bug's traceback is logged, scrubbed
    assert not [text for text in shown if SECRET in text]


@pytest.mark.parametrize("timeout", ["soon", "0", "-5", "1e9", "nan", "inf"])
def test_a_bad_smtp_timeout_extra_is_a_config_error_naming_the_connection(timeout: str) -> None:
    from export_lib.delivery.transports.email import smtp_timeout
    from export_lib.errors import ConfigError

    conn = parse_connection("acme_smtp", f"smtps://mailer:pw@127.0.0.1:465?timeout={timeout}")
    with pytest.raises(ConfigError, match=r"connection 'acme_smtp': extra 'timeout' is '"):
        smtp_timeout(conn)
    assert smtp_timeout(parse_connection("ok", "smtps://127.0.0.1:465?timeout=12.5")) == 12.5
