"""recover_missed and the gap audit never pile requests on a slow api-server (issue 25 item 0):
a backfill request waits above the server's work (30 s + 10 ms a slot, at most 240 s), sends
each request once, and a server that does not answer in time defers the slots to the next
scheduled run or audit instead of being asked again at once. Against a real HTTP server that
answers the dry run late."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from export_lib.errors import OrchestratorTimeout
from export_lib.pipeline.backfills import AirflowApi

SLOTS = [datetime(2026, 11, 30, 0, tzinfo=UTC) + timedelta(hours=h) for h in range(48)]


class SlowApi(ThreadingHTTPServer):
    """Answers ``/api/v2/backfills/dry_run`` after ``delay`` seconds and records every request."""

    def __init__(self, delay: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.delay = delay
        self.requests: list[str] = []


class _Handler(BaseHTTPRequestHandler):
    server: SlowApi

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.server.requests.append(self.path)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/api/v2/backfills/dry_run":
            time.sleep(self.server.delay)
            body = {"backfills": [{"logical_date": s.isoformat()} for s in SLOTS],
                    "total_entries": len(SLOTS)}
        else:
            body = {"id": 7}
        data = json.dumps(body).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up waiting

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def slow_api() -> Iterator[SlowApi]:
    server = SlowApi(delay=1.5)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _client(server: SlowApi, timeout_s: float) -> AirflowApi:
    host, port = server.server_address
    return AirflowApi(f"http://{host}:{port}", "u", "p", token="t", timeout_s=timeout_s)


def test_a_dry_run_slower_than_the_wait_is_deferred_after_one_request(slow_api: SlowApi):
    # 0.3 s + 48 slots x 10 ms = 0.78 s < the server's 1.5 s.
    outcome = _client(slow_api, timeout_s=0.3).request_backfill("dag_x", SLOTS)
    assert outcome.created == () and outcome.backfill_id is None
    assert outcome.deferred == ("POST /api/v2/backfills/dry_run: the Airflow API at "
                                f"{_client(slow_api, 0).base_url} did not answer within 1 s "
                                "(it may still be working on it)")
    assert outcome.describe().endswith("the next scheduled run (or audit) asks again")
    time.sleep(slow_api.delay)  # anything the client might have sent meanwhile has arrived
    assert slow_api.requests == ["/api/v2/backfills/dry_run"]  # once: no retry, no create


def test_a_dry_run_inside_the_wait_creates_the_backfill(slow_api: SlowApi):
    # The wait grows with the slots asked for: 1.2 s + 48 x 10 ms = 1.68 s > the server's 1.5.
    outcome = _client(slow_api, timeout_s=1.2).request_backfill("dag_x", SLOTS)
    assert (outcome.deferred, outcome.backfill_id, len(outcome.created)) == (None, 7, 48)
    assert slow_api.requests == ["/api/v2/backfills/dry_run", "/api/v2/backfills"]


def test_a_plain_call_past_its_timeout_is_an_orchestrator_timeout(slow_api: SlowApi):
    with pytest.raises(OrchestratorTimeout, match=r"^POST /api/v2/backfills/dry_run: the Airflow "
                                                  r"API at http://127\.0\.0\.1:\d+ did not answer "
                                                  r"within 0 s"):
        _client(slow_api, timeout_s=0.2).call("POST", "/api/v2/backfills/dry_run", {})
