"""Webhook notices: signed per Standard Webhooks (verified with the reference
``standardwebhooks`` library and by the documented receiver example), and linked to the
artifact only through a time-limited pre-signed URL."""

from __future__ import annotations

import base64
import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import httpx
import pytest
import sqlalchemy as sa
from standardwebhooks import Webhook, WebhookVerificationError

from export_lib.config.destinations import WebhookDestination
from export_lib.delivery import delivery_id
from export_lib.delivery.transports.webhook import sign, signing_key
from export_lib.errors import DeliveryError
from tests.fixtures.delivery import ArtifactFactory
from tests.services.http import WebhookReceiver
from tests.services.s3 import S3Server
from tests.support.delivery import RUN_KEY, run

HOOK = WebhookDestination(id="notify", conn_id="acme_hook", endpoint="/exports",
                          timeout_seconds=2.0)
KEY = delivery_id(RUN_KEY, 1, "notify")
SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
OTHER_SECRET = "whsec_" + base64.b64encode(bytes(range(100, 132))).decode()


def _signed_uri(receiver_uri: str, secret: str = SECRET) -> str:
    return f"{receiver_uri}?signing_secret={quote(secret, safe='')}"


def test_the_standard_webhooks_library_accepts_our_delivery_and_rejects_a_tampered_one(
    sqlite_engine: sa.Engine, webhook: WebhookReceiver, make_artifact: ArtifactFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A real HTTP server receives the delivery; the reference library verifies what arrived.
    A retry of the delivery carries the same webhook-id (receivers dedupe on it)."""
    monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK", _signed_uri(webhook.connection_uri("hooks")))
    webhook.fail_next(1, 503)
    before = int(time.time())
    with pytest.raises(DeliveryError, match="HTTP 503"):
        run(sqlite_engine, HOOK, make_artifact())
    assert run(sqlite_engine, HOOK, make_artifact()).state == "acknowledged"
    first, second = webhook.state.requests
    assert first["webhook_id"] == second["webhook_id"] == KEY == second["key"]
    headers, body = second["headers"], second["body"]
    assert before <= int(headers["webhook-timestamp"]) <= time.time()
    assert headers["webhook-signature"].startswith("v1,")

    notice = Webhook(SECRET).verify(body, headers)
    assert notice["delivery_id"] == KEY and notice == json.loads(body)
    tampered = body.replace(b'"rows": ', b'"rows": 1')
    assert tampered != body
    with pytest.raises(WebhookVerificationError, match="No matching signature found"):
        Webhook(SECRET).verify(tampered, headers)
    with pytest.raises(WebhookVerificationError, match="No matching signature found"):
        Webhook(OTHER_SECRET).verify(body, headers)  # forged: another secret
    with pytest.raises(WebhookVerificationError, match="No matching signature found"):
        Webhook(SECRET).verify(body, {**headers, "webhook-id": "dlv-another"})  # id swapped
    stale = {**headers, "webhook-timestamp": str(int(headers["webhook-timestamp"]) - 600)}
    with pytest.raises(WebhookVerificationError, match="Message timestamp too old"):
        Webhook(SECRET).verify(body, stale)  # a replay of an old notice


def test_our_signature_is_the_libraries_for_the_same_id_timestamp_and_body() -> None:
    stamp = int(time.time())
    body = b'{"name": "x"}'
    ours = sign(signing_key(SECRET), "dlv-1", stamp, body)
    theirs = Webhook(SECRET).sign("dlv-1", datetime.fromtimestamp(stamp, UTC), body.decode())
    assert ours == theirs


@pytest.mark.parametrize(("secret", "why"), [
    ("whsec_test", "its key is 3 bytes, not 24 to 64"),
    ("sig-Sekret-7a8b9c", "it is not whsec_ followed by base64"),
    ("whsec_" + base64.b64encode(bytes(65)).decode(), "its key is 65 bytes, not 24 to 64"),
], ids=["too-short", "not-base64", "too-long"])
def test_a_secret_that_is_not_a_standard_webhooks_secret_is_refused_before_sending(
    sqlite_engine: sa.Engine, webhook: WebhookReceiver, make_artifact: ArtifactFactory,
    monkeypatch: pytest.MonkeyPatch, secret: str, why: str,
) -> None:
    # Not ".../hooks": messages mask the connection's path wherever it appears (in "Webhooks").
    monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK",
                       _signed_uri(webhook.connection_uri("notices"), secret))
    with pytest.raises(DeliveryError) as info:
        run(sqlite_engine, HOOK, make_artifact())
    message = str(info.value)
    assert (f"connection 'acme_hook': extra.signing_secret is not a Standard Webhooks secret "
            f"({why}; the value is not shown); set it to 'whsec_' + the base64 of 24 to 64 random "
            "bytes") in message
    assert info.value.retryable is False and secret not in message
    assert webhook.state.requests == []


def test_unsigned_or_replayed_notice_is_refused_by_a_verifying_receiver(
    sqlite_engine: sa.Engine, webhook: WebhookReceiver, make_artifact: ArtifactFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    webhook.state.signing_secret = SECRET
    monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK", webhook.connection_uri("hooks"))
    with pytest.raises(DeliveryError, match="HTTP 401"):
        run(sqlite_engine, HOOK, make_artifact())
    old = int(time.time()) - 3600
    body = b'{"name": "x"}'
    answer = httpx.post(webhook.connection_uri("hooks"), content=body, headers={
        "webhook-id": "replayed", "webhook-timestamp": str(old),
        "webhook-signature": sign(signing_key(SECRET), "replayed", old, body),
        "Idempotency-Key": "replayed"})
    assert answer.status_code == 401 and "replayed" not in webhook.state.processed
    signed = HOOK.model_copy(update={"id": "notify-signed"})
    monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK", _signed_uri(webhook.connection_uri("hooks")))
    assert run(sqlite_engine, signed, make_artifact()).state == "acknowledged"


def test_link_is_a_presigned_url_that_expires_never_the_internal_uri(
    sqlite_engine: sa.Engine, webhook: WebhookReceiver, make_artifact: ArtifactFactory,
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket = f"exports-{uuid.uuid4().hex[:8]}"
    artifact = make_artifact()
    artifact = type(artifact)(**{**artifact.__dict__,
                                 "uri": f"s3://{bucket}/acme/daily-spend/{artifact.name}"})
    client = s3_server.client()
    client.create_bucket(Bucket=bucket)
    client.put_object(Bucket=bucket, Key=f"acme/daily-spend/{artifact.name}",
                      Body=artifact.local_path.read_bytes())
    monkeypatch.setenv("AIRFLOW_CONN_EXPORT_ARTIFACTS", s3_server.connection_uri())
    monkeypatch.setenv("EXPORT_ARTIFACT_CONN", "export_artifacts")
    monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK", webhook.connection_uri("hooks"))
    assert run(sqlite_engine, HOOK, artifact).state == "acknowledged"
    body = webhook.state.bodies[KEY]
    link = body["link"]
    assert link.startswith(f"{s3_server.endpoint}/{bucket}/acme/daily-spend/{artifact.name}?")
    assert "X-Amz-Expires=86400" in link and "X-Amz-Signature=" in link
    assert s3_server.secret_key not in link and "s3://" not in str(body)
    expires = datetime.fromisoformat(body["link_expires_at"])
    assert abs((expires - datetime.now(UTC)) - timedelta(hours=24)) < timedelta(minutes=1)
    # Not fetched here: moto's server with IAM auth switched on answers 500 to any pre-signed
    # (query-string) request, so only the URL's shape and expiry are checked.


def test_the_documented_receiver_example_runs_and_accepts_only_signed_notices(
    sqlite_engine: sa.Engine, make_artifact: ArtifactFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``python docs/examples/webhook_receiver.py PORT``, as the docs say, behind a real delivery."""
    import subprocess
    import sys

    from tests.services.http import RECEIVER_EXAMPLE
    from tests.services.ports import free_port, stop_process, wait_for_port

    port = free_port()
    server = subprocess.Popen([sys.executable, str(RECEIVER_EXAMPLE), str(port)],
                              env={"EXPORT_SIGNING_SECRET": SECRET, "PATH": "/usr/bin"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, what="the receiver example")
        monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK", f"http://127.0.0.1:{port}/hooks")
        with pytest.raises(DeliveryError, match="answered HTTP 401"):  # unsigned: refused
            run(sqlite_engine, HOOK, make_artifact())
        monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK",
                           _signed_uri(f"http://127.0.0.1:{port}/hooks", OTHER_SECRET))
        other = HOOK.model_copy(update={"id": "notify-other"})
        with pytest.raises(DeliveryError, match="answered HTTP 401"):  # wrong secret: refused
            run(sqlite_engine, other, make_artifact())
        monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK", _signed_uri(f"http://127.0.0.1:{port}/hooks"))
        signed = HOOK.model_copy(update={"id": "notify-signed"})
        outcome = run(sqlite_engine, signed, make_artifact())
        assert (outcome.state, outcome.receipt) == ("acknowledged", "HTTP 200")
    finally:
        stop_process(server)


def test_no_link_when_the_store_cannot_sign_never_the_bucket_uri(
    sqlite_engine: sa.Engine, webhook: WebhookReceiver, make_artifact: ArtifactFactory,
    gcs_server: object, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """The GCS testbench's anonymous credentials cannot sign: the notice goes without a link."""
    artifact = make_artifact()
    artifact = type(artifact)(**{**artifact.__dict__, "uri": f"gs://exports-int/{artifact.name}"})
    monkeypatch.setenv("AIRFLOW_CONN_EXPORT_ARTIFACTS", gcs_server.connection_uri())  # type: ignore[attr-defined]
    monkeypatch.setenv("EXPORT_ARTIFACT_CONN", "export_artifacts")
    monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK", webhook.connection_uri("hooks"))
    with caplog.at_level("WARNING", logger="export_lib.delivery.links"):
        assert run(sqlite_engine, HOOK, artifact).state == "acknowledged"
    body = webhook.state.bodies[KEY]
    assert (body["link"], body["link_expires_at"]) == (None, None)
    assert "gs://" not in json.dumps(body)
    assert "no pre-signed link for gs://exports-int" in caplog.text
