"""S3 (moto's standalone server, IAM auth on) and GCS (Google's storage-testbench) delivery."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from export_lib.config.destinations import GcsDestination, S3Destination
from export_lib.errors import DeliveryError
from tests.fixtures.delivery import ArtifactFactory
from tests.services.gcs import GcsServer
from tests.services.s3 import S3Server
from tests.support.delivery import only_record, run


@pytest.fixture()
def bucket(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh versioned bucket: every upload adds a version, so re-uploads are countable."""
    name = f"acme-in-{uuid.uuid4().hex[:10]}"
    client = s3_server.client()
    client.create_bucket(Bucket=name)
    client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    monkeypatch.setenv("AIRFLOW_CONN_ACME_S3", s3_server.connection_uri())
    return name


def _versions(s3_server: S3Server, bucket: str) -> list[dict[str, Any]]:
    return s3_server.client().list_object_versions(Bucket=bucket).get("Versions", [])


def test_s3_delivers_once_with_sha256_metadata(
    ledger_engine: sa.Engine, s3_server: S3Server, bucket: str, make_artifact: ArtifactFactory
) -> None:
    artifact = make_artifact(64 * 1024)
    destination = S3Destination(id="bucket", conn_id="acme_s3", bucket=bucket, prefix="in/daily/")
    first = run(ledger_engine, destination, artifact)
    second = run(ledger_engine, destination, artifact)
    assert (first.state, second.already_delivered) == ("acknowledged", True)
    key = f"in/daily/{artifact.name}"
    assert [v["Key"] for v in _versions(s3_server, bucket)] == [key]
    head = s3_server.client().head_object(Bucket=bucket, Key=key)
    assert head["Metadata"]["sha256"] == artifact.sha256
    assert head["ContentLength"] == artifact.bytes
    assert first.receipt == (f"etag={head['ETag'].strip(chr(34))} "
                             f"version_id={head['VersionId']}")
    assert first.target == f"s3://{bucket}/{key}"


def test_s3_object_stored_before_a_lost_response_is_not_uploaded_again(
    sqlite_engine: sa.Engine, s3_server: S3Server, bucket: str, make_artifact: ArtifactFactory
) -> None:
    artifact = make_artifact()
    key = artifact.name  # empty prefix
    s3_server.client().put_object(Bucket=bucket, Key=key, Body=artifact.local_path.read_bytes(),
                                  Metadata={"sha256": artifact.sha256})
    outcome = run(sqlite_engine, S3Destination(id="bucket", conn_id="acme_s3", bucket=bucket),
                  artifact)
    assert (outcome.state, outcome.already_present) == ("acknowledged", True)
    assert outcome.receipt is not None and outcome.receipt.startswith("present etag=")
    assert len(_versions(s3_server, bucket)) == 1


def test_s3_different_object_under_the_name_is_a_permanent_conflict(
    sqlite_engine: sa.Engine, s3_server: S3Server, bucket: str, make_artifact: ArtifactFactory
) -> None:
    artifact = make_artifact()
    s3_server.client().put_object(Bucket=bucket, Key=artifact.name, Body=b"other")
    with pytest.raises(DeliveryError, match=r"already exists with different content \(5 bytes, "
                       r"sha256 None"):
        run(sqlite_engine, S3Destination(id="bucket", conn_id="acme_s3", bucket=bucket),
            artifact)
    assert len(_versions(s3_server, bucket)) == 1


def test_s3_wrong_secret_fails_once_naming_the_connection(
    sqlite_engine: sa.Engine, s3_server: S3Server, bucket: str, make_artifact: ArtifactFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_ACME_S3", s3_server.connection_uri(secret="not-the-secret"))
    with pytest.raises(DeliveryError, match=r"failed permanently on attempt 1 \(not retried\): "
                       r"connection 'acme_s3' \(aws:// \(endpoint http://127\.0\.0\.1:\d+\)\) "
                       r"was refused") as info:
        run(sqlite_engine, S3Destination(id="bucket", conn_id="acme_s3", bucket=bucket),
            make_artifact())
    assert info.value.retryable is False and "not-the-secret" not in str(info.value)
    record = only_record(sqlite_engine)
    assert (record["state"], record["attempts"]) == ("exhausted", 1)
    assert _versions(s3_server, bucket) == []


def test_s3_missing_bucket_is_permanent(
    sqlite_engine: sa.Engine, bucket: str, make_artifact: ArtifactFactory
) -> None:
    destination = S3Destination(id="bucket", conn_id="acme_s3", bucket=f"{bucket}-gone")
    with pytest.raises(DeliveryError,
                       match=r"bucket .*-gone. does not exist \(connection .acme_s3.\)") as info:
        run(sqlite_engine, destination, make_artifact())
    assert info.value.retryable is False


def test_s3_unreachable_endpoint_is_retryable(
    sqlite_engine: sa.Engine, make_artifact: ArtifactFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.services.ports import free_port

    monkeypatch.setenv("AIRFLOW_CONN_ACME_S3", "aws://k:s@/?endpoint_url=http%3A%2F%2F127.0.0.1"
                       f"%3A{free_port()}&region_name=us-east-1")
    monkeypatch.setenv("EXPORT_OBJECT_STORE_MAX_ATTEMPTS", "2")  # one retry: a quick answer
    with pytest.raises(DeliveryError, match="attempt 1 failed, will retry until") as info:
        run(sqlite_engine, S3Destination(id="bucket", conn_id="acme_s3", bucket="acme-in"),
            make_artifact())
    assert info.value.retryable is True


@pytest.fixture()
def gcs_bucket(gcs_server: GcsServer, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"acme-in-{uuid.uuid4().hex[:10]}"
    gcs_server.client().create_bucket(name)
    monkeypatch.setenv("AIRFLOW_CONN_ACME_GCS", gcs_server.connection_uri())
    return name


def test_gcs_delivers_once_with_sha256_metadata(
    ledger_engine: sa.Engine, gcs_server: GcsServer, gcs_bucket: str, make_artifact: ArtifactFactory
) -> None:
    artifact = make_artifact(64 * 1024)
    destination = GcsDestination(id="gcs", conn_id="acme_gcs", bucket=gcs_bucket, prefix="in")
    first = run(ledger_engine, destination, artifact)
    blob = gcs_server.client().bucket(gcs_bucket).get_blob(f"in/{artifact.name}")
    second = run(ledger_engine, destination, artifact)
    assert (first.state, second.already_delivered) == ("acknowledged", True)
    assert blob.metadata["sha256"] == artifact.sha256 and blob.size == artifact.bytes
    assert first.receipt == f"generation={blob.generation} size={artifact.bytes}"
    names = [b.name for b in gcs_server.client().list_blobs(gcs_bucket)]
    assert names == [f"in/{artifact.name}"]
    again = gcs_server.client().bucket(gcs_bucket).get_blob(f"in/{artifact.name}")
    assert again.generation == blob.generation  # not uploaded again


def test_gcs_object_already_there_is_acknowledged_without_upload(
    sqlite_engine: sa.Engine, gcs_server: GcsServer, gcs_bucket: str,
    make_artifact: ArtifactFactory,
) -> None:
    artifact = make_artifact()
    blob = gcs_server.client().bucket(gcs_bucket).blob(artifact.name)
    blob.metadata = {"sha256": artifact.sha256}
    blob.upload_from_filename(str(artifact.local_path))
    outcome = run(sqlite_engine, GcsDestination(id="gcs", conn_id="acme_gcs", bucket=gcs_bucket),
                  artifact)
    assert (outcome.already_present, outcome.receipt) == (True,
                                                          f"present generation={blob.generation}")


def test_gcs_missing_bucket_is_permanent(
    sqlite_engine: sa.Engine, gcs_bucket: str, make_artifact: ArtifactFactory
) -> None:
    destination = GcsDestination(id="gcs", conn_id="acme_gcs", bucket=f"{gcs_bucket}-gone")
    with pytest.raises(DeliveryError, match="not found via connection 'acme_gcs'") as info:
        run(sqlite_engine, destination, make_artifact())
    assert info.value.retryable is False


def test_s3_large_artifact_goes_multipart_and_is_still_verified(
    sqlite_engine: sa.Engine, s3_server: S3Server, bucket: str, make_artifact: ArtifactFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from export_lib.delivery.transports import s3 as s3_transport

    # Our own threshold, lowered so a 6 MiB file takes the >5 GiB path (2 parts of 5 MiB+).
    monkeypatch.setattr(s3_transport, "SINGLE_PUT_LIMIT", 5 * 1024 * 1024)
    monkeypatch.setattr(s3_transport, "PART_SIZE", 5 * 1024 * 1024)
    artifact = make_artifact(6 * 1024 * 1024)
    destination = S3Destination(id="bucket", conn_id="acme_s3", bucket=bucket)
    first = run(sqlite_engine, destination, artifact)
    assert first.receipt is not None and "-2 multipart size=6291456" in first.receipt
    assert run(sqlite_engine, destination, artifact).already_delivered is True
    (version,) = _versions(s3_server, bucket)
    body = s3_server.client().get_object(Bucket=bucket, Key=artifact.name)
    assert body["Metadata"]["sha256"] == artifact.sha256
    assert body["Body"].read() == artifact.local_path.read_bytes()
