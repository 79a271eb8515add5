"""A fault-injecting HTTP reverse proxy in front of the moto S3 server or the GCS testbench.

While a fault window is open (:meth:`FaultProxy.faults`), a ``share`` of the requests (every
method: S3's PUT/GET/HEAD/LIST, multipart creates, part uploads, completions and aborts; GCS's
uploads, resumable chunks, rewrites and reads) is answered by the proxy itself instead of the
server, as S3 and GCS do under load:

* ``slowdown``: 503 with S3's ``SlowDown`` error body (GCS clients see a 503 too);
* ``internal``: 500 ``InternalError``;
* ``reset``: the connection is reset (RST) before any answer.

None of these reaches the server, so the request had no effect there, as with the real
services' throttling. ``lost`` (off unless asked for) forwards the request and then resets the
connection instead of answering: the write happened, its answer was lost.

Requests are forwarded unchanged (the ``Host`` header too: S3's signature covers it); a
``Location`` header naming the server (a GCS resumable upload's session URI) is rewritten to
the proxy, so the upload's chunks come through it as well. :attr:`counts` holds what was
injected, by kind and method; :attr:`requests` how many requests came through.
"""

from __future__ import annotations

import http.client
import random
import socket
import struct
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KINDS = ("slowdown", "internal", "reset")
_BODIES = {
    "slowdown": (503, b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>"
                      b"<Message>Please reduce your request rate.</Message></Error>"),
    "internal": (500, b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>InternalError"
                      b"</Code><Message>We encountered an internal error. Please try again."
                      b"</Message></Error>"),
}
HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}


class FaultProxy:
    def __init__(self, upstream_port: int, *, seed: int = 0) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.share = 0.0
        self.kinds: tuple[str, ...] = KINDS
        self.until: float | None = 0.0  # None: the window starts at the next request
        self.window = 0.0
        self.owed = 0  # faults the window injects before it may close: one of each kind
        self.counts: Counter[tuple[str, str]] = Counter()
        self.requests = 0
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.broken = 0  # connections a client closed or reset, or the server refused
        self._server = _Server(("127.0.0.1", 0), type("Handler", (_Handler,), {"proxy": self}))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @contextmanager
    def faults(self, share: float, seconds: float | None = None,
               kinds: tuple[str, ...] = KINDS) -> Iterator[FaultProxy]:
        """Inject faults into ``share`` of the requests for ``seconds`` (None: until the
        block ends); when the block ends, the window it replaced (if any) applies again.

        The seconds count from the block's first request, and the window stays open until it
        has injected each kind once: on a loaded machine the first request can come seconds
        after the block begins, and a window that closed before it would test nothing."""
        with self._lock:
            before = (self.share, self.kinds, self.until, self.window, self.owed)
            self.share, self.kinds = share, kinds
            self.until, self.window = (None, seconds) if seconds is not None else (
                float("inf"), 0.0)
            self.owed = len(kinds) if seconds is not None else 0
        try:
            yield self
        finally:
            with self._lock:
                self.share, self.kinds, self.until, self.window, self.owed = before

    @property
    def injected(self) -> int:
        return sum(self.counts.values())

    def _draw(self, method: str) -> str | None:
        with self._lock:
            self.requests += 1
            now = time.monotonic()
            if self.until is None:
                self.until = now + self.window
            if (now >= self.until and not self.owed) or self._random.random() >= self.share:
                return None
            kind = self.kinds[self.injected % len(self.kinds)]  # in turn: each kind is seen
            self.counts[(kind, method)] += 1
            self.owed = max(0, self.owed - 1)
            return kind


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        # A client that gave up on a connection (its own timeout or retry) is not news.
        if isinstance(sys.exc_info()[1], OSError):
            self.RequestHandlerClass.proxy.broken += 1  # type: ignore[attr-defined]
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """One connection from a client; ``proxy`` (set on a subclass) decides and forwards."""

    protocol_version = "HTTP/1.1"
    proxy: FaultProxy

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                out += self.rfile.read(size)
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            return bytes(out)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _reset(self) -> None:
        # SO_LINGER 0: close() sends RST, the client sees "connection reset by peer".
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                   struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    def _handle(self) -> None:
        body = self._body()
        kind = self.proxy._draw(self.command)
        if kind == "reset":
            self._reset()
        elif kind in _BODIES:
            self._answer(*_BODIES[kind], [("Content-Type", "application/xml")])
        else:
            status, reason, headers, data = self._forward(body)
            if kind == "lost":
                self._reset()
            else:
                self._answer(status, data, headers, reason)

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        upstream = http.client.HTTPConnection(*self.proxy.upstream, timeout=120)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            if body or self.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            upstream.request(self.command, self.path, body=body or None, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
        finally:
            upstream.close()
        server, mine = f"{self.proxy.upstream[0]}:{self.proxy.upstream[1]}", f"127.0.0.1:{self.proxy.port}"
        kept = [(name, value.replace(server, mine) if name.lower() == "location" else value)
                for name, value in answer.getheaders() if name.lower() not in HOP]
        return answer.status, answer.reason, kept, data

    def _answer(self, status: int, data: bytes, headers: list[tuple[str, str]],
                reason: str | None = None) -> None:
        self.send_response_only(status, reason)
        length = str(len(data))
        for name, value in headers:
            if name.lower() == "content-length":
                length = value if self.command == "HEAD" else length
            else:
                self.send_header(name, value)
        self.send_header("Content-Length", length)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = do_PATCH = _handle
