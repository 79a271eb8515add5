"""E-mail delivery through a real SMTP relay (aiosmtpd): attachment or link, Message-ID, auth."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest
import sqlalchemy as sa

from export_lib.config.destinations import EmailDestination
from export_lib.delivery import delivery_id
from export_lib.errors import DeliveryError
from tests.fixtures.delivery import ArtifactFactory
from tests.services.smtp import PASSWORD, SmtpRelay
from tests.services.tls import ServerCertificates
from tests.support import delivery as support
from tests.support.delivery import OWNER, RUN_KEY, only_record

MAIL = EmailDestination(id="mail", conn_id="acme_smtp", to=("ops@acme.example",
                                                            "finance@acme.example"))
MESSAGE_ID = f"<{delivery_id(RUN_KEY, 1, 'mail')}@example.com>"
AUTHORIZED = {OWNER, *MAIL.to}
PLAIN = "&allow_plaintext=true"


def run(engine: sa.Engine, destination: EmailDestination, artifact: object, **kw: object) -> Any:
    """Deliver with every recipient of MAIL authorised by the company (as config load demands)."""
    kw.setdefault("authorized", AUTHORIZED)
    return support.run(engine, destination, artifact, **kw)  # type: ignore[arg-type]


@pytest.fixture()
def tls_relay(smtp_tls_server: SmtpRelay, certificates: ServerCertificates,
              monkeypatch: pytest.MonkeyPatch) -> Callable[[str], SmtpRelay]:
    """The STARTTLS relay (private CA trusted), with the given password for the login."""
    smtp_tls_server.reset()

    def use(password: str) -> SmtpRelay:
        ca = quote(str(certificates.ca_file), safe="")
        monkeypatch.setenv("AIRFLOW_CONN_ACME_SMTP", smtp_tls_server.connection_uri(
            password=password, extra=f"&starttls=true&ca_file={ca}"))
        return smtp_tls_server

    return use


@pytest.fixture()
def relay(smtp: SmtpRelay, monkeypatch: pytest.MonkeyPatch) -> SmtpRelay:
    """The plain relay, explicitly allowed without TLS (tests/integration/hostile/test_smtp_tls.py
    covers the refusal)."""
    monkeypatch.setenv("AIRFLOW_CONN_ACME_SMTP", smtp.connection_uri(extra=PLAIN))
    return smtp


def test_email_is_sent_once_with_the_attachment_and_a_stable_message_id(
    ledger_engine: sa.Engine, relay: SmtpRelay, make_artifact: ArtifactFactory
) -> None:
    artifact = make_artifact()
    first = run(ledger_engine, MAIL, artifact)
    second = run(ledger_engine, MAIL, artifact)
    assert second.already_delivered is True
    (message,) = relay.messages
    assert relay.handler.envelopes == [("exports@example.com",
                                        ["ops@acme.example", "finance@acme.example"])]
    assert message["Message-ID"] == MESSAGE_ID
    assert message["Subject"] == f"{artifact.name} (2026-03-28)"
    assert first.receipt == f"smtp 250 queue_id=Q{first.receipt.split('=Q')[1].split()[0]} " \
                            f"message_id={MESSAGE_ID}"
    parts = list(message.walk())
    (attachment,) = [p for p in parts if p.get_filename()]
    assert attachment.get_filename() == artifact.name
    assert attachment.get_payload(decode=True) == artifact.local_path.read_bytes()
    body = message.get_body(("plain",)) if hasattr(message, "get_body") else parts[1]
    assert "The file is attached." in str(body)


def test_too_large_artifact_is_linked_and_the_body_says_why(
    sqlite_engine: sa.Engine, relay: SmtpRelay, make_artifact: ArtifactFactory
) -> None:
    artifact = make_artifact(5000)
    small = MAIL.model_copy(update={"max_attachment_bytes": 1000})
    run(sqlite_engine, small, artifact)
    (message,) = relay.messages
    assert not [p for p in message.walk() if p.get_filename()]
    text = message.get_payload(decode=True).decode()
    assert ("The file is too large to attach (5000 bytes; the limit for this destination is "
            "1000 bytes), so it is not attached. No download link can be made for this export's "
            "store; ask the export's owner for the file.") in text.replace("\n", " ").replace(
                "  ", " ")
    assert artifact.uri not in text and "s3://" not in text  # never the internal location


def test_relay_login_with_the_connection_credentials(
    sqlite_engine: sa.Engine, tls_relay: Callable[[str], SmtpRelay],
    make_artifact: ArtifactFactory,
) -> None:
    relay = tls_relay(PASSWORD)
    assert run(sqlite_engine, MAIL, make_artifact()).state == "acknowledged"
    assert len(relay.messages) == 1


def test_login_without_tls_is_refused_before_connecting(
    sqlite_engine: sa.Engine, smtp: SmtpRelay, make_artifact: ArtifactFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_ACME_SMTP", smtp.connection_uri(password=PASSWORD))
    with pytest.raises(DeliveryError, match=r"connection 'acme_smtp' \(smtp://127\.0\.0\.1:\d+\)"
                       r" would send its SMTP login without TLS; use smtps:// or add "
                       r"\?starttls=true") as info:
        run(sqlite_engine, MAIL, make_artifact())
    assert info.value.retryable is False and PASSWORD not in str(info.value)
    assert smtp.messages == [] and smtp.handler.envelopes == []


def test_recipient_not_authorised_by_the_company_is_refused_at_delivery(
    sqlite_engine: sa.Engine, relay: SmtpRelay, make_artifact: ArtifactFactory,
) -> None:
    from export_lib.errors import AuthorizationError

    with pytest.raises(AuthorizationError, match=r"e-mail recipient\(s\) finance@acme\.example are "
                       r"neither the company's owner nor in its 'authorized' list"):
        run(sqlite_engine, MAIL, make_artifact(), authorized={OWNER, "ops@acme.example"})
    assert relay.messages == [] and only_record(sqlite_engine)["state"] == "refused"


def test_wrong_relay_password_is_permanent_and_masked(
    sqlite_engine: sa.Engine, tls_relay: Callable[[str], SmtpRelay],
    make_artifact: ArtifactFactory,
) -> None:
    relay = tls_relay("nope-nope")
    with pytest.raises(DeliveryError, match=r"connection 'acme_smtp' \(smtp://"
                       r"127\.0\.0\.1:\d+\) was refused: SMTP login failed \(535\)") as info:
        run(sqlite_engine, MAIL, make_artifact())
    assert info.value.retryable is False and "nope-nope" not in str(info.value)
    assert only_record(sqlite_engine)["attempts"] == 1
    assert relay.messages == []


def test_connection_without_sender_is_a_permanent_config_error(
    sqlite_engine: sa.Engine, smtp: SmtpRelay, make_artifact: ArtifactFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_ACME_SMTP", f"smtp://127.0.0.1:{smtp.port}")
    with pytest.raises(DeliveryError, match=r"has no sender: add \?from="):
        run(sqlite_engine, MAIL, make_artifact())


def test_unreachable_relay_is_retryable(
    sqlite_engine: sa.Engine, make_artifact: ArtifactFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.services.ports import free_port

    monkeypatch.setenv("AIRFLOW_CONN_ACME_SMTP",
                       f"smtp://127.0.0.1:{free_port()}/?from=exports%40example.com{PLAIN}")
    with pytest.raises(DeliveryError, match="will retry.*ConnectionRefusedError") as info:
        run(sqlite_engine, MAIL, make_artifact())
    assert info.value.retryable is True


def test_starttls_relay_with_a_private_ca(
    sqlite_engine: sa.Engine, smtp_tls_server: SmtpRelay, certificates: ServerCertificates,
    make_artifact: ArtifactFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    smtp_tls_server.reset()
    ca = quote(str(certificates.ca_file), safe="")
    monkeypatch.setenv("AIRFLOW_CONN_ACME_SMTP", smtp_tls_server.connection_uri(
        password=PASSWORD, extra=f"&starttls=true&ca_file={ca}"))
    assert run(sqlite_engine, MAIL, make_artifact()).state == "acknowledged"
    assert len(smtp_tls_server.messages) == 1


def test_untrusted_relay_certificate_is_permanent(
    sqlite_engine: sa.Engine, smtp_tls_server: SmtpRelay, make_artifact: ArtifactFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    smtp_tls_server.reset()
    monkeypatch.setenv("AIRFLOW_CONN_ACME_SMTP",
                       smtp_tls_server.connection_uri(extra="&starttls=true"))
    with pytest.raises(DeliveryError, match="TLS certificate is not trusted .*set extra.ca_file"
                       ) as info:
        run(sqlite_engine, MAIL, make_artifact())
    assert info.value.retryable is False
    assert smtp_tls_server.messages == []


def test_relay_requiring_starttls_refuses_plain_mail_permanently(
    sqlite_engine: sa.Engine, smtp_tls_server: SmtpRelay, make_artifact: ArtifactFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_ACME_SMTP", smtp_tls_server.connection_uri(extra=PLAIN))
    with pytest.raises(DeliveryError, match="answered 530") as info:
        run(sqlite_engine, MAIL, make_artifact())
    assert info.value.retryable is False


def test_too_large_artifact_in_s3_is_linked_with_a_presigned_url(
    sqlite_engine: sa.Engine, relay: SmtpRelay, make_artifact: ArtifactFactory,
    s3_server: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    artifact = make_artifact(5000)
    monkeypatch.setenv("AIRFLOW_CONN_EXPORT_ARTIFACTS", s3_server.connection_uri())
    monkeypatch.setenv("EXPORT_ARTIFACT_CONN", "export_artifacts")
    run(sqlite_engine, MAIL.model_copy(update={"max_attachment_bytes": 1000}), artifact)
    (message,) = relay.messages
    assert not [p for p in message.walk() if p.get_filename()]
    text = " ".join(message.get_payload(decode=True).decode().split())
    assert "so it is not attached. Download it until " in text
    link = text.split(" UTC from: ", 1)[1].split()[0]
    assert link.startswith(f"{s3_server.endpoint}/exports-internal/acme/daily-spend/"
                           f"{artifact.name}?") and "X-Amz-Signature=" in link
    assert "s3://" not in text and s3_server.secret_key not in text
