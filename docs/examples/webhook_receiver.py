"""A webhook receiver that verifies export notices (standard library only; copy and adapt).

Each notice is a JSON ``POST`` with these headers:

* ``X-Export-Timestamp``: Unix seconds when the notice was signed;
* ``X-Export-Signature``: ``sha256=<hex>``, the HMAC-SHA256 with your signing secret of
  ``<timestamp>.<body>`` (the timestamp's ASCII digits, one ``.``, then the exact body bytes);
* ``Idempotency-Key``: the delivery id; a retry of the same delivery carries the same key.

Reject a notice whose signature does not match (forged or altered) or whose timestamp is more
than five minutes from your clock (a replay of an old notice). Record the ``Idempotency-Key``
before processing and answer a repeated key with the stored result, without processing twice.
The body's ``link``, when present, is a pre-signed HTTPS URL that expires (``link_expires_at``):
download the file promptly. Verify the file with the body's ``sha256``.

Run it::

    EXPORT_SIGNING_SECRET=whsec_... python webhook_receiver.py 8000
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

TOLERANCE_SECONDS = 300


def verify(secret: str, timestamp: str | None, signature: str | None, body: bytes,
           now: float | None = None) -> bool:
    """True when ``signature`` is the HMAC of ``timestamp.body`` and the timestamp is fresh."""
    if not timestamp or not signature or not timestamp.isdigit():
        return False
    if abs((time.time() if now is None else now) - int(timestamp)) > TOLERANCE_SECONDS:
        return False
    signed = timestamp.encode() + b"." + body
    expected = "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature)


class Receiver(BaseHTTPRequestHandler):
    secret = os.environ.get("EXPORT_SIGNING_SECRET", "")
    seen: dict[str, bytes] = {}  # use a database in production

    def do_POST(self) -> None:  # noqa: N802 - http.server naming
        body = self.rfile.read(min(int(self.headers.get("Content-Length") or 0), 65536))
        if not verify(self.secret, self.headers.get("X-Export-Timestamp"),
                      self.headers.get("X-Export-Signature"), body):
            return self._answer(401, b'{"error": "bad signature or stale timestamp"}')
        key = self.headers.get("Idempotency-Key") or ""
        if key not in self.seen:
            notice = json.loads(body)
            # ... fetch notice["link"] (if any) and check notice["sha256"] here ...
            self.seen[key] = json.dumps({"status": "stored", "name": notice["name"]}).encode()
        self._answer(200, self.seen[key])

    def _answer(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


if __name__ == "__main__":
    HTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 8000),
               Receiver).serve_forever()
