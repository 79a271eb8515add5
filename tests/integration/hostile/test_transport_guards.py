"""Transports that cannot be talked into weaker guarantees (issue 23), against the real servers:
e-mail needs TLS unless a relay is explicitly allowed plain text (logged each time), the S3
write is conditional (``If-None-Match: *`` on moto's server), and an SFTP connection that skips
host-key checking logs a warning on every use."""

from __future__ import annotations

import logging
import uuid
from urllib.parse import quote

import pytest
import sqlalchemy as sa

from export_lib.config.destinations import EmailDestination, S3Destination, SftpDestination
from export_lib.delivery.transports.base import DeliveryContext
from export_lib.delivery.transports.s3 import S3Transport
from export_lib.errors import DeliveryError
from tests.fixtures.delivery import ArtifactFactory
from tests.services.s3 import S3Server
from tests.services.sftp import SftpServer
from tests.services.smtp import PASSWORD, SmtpRelay
from tests.support.delivery import OWNER, PERIOD, RUN_KEY, only_record, run

MAIL = EmailDestination(id="mail", conn_id="acme_smtp", to=("ops@acme.example",))
AUTHORIZED = {OWNER, "ops@acme.example"}
CONN = "AIRFLOW_CONN_ACME_SMTP"


def mail(engine: sa.Engine, artifact: object) -> object:
    return run(engine, MAIL, artifact, authorized=AUTHORIZED)  # type: ignore[arg-type]


# -- e-mail: TLS or an explicit, logged plain-text relay ------------------------------------------
def test_a_relay_without_tls_is_refused_before_connecting(
        sqlite_engine: sa.Engine, smtp: SmtpRelay, make_artifact: ArtifactFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONN, smtp.connection_uri())  # no login, no TLS: clear text
    with pytest.raises(DeliveryError, match=(
            r"connection 'acme_smtp' \(smtp://127\.0\.0\.1:\d+\) would "
            r"send the export in clear text \(no TLS\); use smtps:// or add \?starttls=true, or, "
            r"for a relay on a trusted network only, \?allow_plaintext=true \(nothing was "
            r"sent\)$")) as info:
        mail(sqlite_engine, make_artifact())
    assert info.value.retryable is False
    assert smtp.handler.envelopes == [] and only_record(sqlite_engine)["state"] == "exhausted"


def test_the_airflow_form_with_ssl_and_tls_disabled_is_clear_text_too(
        sqlite_engine: sa.Engine, smtp: SmtpRelay, make_artifact: ArtifactFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONN, smtp.connection_uri(extra="&disable_ssl=true&disable_tls=true"))
    with pytest.raises(DeliveryError, match=r"would send the export in clear text"):
        mail(sqlite_engine, make_artifact())
    assert smtp.handler.envelopes == []


def test_starttls_asked_of_a_relay_that_does_not_offer_it_sends_nothing(
        sqlite_engine: sa.Engine, smtp: SmtpRelay, make_artifact: ArtifactFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The plain aiosmtpd relay has no STARTTLS: the client never falls back to clear text."""
    monkeypatch.setenv(CONN, smtp.connection_uri(extra="&starttls=true"))
    with pytest.raises(DeliveryError, match=r"failed permanently on attempt 1 \(not retried\): "
                       r"relay smtp://127\.0\.0\.1:\d+ \(connection 'acme_smtp'\) does not offer "
                       r"STARTTLS, so nothing was sent; use the relay's TLS port with smtps:// or "
                       r"a relay that offers STARTTLS") as info:
        mail(sqlite_engine, make_artifact())
    assert info.value.retryable is False and smtp.handler.envelopes == []


def test_an_explicit_plaintext_relay_delivers_and_warns_on_every_use(
        sqlite_engine: sa.Engine, smtp: SmtpRelay, make_artifact: ArtifactFactory,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(CONN, smtp.connection_uri(extra="&allow_plaintext=true"))
    caplog.set_level(logging.WARNING, logger="export_lib.delivery.transports.email")
    first = mail(sqlite_engine, make_artifact(seed="a"))
    second = run(sqlite_engine, MAIL, make_artifact(seed="b"), authorized=AUTHORIZED,
                 run_key=RUN_KEY + "-b")
    assert (first.state, second.state) == ("acknowledged", "acknowledged")
    assert len(smtp.messages) == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    # Each names the delivery's run first (export_lib/logfmt.py): the words of its fields.
    assert warnings[0].startswith(f"company=acme schedule=daily-spend run={RUN_KEY} "
                                  f"period={PERIOD}: connection 'acme_smtp' (smtp://127.0.0.1:")
    assert warnings[0].endswith("e-mail to mail goes out WITHOUT TLS because the connection "
                                "sets allow_plaintext; anyone on the path can read the export")


def test_a_login_is_never_sent_in_clear_even_with_plaintext_allowed(
        sqlite_engine: sa.Engine, smtp: SmtpRelay, make_artifact: ArtifactFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONN, smtp.connection_uri(password=PASSWORD, extra="&allow_plaintext=1"))
    with pytest.raises(DeliveryError, match=r"would send its SMTP login without TLS") as info:
        mail(sqlite_engine, make_artifact())
    assert PASSWORD not in str(info.value) and smtp.handler.envelopes == []


def test_starttls_with_login_is_the_normal_way(
        sqlite_engine: sa.Engine, smtp_tls_server: SmtpRelay, certificates: object,
        make_artifact: ArtifactFactory, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    smtp_tls_server.reset()
    ca = quote(str(certificates.ca_file), safe="")  # type: ignore[attr-defined]
    monkeypatch.setenv(CONN, smtp_tls_server.connection_uri(
        password=PASSWORD, extra=f"&starttls=true&ca_file={ca}"))
    caplog.set_level(logging.WARNING)
    assert mail(sqlite_engine, make_artifact()).state == "acknowledged"
    assert len(smtp_tls_server.messages) == 1
    assert "WITHOUT TLS" not in caplog.text


# -- S3: the write is conditional ---------------------------------------------------------------
@pytest.fixture()
def bucket(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"acme-cond-{uuid.uuid4().hex[:10]}"
    client = s3_server.client()
    client.create_bucket(Bucket=name)
    client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    monkeypatch.setenv("AIRFLOW_CONN_ACME_S3", s3_server.connection_uri())
    return name


def _ctx() -> DeliveryContext:
    return DeliveryContext(delivery_id="d-cond", run_key=RUN_KEY, period_label=PERIOD,
                           destination_id="bucket")


def test_moto_honours_the_precondition(s3_server: S3Server, bucket: str) -> None:
    """Guards the tests below: without it they would prove nothing."""
    from botocore.exceptions import ClientError

    client = s3_server.client()
    client.put_object(Bucket=bucket, Key="k", Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError, match="PreconditionFailed"):
        client.put_object(Bucket=bucket, Key="k", Body=b"2", IfNoneMatch="*")


def test_an_object_written_by_another_party_meanwhile_is_never_replaced(
        s3_server: S3Server, bucket: str, make_artifact: ArtifactFactory) -> None:
    artifact = make_artifact(seed="ours")
    destination = S3Destination(id="bucket", conn_id="acme_s3", bucket=bucket)
    client = s3_server.client()
    with S3Transport(destination) as transport:
        assert transport.find_existing(artifact, _ctx()) is None
        client.put_object(Bucket=bucket, Key=artifact.name, Body=b"theirs")  # the race
        with pytest.raises(DeliveryError, match=(
                rf"s3://{bucket}/{artifact.name} already exists with different content \(6 "
                r"bytes, sha256 None; expected \d+ bytes, sha256 [0-9a-f]{64}\); refusing to "
                "overwrite a delivered file")) as info:
            transport.send(artifact, _ctx())
    assert info.value.retryable is False
    versions = client.list_object_versions(Bucket=bucket)["Versions"]
    assert len(versions) == 1
    assert client.get_object(Bucket=bucket, Key=artifact.name)["Body"].read() == b"theirs"


def test_the_same_bytes_written_meanwhile_are_acknowledged_not_rewritten(
        s3_server: S3Server, bucket: str, make_artifact: ArtifactFactory) -> None:
    artifact = make_artifact(seed="same")
    destination = S3Destination(id="bucket", conn_id="acme_s3", bucket=bucket)
    client = s3_server.client()
    with S3Transport(destination) as transport:
        client.put_object(Bucket=bucket, Key=artifact.name,
                          Body=artifact.local_path.read_bytes(),
                          Metadata={"sha256": artifact.sha256})
        receipt = transport.send(artifact, _ctx())
    assert receipt.startswith("present etag=") and receipt.endswith("(written concurrently)")
    assert len(client.list_object_versions(Bucket=bucket)["Versions"]) == 1


# -- SFTP: skipping the host-key check is loud ----------------------------------------------------
def test_no_host_key_check_logs_a_warning_on_every_use(
        sqlite_engine: sa.Engine, sftp_server: SftpServer, make_artifact: ArtifactFactory,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    uri = sftp_server.connection_uri().split("?")[0] + "?no_host_key_check=true"
    monkeypatch.setenv("AIRFLOW_CONN_ACME_SFTP", uri)
    destination = SftpDestination(id="drop", conn_id="acme_sftp",
                                  path=f"/upload/{uuid.uuid4().hex[:8]}")
    caplog.set_level(logging.WARNING, logger="export_lib.delivery.transports.sftp")
    for seed in ("a", "b"):
        outcome = run(sqlite_engine, destination,
                      make_artifact(seed=seed, name=f"acme_daily-spend_{seed}_v1.csv"),
                      run_key=f"{RUN_KEY}-{seed}")
        assert outcome.state == "acknowledged"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"company=acme schedule=daily-spend run={RUN_KEY}-{seed} period={PERIOD}: "
        f"connection 'acme_sftp' (sftp://127.0.0.1:{sftp_server.port}): no_host_key_check is "
        "set, so the SFTP server's host key is NOT verified and anyone on the path can pose as "
        "it; pin it with extra.host_key" for seed in ("a", "b")]


def test_a_multipart_upload_is_conditional_too_and_leaves_no_parts(
        s3_server: S3Server, bucket: str, make_artifact: ArtifactFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Above the single-PUT limit (lowered here: our own constants) the upload is completed with
    If-None-Match: *; refused, it is aborted, so no billed parts stay behind."""
    from export_lib.delivery.transports import s3 as s3_transport

    monkeypatch.setattr(s3_transport, "SINGLE_PUT_LIMIT", 5 * 1024 * 1024)
    monkeypatch.setattr(s3_transport, "PART_SIZE", 5 * 1024 * 1024)
    artifact = make_artifact(6 * 1024 * 1024, seed="big")
    destination = S3Destination(id="bucket", conn_id="acme_s3", bucket=bucket)
    client = s3_server.client()
    with S3Transport(destination) as transport:
        client.put_object(Bucket=bucket, Key=artifact.name, Body=b"theirs")  # the race
        with pytest.raises(DeliveryError, match="already exists with different content"):
            transport.send(artifact, _ctx())
    assert client.get_object(Bucket=bucket, Key=artifact.name)["Body"].read() == b"theirs"
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert len(client.list_object_versions(Bucket=bucket)["Versions"]) == 1


@pytest.mark.parametrize(("extra", "message"), [
    (f"host_key=ssh-ed25519%20{'P' * 7}!planted-hk", r"extra\.host_key is not '<type> <base64 "
     r"key>' as in known_hosts \(30 characters, not shown; \w+\); copy the server's line"),
    ("host_key=planted-hk-only", r"extra\.host_key is not '<type> <base64 key>'"),
    ("private_key=-----BEGIN%20planted-pk", r"extra\.private_key is not an OpenSSH/PEM private "
                                            r"key \(ed25519, ecdsa, rsa\)"),
])
def test_an_unusable_sftp_key_extra_is_one_line_that_never_shows_it(
        sqlite_engine: sa.Engine, sftp_server: SftpServer, make_artifact: ArtifactFactory,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, extra: str,
        message: str) -> None:
    if "private_key" in extra:  # a valid pin, so the bad private key is what fails
        extra += "&" + sftp_server.connection_uri().split("?")[1]
    monkeypatch.setenv("AIRFLOW_CONN_ACME_SFTP",
                       f"sftp://u@127.0.0.1:{sftp_server.port}/?{extra}")
    destination = SftpDestination(id="drop", conn_id="acme_sftp", path="/upload/bad-keys")
    with pytest.raises(DeliveryError, match=message) as info:
        run(sqlite_engine, destination, make_artifact())
    assert info.value.retryable is False
    assert "planted" not in str(info.value) and "planted" not in caplog.text
    assert "unexpected" not in str(info.value) and "Traceback" not in caplog.text
