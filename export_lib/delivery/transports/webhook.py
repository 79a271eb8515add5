"""Webhook destination: POST a JSON notice with ``Idempotency-Key: <delivery id>``.

Connection forms (``AIRFLOW_CONN_<ID>``)::

    https://hooks.example.com/exports              (no auth)
    https://user:secret@hooks.example.com/exports  (HTTP Basic)
    https://hooks.example.com/exports?token=abc    (``Authorization: Bearer abc``)
    https://hooks.example.com/exports?signing_secret=whsec_abc   (signed bodies)
    https://hooks.internal:8443/x?ca_file=%2Fetc%2Fssl%2Finternal-ca.pem  (private CA)
    http://127.0.0.1:8080/                         (tests)

The URL is the connection's scheme (``http``/``https``), host, port and path, followed by the
destination's ``endpoint`` path: the host always comes from the connection. A connection made
for Airflow's HTTP provider (conn type ``http``) reads as ``HttpHook`` reads it: ``schema``
``http``/``https`` is the scheme (not a path), and a host may carry its own
``https://host/base``.

The body names the delivery: ``delivery_id``, ``run_key``, ``period``, ``destination_id``,
``name``, ``version``, ``rows``, ``bytes``, ``sha256``, ``format``, ``window_start``,
``window_end`` and ``link`` (the published artifact's URI). Outcomes:

With ``extra.signing_secret`` every request carries ``X-Export-Signature: sha256=<hex>``, the
HMAC-SHA256 of the exact body bytes, so the receiver can reject forged notices.

* 2xx acknowledges (receipt: status, request id header if any, body snippet);
* 408, 429, 5xx, timeouts and connection errors are retryable;
* 401/403 are permanent credential failures naming the connection; other 4xx are permanent.

There is no way to ask a webhook whether it already holds the delivery, so idempotency rests on
the receiver honouring ``Idempotency-Key``: a retry after "stored, then timed out" carries the
same key and the receiver answers without processing twice.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import ssl
import urllib.error
import urllib.request
from base64 import b64encode
from urllib.parse import quote, urlsplit

from export_lib.config.destinations import WebhookDestination
from export_lib.delivery.artifact import DeliverableArtifact
from export_lib.delivery.transports.base import (
    DeliveryContext,
    Transport,
    auth_failure,
    network_failure,
    resolve_connection,
    untrusted_certificate,
)
from export_lib.errors import DeliveryError
from export_lib.source.connections import Connection, ConnectionResolver

_RETRY_STATUSES = {408, 425, 429}
_REQUEST_ID_HEADERS = ("X-Request-Id", "Request-Id", "X-Amzn-RequestId", "X-Delivery-Receipt")


def payload(artifact: DeliverableArtifact, ctx: DeliveryContext) -> dict[str, object]:
    """The JSON body: everything a receiver needs to fetch, verify and deduplicate the file."""
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
        "link": artifact.uri,
    }


class WebhookTransport(Transport):
    kind = "webhook"

    def __init__(self, destination: WebhookDestination, *,
                 resolver: ConnectionResolver | None = None) -> None:
        self.destination = destination
        self._resolver = resolver
        self._conn: Connection | None = None

    def __enter__(self) -> WebhookTransport:
        self._conn = resolve_connection(self.destination.conn_id, self.destination.id,
                                  self._resolver)
        if self._conn.conn_type not in {"http", "https"}:
            raise DeliveryError(
                f"connection {self.destination.conn_id!r} has type {self._conn.conn_type!r}; "
                "a webhook needs an http:// or https:// connection URI"
            )
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

    def send(self, artifact: DeliverableArtifact, ctx: DeliveryContext) -> str:
        conn = self._conn
        assert conn is not None
        body = json.dumps(payload(artifact, ctx), sort_keys=True).encode()
        request = urllib.request.Request(
            self.url(),
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "Idempotency-Key": ctx.delivery_id,
                     "User-Agent": "export-lib-delivery/1"},
        )
        if conn.extra.get("signing_secret"):
            digest = hmac.new(conn.extra["signing_secret"].encode(), body, hashlib.sha256)
            request.add_header("X-Export-Signature", f"sha256={digest.hexdigest()}")
        if conn.extra.get("token"):
            request.add_header("Authorization", f"Bearer {conn.extra['token']}")
        elif conn.login:
            basic = b64encode(f"{conn.login}:{conn.password or ''}".encode()).decode()
            request.add_header("Authorization", f"Basic {basic}")
        context = ssl.create_default_context(cafile=conn.extra.get("ca_file") or None)
        try:
            with urllib.request.urlopen(request, timeout=self.destination.timeout_seconds,
                                        context=context) as resp:
                return _receipt(resp.status, resp.headers, resp.read(2048))
        except urllib.error.HTTPError as exc:
            raise self._http_error(exc) from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ssl.SSLCertVerificationError):
                raise untrusted_certificate(conn, exc.reason) from exc
            raise network_failure(conn, exc.reason if isinstance(exc.reason, Exception)
                                  else exc) from exc
        except (TimeoutError, OSError) as exc:
            raise network_failure(conn, exc) from exc

    def _http_error(self, exc: urllib.error.HTTPError) -> DeliveryError:
        conn = self._conn
        assert conn is not None
        snippet = _snippet(exc.read(512))
        if exc.code in (401, 403):
            return auth_failure(conn, f"webhook answered HTTP {exc.code} {snippet}")
        retryable = exc.code in _RETRY_STATUSES or exc.code >= 500
        after = exc.headers.get("Retry-After") if exc.headers else None
        hint = f" (Retry-After: {after})" if after else ""
        return DeliveryError(
            f"webhook {self.url()} via connection {conn.conn_id!r} answered HTTP {exc.code}"
            f"{hint}: {snippet}",
            retryable=retryable,
        )


def base_url(conn: Connection) -> tuple[str, str, str]:
    """(scheme, host, base path): ours (``https://host/base`` as a URI) or HttpHook's (conn
    type ``http``, ``schema`` the scheme, the host possibly ``https://host/base``)."""
    if conn.host and "://" in conn.host:
        parts = urlsplit(conn.host)
        return parts.scheme, parts.hostname or "", parts.path
    if conn.conn_type == "http" and conn.schema in ("http", "https"):
        return conn.schema, conn.host or "", ""
    return conn.conn_type, conn.host or "", conn.schema or ""


def _snippet(body: bytes) -> str:
    return body.decode("utf-8", "replace").strip().replace("\n", " ")[:200]


def _receipt(status: int, headers: object, body: bytes) -> str:
    parts = [f"HTTP {status}"]
    for name in _REQUEST_ID_HEADERS:
        value = headers.get(name) if hasattr(headers, "get") else None
        if value:
            parts.append(f"{name.lower()}={value}")
            break
    snippet = _snippet(body)
    if snippet:
        parts.append(f"body={snippet}")
    return " ".join(parts)
