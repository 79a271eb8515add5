"""Destinations and artifact stores resolve their connections through the caller's resolver
(the Airflow edge passes one that asks Airflow); with none, ``AIRFLOW_CONN_*`` as before."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from export_lib.config.destinations import EmailDestination, S3Destination, WebhookDestination
from export_lib.errors import ConfigError, ConnectionLookupError, DeliveryError
from export_lib.source.connections import Connection, parse_connection
from tests.fixtures.delivery import ArtifactFactory
from tests.services.http import WebhookReceiver
from tests.services.s3 import S3Server
from tests.services.smtp import SmtpRelay
from tests.support.delivery import OWNER, only_record, run


@pytest.fixture()
def bucket(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"resolved-{uuid.uuid4().hex[:10]}"
    s3_server.client().create_bucket(Bucket=name)
    monkeypatch.delenv("AIRFLOW_CONN_PARTNER_S3", raising=False)
    return name


def test_an_s3_destination_uses_the_client_its_resolver_offers(
        sqlite_engine: sa.Engine, s3_server: S3Server, bucket: str,
        make_artifact: ArtifactFactory) -> None:
    asked: list[tuple[str, dict[str, Any]]] = []

    def offered(**settings: Any) -> Any:
        asked.append(("s3", settings))
        return s3_server.client()

    def resolver(conn_id: str) -> Connection:
        return Connection(conn_id, "aws", clients={"s3": offered})  # no keys of its own

    artifact = make_artifact()
    destination = S3Destination(id="partner", conn_id="partner_s3", bucket=bucket)
    outcome = run(sqlite_engine, destination, artifact, resolver=resolver)

    assert outcome.state == "acknowledged"
    # The SDK's own bounded retries: EXPORT_OBJECT_STORE_MAX_ATTEMPTS (5 unless set).
    assert asked == [("s3", {"connect_timeout": 10, "read_timeout": 120, "max_attempts": 5})]
    head = s3_server.client().head_object(Bucket=bucket, Key=artifact.name)
    assert head["Metadata"]["sha256"] == artifact.sha256


def test_without_a_resolver_an_unknown_connection_is_permanent_and_names_the_fix(
        sqlite_engine: sa.Engine, bucket: str, make_artifact: ArtifactFactory) -> None:
    destination = S3Destination(id="partner", conn_id="partner_s3", bucket=bucket)
    with pytest.raises(DeliveryError, match=r"destination 'partner': connection 'partner_s3' "
                                            r"is not defined: set AIRFLOW_CONN_PARTNER_S3") as e:
        run(sqlite_engine, destination, make_artifact())
    assert not e.value.retryable
    assert only_record(sqlite_engine)["state"] == "exhausted"


def test_a_connection_store_that_is_down_leaves_the_delivery_to_retry(
        sqlite_engine: sa.Engine, bucket: str, make_artifact: ArtifactFactory) -> None:
    def resolver(conn_id: str) -> Connection:
        raise ConnectionLookupError(f"connection {conn_id!r} could not be looked up in "
                                    "Airflow (ConnectError); the task will retry")

    destination = S3Destination(id="partner", conn_id="partner_s3", bucket=bucket)
    with pytest.raises(DeliveryError, match=r"destination 'partner': connection 'partner_s3' "
                                            r"could not be looked up") as e:
        run(sqlite_engine, destination, make_artifact(), resolver=resolver)
    assert e.value.retryable
    assert only_record(sqlite_engine)["state"] == "pending"


def test_an_s3_artifact_store_resolves_its_connection_through_the_resolver(
        s3_server: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from export_lib.storage.stores import open_store

    monkeypatch.setenv("EXPORT_ARTIFACT_CONN", "artifact_s3")
    monkeypatch.delenv("AIRFLOW_CONN_ARTIFACT_S3", raising=False)
    asked: list[str] = []

    def resolver(conn_id: str) -> Connection:
        asked.append(conn_id)
        return parse_connection(conn_id, s3_server.connection_uri())

    store = open_store(f"s3://{bucket}/exports", resolver=resolver)
    uri = store.staging_uri("attempt-1", "csv")
    with store.open_staging(uri) as fh:
        fh.write(b"a,b\n1,2\n")

    assert asked == ["artifact_s3"] and store.exists(uri)
    with pytest.raises(ConfigError, match="AIRFLOW_CONN_ARTIFACT_S3"):
        open_store(f"s3://{bucket}/exports")


# -- connections made for Airflow's own providers (UI form) work as they are ----------------

def test_an_airflow_smtp_form_connection_delivers_mail(
        sqlite_engine: sa.Engine, smtp: SmtpRelay, make_artifact: ArtifactFactory) -> None:
    """SmtpHook's fields: from_email, disable_ssl/disable_tls (plain relay here, so it needs
    the explicit allow_plaintext extra)."""
    def resolver(conn_id: str) -> Connection:
        return Connection(conn_id, "smtp", host="127.0.0.1", port=smtp.port,
                          extra={"from_email": "exports@example.com", "disable_ssl": True,
                                 "disable_tls": True, "allow_plaintext": True})

    mail = EmailDestination(id="mail", conn_id="smtp_default", to=("ops@acme.example",))
    outcome = run(sqlite_engine, mail, make_artifact(), resolver=resolver,
                  authorized={OWNER, "ops@acme.example"})  # recipients must be authorised

    assert outcome.state == "acknowledged"
    assert smtp.handler.envelopes == [("exports@example.com", ["ops@acme.example"])]


@pytest.mark.parametrize(("conn_type", "extra", "expected"), [
    ("smtp", {}, (False, False)),
    ("smtp", {"starttls": "true"}, (False, True)),
    ("smtps", {}, (True, False)),
    ("smtp", {"disable_ssl": False, "disable_tls": False}, (True, False)),  # SmtpHook default
    ("smtp", {"disable_ssl": True, "disable_tls": False}, (False, True)),
    ("smtp", {"disable_ssl": "true", "disable_tls": "true"}, (False, False)),
])
def test_tls_mode_reads_both_spellings(conn_type: str, extra: dict, expected: tuple) -> None:
    from export_lib.delivery.transports.email import tls_mode

    assert tls_mode(Connection("mail", conn_type, extra=extra)) == expected


@pytest.mark.parametrize(("fields", "path"), [
    ({"schema": "http"}, "/exports"),                      # HttpHook: schema is the scheme
    ({"host_prefix": "http://", "schema": None}, "/exports"),  # host carries the scheme
    ({"host_prefix": "http://", "host_suffix": "/in"}, "/in/exports"),
])
def test_an_airflow_http_form_connection_posts_where_http_hook_would(
        sqlite_engine: sa.Engine, webhook: WebhookReceiver, make_artifact: ArtifactFactory,
        fields: dict, path: str) -> None:
    host = fields.get("host_prefix", "") + "127.0.0.1" + fields.get("host_suffix", "")

    def resolver(conn_id: str) -> Connection:
        return Connection(conn_id, "http", host=host, port=webhook.port,
                          schema=fields.get("schema"))

    hook = WebhookDestination(id="notify", conn_id="http_default", endpoint="/exports")
    outcome = run(sqlite_engine, hook, make_artifact(), resolver=resolver)

    assert outcome.state == "acknowledged"
    assert [r["path"] for r in webhook.state.requests] == [path]
