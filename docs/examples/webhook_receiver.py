"""A webhook receiver that verifies export notices with the Standard Webhooks library (copy and
adapt; ``pip install standardwebhooks``, or any of its libraries in another language).

Each notice is a JSON ``POST`` signed as the Standard Webhooks specification says:

* ``webhook-id``: the delivery id; a retry of the same delivery carries the same id (so does
  ``Idempotency-Key``);
* ``webhook-timestamp``: Unix seconds when this attempt was signed;
* ``webhook-signature``: ``v1,<base64>``, the HMAC-SHA256 of ``<id>.<timestamp>.<body>`` keyed
  with your signing secret (``whsec_...``, the same value as the connection's ``signing_secret``).

``Webhook(secret).verify(body, headers)`` rejects a notice whose signature does not match (forged
or altered) or whose timestamp is more than five minutes from your clock (a replay). Record the
``webhook-id`` before processing and answer a repeated id with the stored result, without
processing twice. The body's ``link``, when present, is a pre-signed HTTPS URL that expires
(``link_expires_at``): download the file promptly. Verify the file with the body's ``sha256``.

Run it::

    EXPORT_SIGNING_SECRET=whsec_... python webhook_receiver.py 8000
"""

from __future__ import annotations

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from standardwebhooks import Webhook, WebhookVerificationError


class Receiver(BaseHTTPRequestHandler):
    webhook = Webhook(os.environ["EXPORT_SIGNING_SECRET"])
    seen: dict[str, bytes] = {}  # use a database in production

    def do_POST(self) -> None:  # noqa: N802 - http.server naming
        body = self.rfile.read(min(int(self.headers.get("Content-Length") or 0), 65536))
        try:
            notice = self.webhook.verify(body, dict(self.headers.items()))
        except WebhookVerificationError as exc:
            return self._answer(401, json.dumps({"error": str(exc)}).encode())
        key = self.headers["webhook-id"]
        if key not in self.seen:
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
