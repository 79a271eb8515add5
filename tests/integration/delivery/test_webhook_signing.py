"""Webhook notices: signed over timestamp + body (verified by the documented receiver example),
and linked to the artifact only through a time-limited pre-signed URL."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import sqlalchemy as sa

from export_lib.config.destinations import WebhookDestination
from export_lib.delivery import delivery_id
from export_lib.delivery.transports.webhook import sign
from tests.fixtures.delivery import ArtifactFactory
from tests.services.http import WebhookReceiver, receiver_example
from tests.services.s3 import S3Server
from tests.support.delivery import RUN_KEY, run

HOOK = WebhookDestination(id="notify", conn_id="acme_hook", endpoint="/exports",
                          timeout_seconds=2.0)
KEY = delivery_id(RUN_KEY, 1, "notify")


def test_signature_covers_the_timestamp_and_the_documented_example_verifies_it(
    sqlite_engine: sa.Engine, webhook: WebhookReceiver, make_artifact: ArtifactFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    webhook.state.signing_secret = "whsec_test"
    monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK",
                       webhook.connection_uri("hooks") + "?signing_secret=whsec_test")
    before = int(time.time())
    assert run(sqlite_engine, HOOK, make_artifact()).state == "acknowledged"
    (request,) = webhook.state.requests
    stamp, signature, body = request["timestamp"], request["signature"], request["body"]
    assert before <= int(stamp) <= time.time()
    assert signature == sign("whsec_test", int(stamp), body)
    verify = receiver_example().verify
    assert verify("whsec_test", stamp, signature, body) is True
    assert verify("whsec_other", stamp, signature, body) is False  # forged
    assert verify("whsec_test", stamp, signature, body + b" ") is False  # altered
    assert verify("whsec_test", str(int(stamp) - 1), signature, body) is False  # re-stamped
    assert verify("whsec_test", stamp, signature, body, now=int(stamp) + 301) is False  # replay
    assert verify("whsec_test", None, signature, body) is False


def test_unsigned_or_replayed_notice_is_refused_by_the_example_receiver(
    sqlite_engine: sa.Engine, webhook: WebhookReceiver, make_artifact: ArtifactFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from export_lib.errors import DeliveryError

    webhook.state.signing_secret = "whsec_test"
    monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK", webhook.connection_uri("hooks"))
    with pytest.raises(DeliveryError, match="HTTP 401"):
        run(sqlite_engine, HOOK, make_artifact())
    old = int(time.time()) - 3600
    body = b'{"name": "x"}'
    answer = httpx.post(webhook.connection_uri("hooks"), content=body, headers={
        "X-Export-Timestamp": str(old), "X-Export-Signature": sign("whsec_test", old, body),
        "Idempotency-Key": "replayed"})
    assert answer.status_code == 401 and "replayed" not in webhook.state.processed


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

    from export_lib.errors import DeliveryError
    from tests.services.http import RECEIVER_EXAMPLE
    from tests.services.ports import free_port, stop_process, wait_for_port

    port = free_port()
    server = subprocess.Popen([sys.executable, str(RECEIVER_EXAMPLE), str(port)],
                              env={"EXPORT_SIGNING_SECRET": "whsec_doc", "PATH": "/usr/bin"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, what="the receiver example")
        monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK", f"http://127.0.0.1:{port}/hooks")
        with pytest.raises(DeliveryError, match="answered HTTP 401"):  # unsigned: refused
            run(sqlite_engine, HOOK, make_artifact())
        monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK",
                           f"http://127.0.0.1:{port}/hooks?signing_secret=whsec_other")
        other = HOOK.model_copy(update={"id": "notify-other"})
        with pytest.raises(DeliveryError, match="answered HTTP 401"):  # wrong secret: refused
            run(sqlite_engine, other, make_artifact())
        monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK",
                           f"http://127.0.0.1:{port}/hooks?signing_secret=whsec_doc")
        signed = HOOK.model_copy(update={"id": "notify-signed"})
        outcome = run(sqlite_engine, signed, make_artifact())
        assert (outcome.state, outcome.receipt) == ("acknowledged", "HTTP 200")
    finally:
        stop_process(server)


def test_no_link_when_the_store_cannot_sign_never_the_bucket_uri(
    sqlite_engine: sa.Engine, webhook: WebhookReceiver, make_artifact: ArtifactFactory,
    gcs_server: object, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """The GCS emulator's anonymous credentials cannot sign: the notice goes without a link."""
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
