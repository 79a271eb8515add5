"""Webhook delivery against a real local HTTP receiver that honours Idempotency-Key."""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from datetime import timedelta
from urllib.parse import quote

import pytest
import sqlalchemy as sa

from export_lib.config.destinations import WebhookDestination
from export_lib.delivery import delivery_id
from export_lib.errors import DeliveryError
from tests.fixtures.delivery import ArtifactFactory
from tests.services.http import WebhookReceiver
from tests.services.tls import ServerCertificates
from tests.support.delivery import PERIOD, RUN_KEY, only_record, run

HOOK = WebhookDestination(id="notify", conn_id="acme_hook", endpoint="/exports",
                          timeout_seconds=0.4)
KEY = delivery_id(RUN_KEY, 1, "notify")


@pytest.fixture()
def hook(webhook: WebhookReceiver, monkeypatch: pytest.MonkeyPatch) -> WebhookReceiver:
    monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK", webhook.connection_uri("hooks"))
    return webhook


@pytest.fixture()
def tls_hook(https_webhook_server: WebhookReceiver, certificates: ServerCertificates,
             monkeypatch: pytest.MonkeyPatch) -> Callable[[str], WebhookReceiver]:
    """The HTTPS receiver (private CA trusted via ca_file); call with the URI's credential part
    (``"?token=t"``, ``"user:pw@"``) to set AIRFLOW_CONN_ACME_HOOK."""
    https_webhook_server.state.reset()

    def use(credentials: str = "") -> WebhookReceiver:
        userinfo, _, query = credentials.partition("?")
        ca = f"ca_file={quote(str(certificates.ca_file), safe='')}"
        monkeypatch.setenv(
            "AIRFLOW_CONN_ACME_HOOK",
            f"https://{userinfo}127.0.0.1:{https_webhook_server.port}/hooks?{ca}"
            + (f"&{query}" if query else ""))
        return https_webhook_server

    return use


def test_webhook_posts_the_delivery_once_with_its_idempotency_key(
    sqlite_engine: sa.Engine, hook: WebhookReceiver, make_artifact: ArtifactFactory
) -> None:
    artifact = make_artifact()
    first = run(sqlite_engine, HOOK, artifact)
    second = run(sqlite_engine, HOOK, artifact)
    assert (first.state, second.already_delivered) == ("acknowledged", True)
    assert [(r["path"], r["key"]) for r in hook.state.requests] == [("/hooks/exports", KEY)]
    body = hook.state.bodies[KEY]
    assert body == {
        "delivery_id": KEY, "run_key": RUN_KEY, "period": PERIOD, "destination_id": "notify",
        "name": artifact.name, "version": 1, "rows": artifact.rows, "bytes": artifact.bytes,
        "sha256": artifact.sha256, "format": "csv",
        "window_start": "2026-03-28T00:00:00+00:00", "window_end": "2026-03-29T00:00:00+00:00",
        "link": None, "link_expires_at": None,  # no artifact-store connection: no link at all
    }
    assert first.receipt == f"HTTP 200 x-request-id=req-{KEY[-8:]}-1"


def test_stored_then_stalled_past_the_timeout_is_processed_once(
    ledger_engine: sa.Engine, hook: WebhookReceiver, make_artifact: ArtifactFactory
) -> None:
    artifact = make_artifact()
    hook.stall_next(1.2)  # stores the delivery, then answers after the client gave up
    with pytest.raises(DeliveryError, match="attempt 1 failed, will retry until.*timed out") as info:
        run(ledger_engine, HOOK, artifact)
    assert info.value.retryable is True
    outcome = run(ledger_engine, HOOK, artifact)
    assert outcome.state == "acknowledged" and outcome.attempts == 2
    assert hook.state.processed == {KEY: 1}
    assert [r["key"] for r in hook.state.requests] == [KEY, KEY]
    record = only_record(ledger_engine)
    assert record["receipt"] == f"HTTP 200 x-request-id=req-{KEY[-8:]}-2"  # the duplicate's
    receipts = [h["receipt"] for h in record["history"] if h["receipt"]]
    assert receipts == [record["receipt"]]
    assert [h["outcome"] for h in record["history"]] == ["retryable_failure", "delivered"]


@pytest.mark.parametrize("status", [503, 429, 408])
def test_retryable_statuses_are_retried_until_accepted(
    sqlite_engine: sa.Engine, hook: WebhookReceiver, make_artifact: ArtifactFactory, status: int
) -> None:
    artifact = make_artifact()
    hook.fail_next(2, status)
    for attempt in (1, 2):
        with pytest.raises(DeliveryError, match=f"attempt {attempt} failed, will retry until.*HTTP {status}"):
            run(sqlite_engine, HOOK, artifact)
    assert run(sqlite_engine, HOOK, artifact).attempts == 3
    assert hook.state.processed == {KEY: 1}


def test_429_error_mentions_retry_after(
    sqlite_engine: sa.Engine, hook: WebhookReceiver, make_artifact: ArtifactFactory
) -> None:
    hook.fail_next(1, 429)
    with pytest.raises(DeliveryError, match=r"HTTP 429 \(Retry-After: 1\)"):
        run(sqlite_engine, HOOK, make_artifact())


def test_a_closed_window_leaves_exhausted_with_the_last_error(
    ledger_engine: sa.Engine, hook: WebhookReceiver, make_artifact: ArtifactFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from tests.support.delivery import NOW, WINDOW_END

    artifact = make_artifact()
    hook.fail_next(10, 503)
    for minutes in (0, 10):  # inside the window: retryable, with the window's end attached
        with pytest.raises(DeliveryError, match="will retry until 2026-04-03T06:00:00Z") as info:
            run(ledger_engine, HOOK, artifact, now=NOW + timedelta(minutes=minutes))
        assert (info.value.retryable, info.value.retry_until) == (True, WINDOW_END)
    with caplog.at_level(logging.ERROR, logger="export_lib.delivery.engine"), \
            pytest.raises(DeliveryError, match="exhausted: its retry window closed at "
                          "2026-04-03T06:00:00Z.*HTTP 503") as info:
        run(ledger_engine, HOOK, artifact, now=WINDOW_END)
    assert (info.value.retryable, info.value.retry_until) == (False, None)
    record = only_record(ledger_engine)
    assert (record["state"], record["attempts"]) == ("exhausted", 3)
    assert "answered HTTP 503" in record["last_error"]
    assert [h["outcome"] for h in record["history"]] == ["retryable_failure"] * 3
    assert any("retry window closed" in r.getMessage() and "company=acme" in r.getMessage()
               for r in caplog.records)
    with pytest.raises(DeliveryError, match="is exhausted after 3 attempt"):
        run(ledger_engine, HOOK, artifact, now=WINDOW_END + timedelta(hours=1))
    assert len(hook.state.requests) == 3  # no retry storm after exhaustion


def test_client_error_is_permanent(
    sqlite_engine: sa.Engine, hook: WebhookReceiver, make_artifact: ArtifactFactory
) -> None:
    hook.fail_next(1, 422)
    with pytest.raises(DeliveryError, match="failed permanently on attempt 1.*HTTP 422") as info:
        run(sqlite_engine, HOOK, make_artifact())
    assert info.value.retryable is False
    assert len(hook.state.requests) == 1


def test_wrong_credentials_are_permanent_and_name_the_connection_masked(
    sqlite_engine: sa.Engine, tls_hook: Callable[[str], WebhookReceiver],
    make_artifact: ArtifactFactory,
) -> None:
    receiver = tls_hook("svc:hunter2@")
    receiver.state.token = "right-token"
    with pytest.raises(DeliveryError, match=r"connection 'acme_hook' \(https://127\.0\.0\.1:"
                       r"\d+\) was refused: webhook answered HTTP 401") as info:
        run(sqlite_engine, HOOK, make_artifact())
    assert info.value.retryable is False and "hunter2" not in str(info.value)
    assert "svc" not in str(info.value) and "/hooks" not in str(info.value)
    assert only_record(sqlite_engine)["state"] == "exhausted"
    assert len(receiver.state.requests) == 1


def test_bearer_token_from_the_connection_is_sent(
    sqlite_engine: sa.Engine, tls_hook: Callable[[str], WebhookReceiver],
    make_artifact: ArtifactFactory,
) -> None:
    receiver = tls_hook("?token=right-token")
    receiver.state.token = "right-token"
    assert run(sqlite_engine, HOOK, make_artifact()).state == "acknowledged"
    assert receiver.state.requests[0]["authorization"] == "Bearer right-token"


@pytest.mark.parametrize("credentials", ["?token=t0ken-over-http", "svc:pw-over-http@"])
def test_credentials_over_plain_http_are_refused_before_sending(
    sqlite_engine: sa.Engine, webhook: WebhookReceiver, make_artifact: ArtifactFactory,
    monkeypatch: pytest.MonkeyPatch, credentials: str,
) -> None:
    userinfo, _, query = credentials.partition("?")
    monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK", f"http://{userinfo}127.0.0.1:{webhook.port}/hooks"
                       + (f"?{query}" if query else ""))
    with pytest.raises(DeliveryError, match=r"connection 'acme_hook' \(http://127\.0\.0\.1:\d+\) "
                       r"sends credentials over plain http; use an https:// URI") as info:
        run(sqlite_engine, HOOK, make_artifact())
    assert info.value.retryable is False and "over-http" not in str(info.value)
    assert webhook.state.requests == []


def test_unreachable_receiver_is_retryable(
    sqlite_engine: sa.Engine, make_artifact: ArtifactFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.services.ports import free_port

    monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK", f"http://127.0.0.1:{free_port()}/hooks")
    with pytest.raises(DeliveryError, match="ConnectError: .*Connection refused") as info:
        run(sqlite_engine, HOOK, make_artifact())
    assert info.value.retryable is True
    assert only_record(sqlite_engine)["state"] == "pending"


def test_concurrent_workers_send_once(
    ledger_engine: sa.Engine, hook: WebhookReceiver, make_artifact: ArtifactFactory
) -> None:
    import threading

    artifact = make_artifact()
    slow = HOOK.model_copy(update={"timeout_seconds": 5.0})
    hook.stall_next(0.5)  # keeps the winner's attempt open while the other worker arrives
    barrier = threading.Barrier(2)
    results: list[object] = []

    def worker() -> None:
        barrier.wait()
        try:
            results.append(run(ledger_engine, slow, artifact).state)
        except DeliveryError as exc:
            results.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    errors = [r for r in results if isinstance(r, DeliveryError)]
    assert "acknowledged" in results and len(errors) == 1
    assert errors[0].retryable is True
    assert len(hook.state.requests) == 1 and hook.state.processed == {KEY: 1}
    assert run(ledger_engine, slow, artifact).already_delivered is True


def test_requeued_exhausted_delivery_is_delivered_by_the_next_call(
    sqlite_engine: sa.Engine, hook: WebhookReceiver, make_artifact: ArtifactFactory
) -> None:
    from export_lib.delivery import requeue
    from tests.support.delivery import NOW

    artifact = make_artifact()
    hook.fail_next(2, 500)
    late = NOW + timedelta(days=6)  # the window closed a day ago
    with pytest.raises(DeliveryError, match="exhausted: its retry window closed"):
        run(sqlite_engine, HOOK, artifact, now=late)
    record = requeue(sqlite_engine, KEY, now=late)
    assert (record.state, record.retry_until) == ("pending", late + timedelta(days=5))
    with pytest.raises(DeliveryError, match="will retry until 2026-04-09T06:00:00Z"):
        run(sqlite_engine, HOOK, artifact, now=late)  # a fresh window from the requeue
    outcome = run(sqlite_engine, HOOK, artifact, now=late + timedelta(minutes=10))
    assert (outcome.state, outcome.attempts) == ("acknowledged", 3)
    history = only_record(sqlite_engine)["history"]
    assert [(h["attempt"], h["outcome"]) for h in history] == [
        (1, "retryable_failure"), (2, "retryable_failure"), (3, "delivered")]


def test_signed_body_is_verified_by_the_receiver(
    sqlite_engine: sa.Engine, webhook: WebhookReceiver, make_artifact: ArtifactFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = "whsec_" + base64.b64encode(b"a-test-key-of-twenty-four-bytes!").decode()
    webhook.state.signing_secret = secret
    monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK", webhook.connection_uri("hooks"))
    with pytest.raises(DeliveryError, match="HTTP 401"):  # unsigned: refused, permanent
        run(sqlite_engine, HOOK, make_artifact())
    signed = HOOK.model_copy(update={"id": "notify-signed"})
    monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK", webhook.connection_uri("hooks")
                       + f"?signing_secret={quote(secret, safe='')}")
    assert run(sqlite_engine, signed, make_artifact()).state == "acknowledged"


def test_https_receiver_with_a_private_ca_and_untrusted_certificate(
    sqlite_engine: sa.Engine, https_webhook_server: WebhookReceiver,
    certificates: ServerCertificates, make_artifact: ArtifactFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    https_webhook_server.state.reset()
    uri = https_webhook_server.connection_uri("hooks")
    monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK", uri)
    with pytest.raises(DeliveryError, match="TLS certificate is not trusted") as info:
        run(sqlite_engine, HOOK, make_artifact())
    assert info.value.retryable is False and https_webhook_server.state.requests == []
    trusted = HOOK.model_copy(update={"id": "notify-tls"})
    monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK",
                       f"{uri}?ca_file={quote(str(certificates.ca_file), safe='')}")
    assert run(sqlite_engine, trusted, make_artifact()).state == "acknowledged"
    assert len(https_webhook_server.state.requests) == 1


class _TaskTimeout(BaseException):
    """Stands in for Airflow's AirflowTaskTimeout, which SIGALRM raises the same way."""


def test_task_timeout_mid_attempt_frees_the_record_for_the_next_try(
    sqlite_engine: sa.Engine, hook: WebhookReceiver, make_artifact: ArtifactFactory
) -> None:
    import gc
    import signal

    def expire(signum: int, frame: object) -> None:
        raise _TaskTimeout("Timeout, PID: 1")

    artifact = make_artifact()
    slow = HOOK.model_copy(update={"timeout_seconds": 5.0})
    hook.stall_next(1.0)
    previous = signal.signal(signal.SIGALRM, expire)
    # An exception raised by a signal handler while a weakref or GC callback runs is swallowed
    # as "unraisable" (make test-fast 3 Dec: the alarm fired inside WeakKeyDictionary.remove,
    # the delivery went on to succeed). Collected first and no GC during the attempt, the
    # alarm lands in the delivery's own code.
    gc.collect()
    gc.disable()
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        with pytest.raises(_TaskTimeout):
            run(sqlite_engine, slow, artifact)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        gc.enable()
    record = only_record(sqlite_engine)
    assert (record["state"], record["attempts"]) == ("pending", 1)
    assert record["history"][0]["error"] == "interrupted: _TaskTimeout: Timeout, PID: 1"
    outcome = run(sqlite_engine, slow, artifact)  # no stale_after wait: the record is free
    assert (outcome.state, outcome.attempts) == ("acknowledged", 2)
    assert hook.state.processed == {KEY: 1}
