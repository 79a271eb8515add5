"""A real local HTTP server acting as a customer's webhook receiver.

It behaves like a well-built receiver: it records each ``Idempotency-Key`` *before* processing
and answers a repeated key with the stored result instead of processing again. Tests can script
misbehaviour for the next requests:

* ``fail_next(n, status)`` — answer ``status`` (503, 429, 400 …) ``n`` times without storing;
* ``fail_runs(run_keys, status)`` — answer ``status`` to the first delivery of each of these runs
  (the body's ``run_key``), whenever it comes: a receiver down for those periods of a batch,
  whatever else is delivered meanwhile;
* ``stall_next(seconds)`` — store and process the delivery, then stall past the client timeout
  before answering (the "stored, but the response was lost" case);
* ``token`` — require ``Authorization: Bearer <token>`` (401 otherwise);
* ``signing_secret`` — require a valid, fresh Standard Webhooks signature (``webhook-id``,
  ``webhook-timestamp``, ``webhook-signature``), verified by the reference ``standardwebhooks``
  library as the documented receiver example (``docs/examples/webhook_receiver.py``) does;
* ``redirect_next(location, status)`` — answer the next POST with a redirect;
* ``echo_secret`` — put this text in every answer's body (receipts must not keep bodies).

Every request is logged, GETs included (a client following a redirect would GET).

``processed`` counts deliveries processed per key; ``requests`` logs every request received.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RECEIVER_EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "webhook_receiver.py"


def _verified(secret: str, body: bytes, headers: Any) -> bool:
    from standardwebhooks import Webhook, WebhookVerificationError

    try:
        Webhook(secret).verify(body, dict(headers.items()), json_parse=False)
    except WebhookVerificationError:
        return False
    return True


@dataclass
class ReceiverState:
    token: str | None = None
    signing_secret: str | None = None
    processed: dict[str, int] = field(default_factory=dict)
    bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    failures: list[int] = field(default_factory=list)
    failing_runs: dict[str, int] = field(default_factory=dict)  # run_key -> status, once
    stalls: list[float] = field(default_factory=list)
    redirects: list[tuple[int, str]] = field(default_factory=list)
    echo_secret: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        with self.lock:
            self.token = None
            self.signing_secret = None
            self.processed.clear()
            self.bodies.clear()
            self.requests.clear()
            self.failures.clear()
            self.failing_runs.clear()
            self.stalls.clear()
            self.redirects.clear()
            self.echo_secret = None


class _Handler(BaseHTTPRequestHandler):
    state: ReceiverState  # set on the subclass made per server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet test output
        pass

    def _record(self, body: bytes) -> str:
        key = self.headers.get("Idempotency-Key") or ""
        self.state.requests.append({
            "method": self.command, "path": self.path, "key": key,
            "authorization": self.headers.get("Authorization"),
            "webhook_id": self.headers.get("webhook-id"),
            "signature": self.headers.get("webhook-signature"),
            "timestamp": self.headers.get("webhook-timestamp"),
            "headers": dict(self.headers.items()), "body": body})
        return key

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        with self.state.lock:
            self._record(b"")
        self._answer(200, {"status": "fetched"})

    def do_POST(self) -> None:  # noqa: N802 - http.server naming
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        state = self.state
        with state.lock:
            key = self._record(body)
            if state.redirects:
                status, location = state.redirects.pop(0)
                return self._answer(status, {"moved": location}, {"Location": location})
            if state.token and self.headers.get("Authorization") != f"Bearer {state.token}":
                return self._answer(401, {"error": "bad token"})
            if state.signing_secret and not _verified(state.signing_secret, body, self.headers):
                return self._answer(401, {"error": "bad signature"})
            run_key = _run_key(body) if state.failing_runs else None
            scripted = (state.failures.pop(0) if state.failures else
                        state.failing_runs.pop(run_key) if run_key in state.failing_runs else None)
            if scripted is not None:
                status = scripted
                return self._answer(status, {"error": f"scripted {status}"},
                                    {"Retry-After": "1"} if status == 429 else None)
            duplicate = key in state.processed
            if not duplicate:  # record the key before "importing" — the receiver's half
                state.processed[key] = 1
                state.bodies[key] = json.loads(body or b"{}")
            stall = state.stalls.pop(0) if state.stalls and not duplicate else 0.0
        if stall:
            time.sleep(stall)
        self._answer(200, {"status": "duplicate" if duplicate else "stored", "key": key},
                     {"X-Request-Id": f"req-{key[-8:]}-{len(state.requests)}"})

    def _answer(self, status: int, payload: dict[str, Any],
                headers: dict[str, str] | None = None) -> None:
        if self.state.echo_secret:
            payload = {**payload, "echo": self.state.echo_secret}
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (timeout): exactly the case under test
            pass


@dataclass
class WebhookReceiver:
    server: ThreadingHTTPServer
    state: ReceiverState
    scheme: str = "http"

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def host(self) -> str:
        return str(self.server.server_address[0])

    def connection_uri(self, path: str = "hooks") -> str:
        return f"{self.scheme}://{self.host}:{self.port}/{path}"

    def redirect_next(self, location: str, status: int = 302) -> None:
        with self.state.lock:
            self.state.redirects.append((status, location))

    def fail_next(self, times: int, status: int = 503) -> None:
        with self.state.lock:
            self.state.failures.extend([status] * times)

    def fail_runs(self, run_keys: Iterable[str], status: int = 503) -> None:
        with self.state.lock:
            self.state.failing_runs.update(dict.fromkeys(run_keys, status))

    def stall_next(self, seconds: float) -> None:
        with self.state.lock:
            self.state.stalls.append(seconds)


def _run_key(body: bytes) -> str | None:
    try:
        found = json.loads(body or b"{}").get("run_key")
    except (ValueError, AttributeError):
        return None
    return found if isinstance(found, str) else None


def start_receiver(tls_context: ssl.SSLContext | None = None, *, port: int = 0,
                   state: ReceiverState | None = None, host: str = "127.0.0.1") -> WebhookReceiver:
    """The receiver on a free port of ``host`` (or ``port``: a receiver started again after an
    outage, keeping ``state``); with ``tls_context`` it speaks HTTPS."""
    state = state or ReceiverState()
    handler = type("Handler", (_Handler,), {"state": state})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    if tls_context is not None:
        # Handshake lazily in the handler thread, so a client that rejects the certificate
        # cannot stall the accept loop.
        server.socket = tls_context.wrap_socket(server.socket, server_side=True,
                                                do_handshake_on_connect=False)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return WebhookReceiver(server=server, state=state,
                           scheme="https" if tls_context is not None else "http")


def stop_receiver(receiver: WebhookReceiver) -> None:
    receiver.server.shutdown()
    receiver.server.server_close()
