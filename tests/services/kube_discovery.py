"""The discovery half of a Kubernetes API server, on loopback: what ``kubectl create
--dry-run=client`` asks before it prints an object (which API groups exist and which kinds they
serve), and nothing else. kubectl needs these answers even in a client-side dry run with
``--validate=false`` (without a server: "unable to recognize …: connection refused"); no
cluster is reachable here. The documents are the real API's shape for the kinds we ship
(core/v1 Pod, apps/v1 Deployment); every request is logged, so a test can check that kubectl
only read (GET) and never sent an object.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
DOCUMENTS = {
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
        {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [{
        "name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
        "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}}]},
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod",
         "verbs": VERBS}]},
    "/apis/apps/v1": {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apps/v1",
                      "resources": [{"name": "deployments", "singularName": "deployment",
                                     "namespaced": True, "kind": "Deployment", "verbs": VERBS}]},
}


@contextmanager
def discovery_server() -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """``(url, requests)``: the server's URL and the (method, path) of every request."""
    requests: list[tuple[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            path = self.path.split("?", 1)[0]
            requests.append((self.command, path))
            document = DOCUMENTS.get(path) if self.command == "GET" else None
            body = json.dumps(document or {"kind": "Status", "apiVersion": "v1",
                                           "status": "Failure", "code": 404}).encode()
            self.send_response(200 if document else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib's name
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
