"""E-mail destination through an SMTP relay (smtplib).

Connection forms (``AIRFLOW_CONN_<ID>``)::

    smtp://relay.example.com:587/?from=exports%40example.com&starttls=true
    smtp://user:secret@relay.example.com:587/?from=Exports%20%3Cexports%40example.com%3E
    smtps://user:secret@relay.example.com:465/?from=exports%40example.com   (implicit TLS)

A connection made for Airflow's SMTP provider (UI form or ``airflow connections add
--conn-type smtp``) works as it is: ``extra.from_email`` is the sender when ``extra.from`` is
absent, and when ``disable_ssl`` / ``disable_tls`` are among the extras they mean what they mean
to ``SmtpHook`` (implicit TLS unless ``disable_ssl``; else STARTTLS unless ``disable_tls``).

TLS certificates are verified against the system CAs, or ``extra.ca_file`` for a private CA;
an untrusted certificate is a permanent failure.

Every message goes over TLS: the connection must be ``smtps://`` or set
``starttls=true`` (a relay that does not offer STARTTLS then fails the delivery permanently,
nothing is sent in clear). A relay on a trusted network without TLS needs the explicit extra
``allow_plaintext=true``, and each delivery through it logs a warning; a login is never sent
without TLS, whatever the extras say. Every recipient must
be the company's owner or in its ``authorized`` list (checked at config load and again before
each delivery, by the engine).

``extra.from`` is the sender (required). The artifact is attached when it is at most the
destination's ``max_attachment_bytes`` (default 10 MiB); above it the body says the file was too
large to attach and gives a time-limited pre-signed download link when the artifact store is S3
or GCS (:mod:`export_lib.delivery.links`), else says to ask the export's owner — never an
internal path.

**Weaker guarantee.** "Acknowledged" means the relay accepted the message (``250`` after
``DATA``; its queue id, when given, is the receipt). It does not prove delivery to a mailbox,
let alone that anyone read or imported the file. A mailbox cannot be queried first, so there is
no "already present" check: the ledger stops a re-triggered run from mailing again, and a retry
after an ambiguous failure (connection lost after ``DATA``) may send a second copy. That copy
carries the same ``Message-ID`` (derived from the delivery id), which mail clients use to
collapse duplicates — best effort, documented as such.
"""

from __future__ import annotations

import re
import smtplib
import ssl
from datetime import UTC, datetime
from email import policy
from email.message import EmailMessage
from email.utils import formatdate, parseaddr

from export_lib.config.destinations import EmailDestination
from export_lib.delivery.artifact import DeliverableArtifact
from export_lib.delivery.links import shareable_link
from export_lib.delivery.transports.base import (
    DeliveryContext,
    Transport,
    auth_failure,
    flag,
    network_failure,
    resolve_connection,
    untrusted_certificate,
)
from export_lib.errors import ConfigError, DeliveryError
from export_lib.logfmt import get_logger
from export_lib.source.connections import Connection, ConnectionResolver

log = get_logger(__name__)

_QUEUE_ID = re.compile(r"queued as\s+(\S+)", re.IGNORECASE)
# The one way to mail without TLS (a relay on a trusted network); logged as a warning each use.
PLAINTEXT_EXTRA = "allow_plaintext"


def message_id(ctx: DeliveryContext, sender: str) -> str:
    domain = parseaddr(sender)[1].rpartition("@")[2] or "exports.invalid"
    return f"<{ctx.delivery_id}@{domain}>"


def build_message(
    destination: EmailDestination, artifact: DeliverableArtifact, ctx: DeliveryContext, sender: str,
    now: datetime | None = None, resolver: ConnectionResolver | None = None,
) -> EmailMessage:
    """The message; the attachment is read only when it fits the configured limit."""
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = ", ".join(destination.to)
    msg["Subject"] = f"{artifact.name} ({ctx.period_label})"
    msg["Message-ID"] = message_id(ctx, sender)
    msg["Date"] = formatdate(localtime=False, usegmt=True)
    msg["X-Delivery-Id"] = ctx.delivery_id
    msg["X-Run-Key"] = ctx.run_key
    lines = [
        f"Your export {artifact.name} for {ctx.period_label} is ready.",
        "",
        f"Rows: {artifact.rows}",
        f"Size: {artifact.bytes} bytes",
        f"SHA-256: {artifact.sha256}",
        f"Version: {artifact.version}",
        f"Window: {artifact.window_start.isoformat()} to {artifact.window_end.isoformat()}",
        "",
    ]
    attach = artifact.bytes <= destination.max_attachment_bytes
    if attach:
        lines.append("The file is attached.")
    else:
        link = shareable_link(artifact.uri, now=now or datetime.now(UTC), resolver=resolver)
        where = (f"Download it until {link.expires_at:%Y-%m-%d %H:%M} UTC from: {link.url}"
                 if link else "No download link can be made for this export's store; ask the "
                 "export's owner for the file.")
        lines.append(
            f"The file is too large to attach ({artifact.bytes} bytes; the limit for this "
            f"destination is {destination.max_attachment_bytes} bytes), so it is not attached. "
            + where
        )
    msg.set_content("\n".join(lines) + "\n")
    if attach:
        maintype, subtype = _mime(artifact.format)
        # Bounded by max_attachment_bytes: the only place a file is read whole, by design.
        with artifact.open() as fh:
            data = fh.read()
        msg.add_attachment(data, maintype=maintype, subtype=subtype, filename=artifact.name)
    return msg


def _mime(label: str) -> tuple[str, str]:
    """The attachment's media type from the artifact's format label (``csv``, ``jsonl.gz``)."""
    from export_lib.errors import ConfigError
    from export_lib.formats.registry import media_type, parse_label

    try:
        maintype, _, subtype = media_type(*parse_label(label.lower())).partition("/")
    except ConfigError:  # a plugin format no longer installed: still deliverable
        return "application", "octet-stream"
    return maintype, subtype


def sender(conn: Connection) -> str:
    """``extra.from`` (our URI form), else ``extra.from_email`` (Airflow's SMTP form)."""
    return str(conn.extra.get("from") or conn.extra.get("from_email") or "")


MAX_TIMEOUT = 600.0


def smtp_timeout(conn: Connection) -> float:
    """The connection's ``timeout`` extra in seconds (default 60), checked before connecting."""
    raw = conn.extra.get("timeout", 60)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0 < value <= MAX_TIMEOUT:  # also false for NaN
        shown = str(raw)[:40]
        raise ConfigError(
            f"connection {conn.conn_id!r}: extra 'timeout' is {shown!r}, not a number of seconds "
            f"in (0, {MAX_TIMEOUT:g}]; fix the connection, e.g. ?timeout=60 (nothing was sent)")
    return value


def tls_mode(conn: Connection) -> tuple[bool, bool]:
    """(implicit TLS, STARTTLS): ``smtps://`` / ``starttls``, or SmtpHook's ``disable_ssl`` /
    ``disable_tls`` when the connection carries them."""
    extra = conn.extra
    if "disable_ssl" in extra or "disable_tls" in extra:
        implicit = not flag(extra.get("disable_ssl"))
        return implicit, not implicit and not flag(extra.get("disable_tls"))
    return conn.conn_type == "smtps", flag(extra.get("starttls"))


class EmailTransport(Transport):
    kind = "email"

    def __init__(self, destination: EmailDestination, *,
                 resolver: ConnectionResolver | None = None) -> None:
        self.destination = destination
        self._resolver = resolver
        self._conn: Connection | None = None
        self._smtp: smtplib.SMTP | None = None

    def target(self, artifact: DeliverableArtifact) -> str:
        return "mailto:" + ",".join(self.destination.to)

    def __enter__(self) -> EmailTransport:
        conn = resolve_connection(self.destination.conn_id, self.destination.id,
                                  self._resolver)
        self._conn = conn
        if not sender(conn):
            raise DeliveryError(
                f"connection {conn.conn_id!r} has no sender: add ?from=exports%40example.com "
                "(extra.from, or extra.from_email as Airflow's SMTP form names it) to its URI"
            )
        if conn.login and not any(tls_mode(conn)):
            raise DeliveryError(
                f"connection {conn.conn_id!r} ({conn.masked_uri()}) would send its SMTP login "
                "without TLS; use smtps:// or add ?starttls=true (Airflow's SMTP form: leave "
                f"disable_ssl or disable_tls false) in the connection {conn.conn_id!r} "
                "(nothing was sent)"
            )
        if not any(tls_mode(conn)):
            if not flag(conn.extra.get(PLAINTEXT_EXTRA)):
                raise DeliveryError(
                    f"connection {conn.conn_id!r} ({conn.masked_uri()}) would send the export "
                    "in clear text (no TLS); use smtps:// or add ?starttls=true, or, for a "
                    f"relay on a trusted network only, ?{PLAINTEXT_EXTRA}=true (nothing was "
                    "sent)")
            log.warning("connection %r (%s): e-mail to %s goes out WITHOUT TLS because the "
                        "connection sets %s; anyone on the path can read the export",
                        conn.conn_id, conn.masked_uri(), self.destination.id, PLAINTEXT_EXTRA)
        smtp_timeout(conn)  # a bad value is a config error, before anything is sent
        self._smtp = self._guard(self._connect)
        return self

    def _connect(self) -> smtplib.SMTP:
        conn = self._conn
        assert conn is not None
        timeout = smtp_timeout(conn)
        context = ssl.create_default_context(cafile=conn.extra.get("ca_file") or None)
        implicit_tls, starttls = tls_mode(conn)
        if implicit_tls:
            smtp: smtplib.SMTP = smtplib.SMTP_SSL(conn.host or "localhost", conn.port or 465,
                                                  timeout=timeout, context=context)
        else:
            smtp = smtplib.SMTP(conn.host or "localhost", conn.port or 25, timeout=timeout)
            if starttls:
                smtp.starttls(context=context)
        if conn.login:
            smtp.login(conn.login, conn.password or "")
        return smtp

    def close(self) -> None:
        if self._smtp is not None:
            try:
                self._smtp.quit()
            except (smtplib.SMTPException, OSError):
                self._smtp.close()
            self._smtp = None

    def find_existing(self, artifact: DeliverableArtifact, ctx: DeliveryContext) -> str | None:
        return None  # a mailbox cannot be asked; see the module docstring

    def send(self, artifact: DeliverableArtifact, ctx: DeliveryContext) -> str:
        conn, smtp = self._conn, self._smtp
        assert conn is not None and smtp is not None
        from_ = sender(conn)
        msg = build_message(self.destination, artifact, ctx, from_, resolver=self._resolver)

        def transact() -> tuple[int, bytes]:
            smtp.ehlo_or_helo_if_needed()
            code, reply = smtp.mail(parseaddr(from_)[1])
            if code != 250:
                raise smtplib.SMTPSenderRefused(code, reply, from_)
            for rcpt in self.destination.to:
                code, reply = smtp.rcpt(rcpt)
                if code not in (250, 251):
                    smtp.rset()  # nothing sent yet: abort cleanly, a retry cannot duplicate
                    raise smtplib.SMTPRecipientsRefused({rcpt: (code, reply)})
            # SMTP needs CRLF line ends; smtplib sends bytes as given.
            code, reply = smtp.data(msg.as_bytes(policy=policy.SMTP))
            if code != 250:
                raise smtplib.SMTPDataError(code, reply)
            return code, reply

        code, reply = self._guard(transact)
        text = reply.decode("utf-8", "replace")
        found = _QUEUE_ID.search(text)
        queued = f" queue_id={found.group(1)[:64]}" if found else ""  # never the reply text
        return f"smtp {code}{queued} message_id={msg['Message-ID']}"

    def _guard(self, call):  # type: ignore[no-untyped-def]
        conn = self._conn
        assert conn is not None
        try:
            return call()
        except smtplib.SMTPAuthenticationError as exc:
            raise auth_failure(conn, f"SMTP login failed ({exc.smtp_code})") from exc
        except smtplib.SMTPRecipientsRefused as exc:
            (rcpt, (code, reply)), = exc.recipients.items()
            raise DeliveryError(
                f"relay {conn.masked_uri()} refused recipient {rcpt!r}: {code} "
                f"{conn.scrub(reply.decode('utf-8', 'replace'))[:200]}", retryable=400 <= code < 500,
            ) from exc
        except smtplib.SMTPResponseException as exc:
            raise DeliveryError(
                f"relay {conn.masked_uri()} (connection {conn.conn_id!r}) answered "
                f"{exc.smtp_code} {conn.scrub(exc.smtp_error.decode('utf-8', 'replace'))[:200]}",
                retryable=400 <= exc.smtp_code < 500,
            ) from exc
        except ssl.SSLCertVerificationError as exc:
            raise untrusted_certificate(conn, exc) from exc
        except smtplib.SMTPNotSupportedError as exc:  # an OSError too: must come first
            if "STARTTLS" not in str(exc):  # AUTH not offered: permanent as well
                raise DeliveryError(f"relay {conn.masked_uri()} (connection {conn.conn_id!r}): "
                                    f"{conn.scrub(exc)}; check the connection's login and port "
                                    "(nothing was sent)") from exc
            raise DeliveryError(
                f"relay {conn.masked_uri()} (connection {conn.conn_id!r}) does not offer "
                "STARTTLS, so nothing was sent; use the relay's TLS port with smtps:// or a "
                "relay that offers STARTTLS (a retry gets the same answer)") from exc
        except (smtplib.SMTPServerDisconnected, TimeoutError, OSError) as exc:
            raise network_failure(conn, exc) from exc
        except smtplib.SMTPException as exc:  # e.g. STARTTLS or AUTH not offered by the relay
            raise DeliveryError(
                f"relay {conn.masked_uri()} (connection {conn.conn_id!r}): {conn.scrub(exc)}; check the "
                "connection's port and starttls/smtps settings"
            ) from exc
