"""Google's storage-testbench (vendored in ``storage_testbench/``) in a subprocess on a free
loopback port: the GCS JSON API as GCS answers it, resumable sessions included (resumed by
another client, cancelled by ``DELETE``, preconditions checked when one is finalised).

It runs in its own interpreter with its own PYTHONPATH: its ``google/`` directory (generated
Storage protos) must not shadow this process's ``google.cloud``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.services.ports import free_port, stop_process, wait_for_port

PROJECT = "test-project"
TESTBENCH = Path(__file__).resolve().parent / "storage_testbench"


@dataclass
class GcsServer:
    port: int
    process: subprocess.Popen[bytes]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self) -> Any:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(project=PROJECT, credentials=AnonymousCredentials(),
                              client_options={"api_endpoint": self.endpoint})

    def connection_uri(self) -> str:
        from urllib.parse import quote

        return (f"google-cloud-platform://?project={PROJECT}"
                f"&endpoint={quote(self.endpoint, safe='')}")


def start_gcs() -> GcsServer:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(TESTBENCH)}
    process = subprocess.Popen([sys.executable, str(TESTBENCH / "serve.py"), str(port)],
                               cwd=TESTBENCH, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    server = GcsServer(port=port, process=process)
    try:
        wait_for_port(port, what="GCS testbench")
    except BaseException:
        stop_gcs(server)
        raise
    return server


def stop_gcs(server: GcsServer) -> None:
    stop_process(server.process)
