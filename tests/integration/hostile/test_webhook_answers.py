"""Hostile webhook answers (issue 12's corpus): redirects to other hosts, huge or secret-echoing
bodies, slow answers. Each is one clear, permanent or retryable error; nothing is followed,
acknowledged, stored or sent elsewhere. Real HTTP(S) servers from tests/services."""

from __future__ import annotations

import base64
import socket
import threading
import time
from collections.abc import Callable, Iterator
from urllib.parse import quote

import pytest
import sqlalchemy as sa

from export_lib.config.destinations import WebhookDestination
from export_lib.errors import DeliveryError
from tests.fixtures.delivery import ArtifactFactory
from tests.services.http import WebhookReceiver, start_receiver, stop_receiver
from tests.services.tls import ServerCertificates
from tests.support.delivery import only_record, run

HOOK = WebhookDestination(id="notify", conn_id="acme_hook", endpoint="/exports",
                          timeout_seconds=1.0)
TOKEN = "tok-9f3c1e77-never-elsewhere"
SIGNING = "whsec_" + base64.b64encode(b"5b2d-never-elsewhere-5b2d-never-elsewhere").decode()


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[WebhookReceiver]:
    """A receiver on another host (127.0.0.2): where a hostile redirect points."""
    receiver = start_receiver(host="127.0.0.2")
    try:
        yield receiver
    finally:
        stop_receiver(receiver)


@pytest.fixture()
def origin(https_webhook_server: WebhookReceiver, certificates: ServerCertificates,  # noqa: F811
           elsewhere: WebhookReceiver, monkeypatch: pytest.MonkeyPatch) -> WebhookReceiver:
    """The configured HTTPS receiver, called with a token and a signing secret."""
    https_webhook_server.state.reset()
    elsewhere.state.reset()
    ca = quote(str(certificates.ca_file), safe="")
    monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK",
                       f"https://127.0.0.1:{https_webhook_server.port}/hooks/s3cr3t-path-part"
                       f"?ca_file={ca}&token={TOKEN}&signing_secret={quote(SIGNING, safe='')}")
    return https_webhook_server


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirect_to_another_host_is_not_followed_acknowledged_or_sent_credentials(
    sqlite_engine: sa.Engine, origin: WebhookReceiver, elsewhere: WebhookReceiver,  # noqa: F811
    make_artifact: ArtifactFactory, status: int,  # noqa: F811
) -> None:
    origin.redirect_next(f"http://127.0.0.2:{elsewhere.port}/steal?x=1", status)
    with pytest.raises(DeliveryError, match=(
            rf"failed permanently on attempt 1.*answered HTTP {status}.*a redirect to "
            rf"http://127\.0\.0\.2:{elsewhere.port}; redirects are not followed")) as info:
        run(sqlite_engine, HOOK, make_artifact())
    assert info.value.retryable is False
    assert elsewhere.state.requests == []  # not followed: nothing, let alone a credential
    assert len(origin.state.requests) == 1 and origin.state.processed == {}
    record = only_record(sqlite_engine)
    assert (record["state"], record["receipt"], record["acknowledged_at"]) == (
        "exhausted", None, None)
    stored = str(record)
    for secret in (TOKEN, SIGNING, "s3cr3t-path-part", "/steal"):
        assert secret not in stored and secret not in str(info.value)


def test_answer_echoing_a_secret_is_not_kept_in_the_receipt(
    sqlite_engine: sa.Engine, origin: WebhookReceiver, make_artifact: ArtifactFactory,  # noqa: F811
) -> None:
    origin.state.echo_secret = "echoed-" + TOKEN
    outcome = run(sqlite_engine, HOOK, make_artifact())
    assert outcome.state == "acknowledged"
    assert outcome.receipt is not None and outcome.receipt.startswith("HTTP 200 x-request-id=")
    assert TOKEN not in str(only_record(sqlite_engine))
    origin.state.echo_secret = None


def _serve_once(answer: Callable[[socket.socket], None]) -> tuple[int, threading.Thread]:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with conn, listener:
            conn.recv(65536)
            try:
                answer(conn)
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return port, thread


def test_endless_answer_body_is_read_only_up_to_the_bound(
    sqlite_engine: sa.Engine, make_artifact: ArtifactFactory,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent = [0]

    def endless(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000000\r\nX-Request-Id: big\r\n\r\n")
        chunk = b"x" * 65536
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            sent[0] += conn.send(chunk)

    port, thread = _serve_once(endless)
    monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK", f"http://127.0.0.1:{port}/hooks")
    started = time.monotonic()
    outcome = run(sqlite_engine, HOOK, make_artifact())
    assert (outcome.state, outcome.receipt) == ("acknowledged", "HTTP 200 x-request-id=big")
    assert time.monotonic() - started < 3
    thread.join(6)
    assert sent[0] < 10_000_000  # the client hung up long before 10 GB


def test_answer_that_never_comes_times_out_as_retryable(
    sqlite_engine: sa.Engine, make_artifact: ArtifactFactory,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port, thread = _serve_once(lambda conn: time.sleep(3))
    monkeypatch.setenv("AIRFLOW_CONN_ACME_HOOK", f"http://127.0.0.1:{port}/hooks")
    started = time.monotonic()
    with pytest.raises(DeliveryError, match=r"ReadTimeout") as info:
        run(sqlite_engine, HOOK, make_artifact())
    assert info.value.retryable is True and time.monotonic() - started < 2.5
    assert only_record(sqlite_engine)["state"] == "pending"
