"""An OpenLineage receiver: a real HTTP server that records every event POSTed to it, as
Marquez's ``/api/v1/lineage`` would receive them (OpenLineage's HTTP transport, no mock)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ENDPOINT = "api/v1/lineage"


@dataclass
class LineageReceiver:
    server: ThreadingHTTPServer
    events: list[dict[str, Any]] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)  # the bodies as sent: what a secret leaks into
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def transport(self) -> str:
        """``[openlineage] transport`` for Airflow's OpenLineage provider."""
        return json.dumps({"type": "http", "url": self.url, "endpoint": ENDPOINT})

    def of_job(self, job: str) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.events if e.get("job", {}).get("name") == job]


def start_lineage_receiver() -> LineageReceiver:
    receiver: LineageReceiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.strip("/") == ENDPOINT:
                with receiver.lock:
                    receiver.raw.append(body)
                    receiver.events.append(json.loads(body))
                self.send_response(201)
            else:
                self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver = LineageReceiver(server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return receiver


def stop_lineage_receiver(receiver: LineageReceiver) -> None:
    receiver.server.shutdown()
    receiver.server.server_close()
