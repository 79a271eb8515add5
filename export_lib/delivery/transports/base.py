"""The contract every destination transport fulfils, and shared failure classification.

A transport is used for exactly one attempt, as a context manager (connect on enter, close on
exit), in two steps:

1. :meth:`Transport.find_existing` — does the destination already hold this artifact (same
   name, size and sha256)? Then the engine acknowledges without rewriting; this is what resolves
   "the upload succeeded but the response was lost" on retry.
2. :meth:`Transport.send` — write it, atomically where the destination allows.

Both return a receipt string (ETag, HTTP status, SMTP queue id, size) for the ledger, and
raise :class:`DeliveryError` with ``retryable`` set: wrong credentials and refused requests are
permanent (a retry cannot fix them), timeouts and 5xx-style failures are retryable.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from types import TracebackType

from export_lib.delivery.artifact import DeliverableArtifact
from export_lib.errors import DeliveryError, ExportError
from export_lib.source.connections import Connection, ConnectionResolver, resolve


@dataclass(frozen=True)
class DeliveryContext:
    """Identity of the delivery being attempted, presented to the destination on every retry."""

    delivery_id: str
    run_key: str
    period_label: str
    destination_id: str


class Transport(ABC):
    """One attempt's connection to a destination."""

    kind: str = ""
    can_withdraw: bool = False
    """Whether :meth:`withdraw` can take a delivered artifact back (an operator revoke)."""

    def __enter__(self) -> Transport:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:  # noqa: B027 - optional hook; stateless transports need nothing
        """Release the connection (idempotent)."""

    def scrub(self, text: str) -> str:
        """``text`` without any secret of this transport's connection (the last line of
        defence for library messages; our own messages show only scheme, host and port)."""
        conn = getattr(self, "_conn", None)
        return conn.scrub(text) if isinstance(conn, Connection) else text

    @abstractmethod
    def target(self, artifact: DeliverableArtifact) -> str:
        """Where the artifact goes, as a credential-free location for the ledger and logs."""

    @abstractmethod
    def find_existing(self, artifact: DeliverableArtifact, ctx: DeliveryContext) -> str | None:
        """A receipt when the destination already holds this exact artifact, else None."""

    @abstractmethod
    def send(self, artifact: DeliverableArtifact, ctx: DeliveryContext) -> str:
        """Deliver the artifact; the receipt."""

    def withdraw(self, name: str) -> str:
        """Delete the delivered file ``name`` (and its sidecar) from the destination; what was
        removed. Only where ``can_withdraw``: a webhook call or an e-mail cannot be taken back."""
        raise DeliveryError(f"a {self.kind} delivery cannot be withdrawn")


def resolve_connection(conn_id: str, destination_id: str,
                       resolver: ConnectionResolver | None = None) -> Connection:
    """The connection through ``resolver`` (the environment when None), or a DeliveryError
    naming the destination: permanent for an unknown id, retryable when the resolver says so
    (a secrets backend that is down)."""
    try:
        return resolve(conn_id, resolver)
    except DeliveryError:
        raise
    except ExportError as exc:
        raise DeliveryError(f"destination {destination_id!r}: {exc}",
                            retryable=exc.retryable) from exc


def conflict(target: str, found: str, expected: str) -> DeliveryError:
    """The destination holds a different file under our deterministic name: never overwrite."""
    return DeliveryError(
        f"{target} already exists with different content ({found}; expected {expected}); "
        "refusing to overwrite a delivered file. Remove it at the destination if it is stale, "
        "then requeue the delivery"
    )


def auth_failure(conn: Connection, detail: str) -> DeliveryError:
    """Permanent: wrong credentials never get better by retrying (no retry storm)."""
    return DeliveryError(
        f"connection {conn.conn_id!r} ({conn.masked_uri()}) was refused: {conn.scrub(detail)}; "
        f"fix the credentials in the connection (the Airflow connection {conn.conn_id!r}, or "
        f"AIRFLOW_CONN_{conn.conn_id.upper()} for exportctl), then requeue the delivery",
        retryable=False,
    )


def network_failure(conn: Connection, exc: BaseException) -> DeliveryError:
    """Retryable: the destination may be reachable on the next attempt."""
    return DeliveryError(
        f"connection {conn.conn_id!r} ({conn.masked_uri()}): {type(exc).__name__}: "
        f"{conn.scrub(exc)}",
        retryable=True,
    )


def untrusted_certificate(conn: Connection, exc: BaseException) -> DeliveryError:
    """Permanent: a certificate the client does not trust will not become trusted by retrying."""
    return DeliveryError(
        f"connection {conn.conn_id!r} ({conn.masked_uri()}): the server's TLS certificate is not "
        f"trusted ({conn.scrub(getattr(exc, 'verify_message', exc))}); set extra.ca_file to the CA bundle "
        "that signed it, or fix the server's certificate"
    )


def flag(value: object, default: bool = False) -> bool:
    """Connection extras arrive as strings from URIs: 'true'/'1'/'yes' are true."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in {"1", "true", "yes", "on"}


def join_key(prefix: str, name: str) -> str:
    """Object key ``prefix/name`` with exactly one slash between (prefix may be empty)."""
    prefix = prefix.strip("/")
    return f"{prefix}/{name}" if prefix else name
