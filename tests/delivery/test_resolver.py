"""Destinations and artifact stores resolve their connections through the caller's resolver
(the Airflow edge passes one that asks Airflow); with none, ``AIRFLOW_CONN_*`` as before."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from export_lib.config.destinations import S3Destination
from export_lib.errors import ConfigError, ConnectionLookupError, DeliveryError
from export_lib.source.connections import Connection, parse_connection
from tests.delivery.conftest import ArtifactFactory
from tests.delivery.support import only_record, run
from tests.services.s3 import S3Server


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
    assert asked == [("s3", {"connect_timeout": 10, "read_timeout": 120, "max_attempts": 2})]
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
