"""gcp-storage-emulator (in-memory) in a subprocess on a free loopback port."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from tests.services.ports import free_port, stop_process, wait_for_port

PROJECT = "test-project"


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
    process = subprocess.Popen(
        [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1",
         "--port", str(port), "--in-memory", "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    server = GcsServer(port=port, process=process)
    try:
        wait_for_port(port, what="GCS emulator")
    except BaseException:
        stop_gcs(server)
        raise
    return server


def stop_gcs(server: GcsServer) -> None:
    stop_process(server.process)
