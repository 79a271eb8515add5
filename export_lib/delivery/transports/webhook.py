"""Webhook destination: POST a JSON notice signed per Standard Webhooks, ``webhook-id`` (and
``Idempotency-Key``) the delivery id.

Connection forms (``AIRFLOW_CONN_<ID>``)::

    https://hooks.example.com/exports              (no auth)
    https://user:secret@hooks.example.com/exports  (HTTP Basic)
    https://hooks.example.com/exports?token=abc    (``Authorization: Bearer abc``)
    https://hooks.example.com/exports?signing_secret=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
                                                   (signed: a Standard Webhooks secret)
    https://hooks.internal:8443/x?ca_file=%2Fetc%2Fssl%2Finternal-ca.pem  (private CA)
    http://127.0.0.1:8080/                         (no credentials: plain http refuses them)

The URL is the connection's scheme (``http``/``https``), host, port and path, followed by the
destination's ``endpoint`` path: the host always comes from the connection. A connection made
for Airflow's HTTP provider (conn type ``http``) reads as ``HttpHook`` reads it: ``schema``
``http``/``https`` is the scheme (not a path), and a host may carry its own
``https://host/base``. Messages, the ledger and logs show only scheme, host and port
(:func:`export_lib.masking.mask_uri`): the path often carries the receiver's secret.

The body names the delivery: ``delivery_id``, ``run_key``, ``period``, ``destination_id``,
``name``, ``version``, ``rows``, ``bytes``, ``sha256``, ``format``, ``window_start``,
``window_end``, and ``link`` with ``link_expires_at``: a time-limited pre-signed HTTPS URL when
the artifact store is S3 or GCS, else ``null`` (never an internal path).

With ``extra.signing_secret`` every request is signed as the Standard Webhooks specification
(standardwebhooks.com) says, so a receiver verifies it with any of its libraries
(``docs/examples/webhook_receiver.py`` uses the Python one):

* ``webhook-id``: the delivery id, the same on every retry of that delivery (receivers dedupe on
  it; ``Idempotency-Key`` carries it too);
* ``webhook-timestamp``: Unix seconds of this attempt (receivers refuse one more than five minutes
  from their clock: a replay);
* ``webhook-signature``: ``v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">``, keyed with the
  secret's bytes: the secret is ``whsec_`` followed by the base64 of 24 to 64 random bytes (the
  spec's form; a secret that is not is refused before anything is sent).

Transport rules (httpx): redirects are never followed — a 3xx is a permanent failure naming the
redirect's host — so credentials and the signature go to the configured host only; credentials
(``token``, user/password) are refused over plain ``http``; TLS certificates are verified (system
CAs or ``extra.ca_file``); connect/read/write timeouts come from ``timeout_seconds``; at most
4 KiB of any answer is read; proxies and ``.netrc`` from the environment are ignored.

* 2xx acknowledges (receipt: status and request id header if any — never the body);
* 408, 425, 429, 5xx, timeouts and connection errors are retryable;
* 401/403 are permanent credential failures naming the connection; 3xx and other 4xx are
  permanent.

There is no way to ask a webhook whether it already holds the delivery, so idempotency rests on
the receiver honouring ``Idempotency-Key``: a retry after "stored, then timed out" carries the
same key and the receiver answers without processing twice.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import ssl
import time
from datetime import UTC, datetime
from urllib.parse import quote, urlsplit

import httpx

from export_lib.config.destinations import WebhookDestination
from export_lib.delivery.artifact import DeliverableArtifact
from export_lib.delivery.links import shareable_link
from export_lib.delivery.transports.base import (
    DeliveryContext,
    Transport,
    auth_failure,
    network_failure,
    resolve_connection,
    untrusted_certificate,
)
from export_lib.errors import DeliveryError
from export_lib.masking import mask_uri
from export_lib.source.connections import Connection, ConnectionResolver

_RETRY_STATUSES = {408, 425, 429}
_REQUEST_ID_HEADERS = ("X-Request-Id", "Request-Id", "X-Amzn-RequestId", "X-Delivery-Receipt")
MAX_ANSWER_BYTES = 4096
SECRET_PREFIX = "whsec_"
MIN_KEY_BYTES, MAX_KEY_BYTES = 24, 64  # the Standard Webhooks spec's range for a secret's key
NEW_SECRET_COMMAND = ("python -c \"import base64, secrets; "
                      "print('whsec_' + base64.b64encode(secrets.token_bytes(32)).decode())\"")


def payload(artifact: DeliverableArtifact, ctx: DeliveryContext, now: datetime | None = None,
            resolver: ConnectionResolver | None = None) -> dict[str, object]:
    """The JSON body: everything a receiver needs to fetch, verify and deduplicate the file."""
    link = shareable_link(artifact.uri, now=now or datetime.now(UTC), resolver=resolver)
    return {
        "delivery_id": ctx.delivery_id,
        "run_key": ctx.run_key,
        "period": ctx.period_label,
        "destination_id": ctx.destination_id,
        "name": artifact.name,
        "version": artifact.version,
        "rows": artifact.rows,
        "bytes": artifact.bytes,
        "sha256": artifact.sha256,
        "format": artifact.format,
        "window_start": artifact.window_start.isoformat(),
        "window_end": artifact.window_end.isoformat(),
        "link": link.url if link else None,
        "link_expires_at": link.expires_at.isoformat() if link else None,
    }


def signing_key(secret: str) -> bytes:
    """The key of a Standard Webhooks secret (``whsec_<base64>``); ValueError saying why not."""
    encoded = secret.removeprefix(SECRET_PREFIX).rstrip("=")
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("it is not whsec_ followed by base64") from None
    if not MIN_KEY_BYTES <= len(key) <= MAX_KEY_BYTES:
        raise ValueError(f"its key is {len(key)} bytes, not {MIN_KEY_BYTES} to {MAX_KEY_BYTES}")
    return key


def sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64>``: HMAC-SHA256 of ``<msg_id>.<timestamp>.<body>`` (Standard Webhooks)."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


class WebhookTransport(Transport):
    kind = "webhook"

    def __init__(self, destination: WebhookDestination, *,
                 resolver: ConnectionResolver | None = None) -> None:
        self.destination = destination
        self._resolver = resolver
        self._conn: Connection | None = None
        self._key: bytes | None = None

    def __enter__(self) -> WebhookTransport:
        conn = resolve_connection(self.destination.conn_id, self.destination.id, self._resolver)
        self._conn = conn
        if conn.conn_type not in {"http", "https"}:
            raise DeliveryError(
                f"connection {self.destination.conn_id!r} has type {conn.conn_type!r}; "
                "a webhook needs an http:// or https:// connection URI"
            )
        scheme = base_url(conn)[0]
        if scheme != "https" and (conn.extra.get("token") or conn.login or conn.password):
            raise DeliveryError(
                f"connection {conn.conn_id!r} ({conn.masked_uri()}) sends credentials over plain "
                f"http; use an https:// URI for the connection {conn.conn_id!r} (Airflow's HTTP "
                "form: schema https) — nothing was sent"
            )
        if conn.extra.get("signing_secret"):
            try:
                self._key = signing_key(str(conn.extra["signing_secret"]))
            except ValueError as exc:
                raise DeliveryError(
                    f"connection {conn.conn_id!r}: extra.signing_secret is not a Standard Webhooks "
                    f"secret ({exc}; the value is not shown); set it to 'whsec_' + the base64 of "
                    f"{MIN_KEY_BYTES} to {MAX_KEY_BYTES} random bytes, e.g. from "
                    f"{NEW_SECRET_COMMAND}, and give the receiver the same — nothing was sent"
                ) from None
        return self

    def url(self) -> str:
        conn = self._conn
        assert conn is not None
        scheme, host, base = base_url(conn)
        port = f":{conn.port}" if conn.port else ""
        endpoint = self.destination.endpoint.strip("/")
        path = "/" + base.strip("/")
        path = path.rstrip("/") + ("/" + endpoint if endpoint else "")
        return f"{scheme}://{host}{port}{quote(path or '/')}"

    def target(self, artifact: DeliverableArtifact) -> str:
        # Connection-independent, so the ledger's target is stable across credential changes.
        path = "/" + self.destination.endpoint.lstrip("/")
        return f"webhook (connection {self.destination.conn_id!r}) {path}"

    def find_existing(self, artifact: DeliverableArtifact, ctx: DeliveryContext) -> str | None:
        return None  # not observable: the receiver deduplicates on Idempotency-Key

    def _headers(self, ctx: DeliveryContext, body: bytes) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Idempotency-Key": ctx.delivery_id,
                   "User-Agent": "export-lib-delivery/1"}
        if self._key is not None:
            # The id is the delivery's, so every retry of it carries the same one; the timestamp
            # is this attempt's (the signature is only valid for five minutes).
            stamp = int(time.time())
            headers["webhook-id"] = ctx.delivery_id
            headers["webhook-timestamp"] = str(stamp)
            headers["webhook-signature"] = sign(self._key, ctx.delivery_id, stamp, body)
        return headers

    def _client(self) -> httpx.Client:
        conn = self._conn
        assert conn is not None
        auth = None
        if conn.login and not conn.extra.get("token"):
            auth = httpx.BasicAuth(conn.login, conn.password or "")
        seconds = self.destination.timeout_seconds
        return httpx.Client(
            follow_redirects=False, trust_env=False, auth=auth,
            verify=ssl.create_default_context(cafile=conn.extra.get("ca_file") or None),
            timeout=httpx.Timeout(seconds, connect=min(seconds, 10.0)),
            headers={"Authorization": f"Bearer {conn.extra['token']}"}
            if conn.extra.get("token") else None,
        )

    def send(self, artifact: DeliverableArtifact, ctx: DeliveryContext) -> str:
        conn = self._conn
        assert conn is not None
        body = json.dumps(payload(artifact, ctx, resolver=self._resolver), sort_keys=True).encode()
        try:
            with self._client() as client, client.stream(
                    "POST", self.url(), content=body, headers=self._headers(ctx, body)) as resp:
                _read_bounded(resp)
                return self._outcome(resp)
        except httpx.ConnectError as exc:
            cause = exc.__context__ or exc.__cause__
            if isinstance(cause, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY" in str(exc):
                raise untrusted_certificate(conn, cause or exc) from None
            raise network_failure(conn, exc) from None
        except httpx.TransportError as exc:  # timeouts, resets, protocol errors
            raise network_failure(conn, exc) from None

    def _outcome(self, resp: httpx.Response) -> str:
        conn = self._conn
        assert conn is not None
        status = resp.status_code
        request_id = _request_id(resp.headers)
        if 200 <= status < 300:
            return f"HTTP {status}" + (f" {request_id}" if request_id else "")
        where = f"webhook {conn.masked_uri()} via connection {conn.conn_id!r}"
        ident = f" ({request_id})" if request_id else ""
        if 300 <= status < 400:
            location = resp.headers.get("Location")
            raise DeliveryError(
                f"{where} answered HTTP {status}{ident}, a redirect to "
                f"{mask_uri(location) if location else 'no Location'}; redirects are not followed "
                "(credentials and signatures go to the configured host only): put the final URL "
                f"in the connection {conn.conn_id!r}, then requeue the delivery",
                retryable=False,
            )
        if status in (401, 403):
            raise auth_failure(conn, f"webhook answered HTTP {status}{ident}")
        after = resp.headers.get("Retry-After")
        hint = f" (Retry-After: {after[:40]})" if after else ""
        raise DeliveryError(f"{where} answered HTTP {status}{ident}{hint}",
                            retryable=status in _RETRY_STATUSES or status >= 500)


def base_url(conn: Connection) -> tuple[str, str, str]:
    """(scheme, host, base path): ours (``https://host/base`` as a URI) or HttpHook's (conn
    type ``http``, ``schema`` the scheme, the host possibly ``https://host/base``)."""
    if conn.host and "://" in conn.host:
        parts = urlsplit(conn.host)
        return parts.scheme, parts.hostname or "", parts.path
    if conn.conn_type == "http" and conn.schema in ("http", "https"):
        return conn.schema, conn.host or "", ""
    return conn.conn_type, conn.host or "", conn.schema or ""


def _read_bounded(resp: httpx.Response) -> None:
    """Read at most MAX_ANSWER_BYTES of the answer (it is never stored; reading lets the
    server finish cleanly), whatever Content-Length claims."""
    seen = 0
    for chunk in resp.iter_raw(1024):
        seen += len(chunk)
        if seen >= MAX_ANSWER_BYTES:
            break


def _request_id(headers: httpx.Headers) -> str | None:
    for name in _REQUEST_ID_HEADERS:
        value = headers.get(name)
        if value:
            return f"{name.lower()}={value[:100]}"
    return None
