"""A real SMTP relay (aiosmtpd) on a free loopback port that keeps what it accepts.

It advertises AUTH over plain text (loopback only) with one account, ``relay`` / ``relaypw``,
so wrong credentials are refused with 535 as a real relay would; unauthenticated senders are
accepted too. Accepted messages are answered ``250 Ok: queued as <id>`` and kept in
``messages``.
"""

from __future__ import annotations

import itertools
import ssl
import threading
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from typing import Any
from urllib.parse import quote

from tests.services.ports import free_port

SENDER = "exports@example.com"
USER = "relay"
PASSWORD = "relaypw"


@dataclass
class _Handler:
    messages: list[Message] = field(default_factory=list)
    envelopes: list[tuple[str, list[str]]] = field(default_factory=list)
    ids: Any = field(default_factory=lambda: itertools.count(1))
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        with self.lock:
            queue_id = f"Q{next(self.ids):06d}"
            self.messages.append(message_from_bytes(envelope.content))
            self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
        return f"250 Ok: queued as {queue_id}"


def _authenticator(server: Any, session: Any, envelope: Any, mechanism: str,
                   auth_data: Any) -> Any:
    from aiosmtpd.smtp import AuthResult, LoginPassword

    ok = (isinstance(auth_data, LoginPassword) and auth_data.login == USER.encode()
          and auth_data.password == PASSWORD.encode())
    return AuthResult(success=ok, handled=False)  # handled=False: the relay answers 535


@dataclass
class SmtpRelay:
    controller: Any
    handler: _Handler
    port: int

    @property
    def messages(self) -> list[Message]:
        return self.handler.messages

    def reset(self) -> None:
        with self.handler.lock:
            self.handler.messages.clear()
            self.handler.envelopes.clear()

    def connection_uri(self, *, password: str | None = None, extra: str = "") -> str:
        auth = f"{USER}:{quote(password, safe='')}@" if password else ""
        return f"smtp://{auth}127.0.0.1:{self.port}/?from={quote(SENDER, safe='')}{extra}"


def start_smtp(tls_context: ssl.SSLContext | None = None) -> SmtpRelay:
    """A relay; with ``tls_context`` it offers and requires STARTTLS (port 587 style)."""
    from aiosmtpd.controller import Controller

    handler = _Handler()
    port = free_port()
    controller = Controller(handler, hostname="127.0.0.1", port=port,
                            authenticator=_authenticator, auth_require_tls=False,
                            tls_context=tls_context, require_starttls=tls_context is not None,
                            ready_timeout=10)
    controller.start()
    return SmtpRelay(controller=controller, handler=handler, port=port)


def stop_smtp(relay: SmtpRelay) -> None:
    relay.controller.stop()
