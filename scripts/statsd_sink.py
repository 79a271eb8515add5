"""`make cluster`'s StatsD listener (stdlib only): what docker-compose.yaml's statsd-exporter is
for the compose stack. Airflow's components and task processes send their metrics and ours
(``[metrics] statsd_on``, deploy/cluster.env) to a UDP port on 127.0.0.1; this writes every
metric line it receives, as sent, to a file:

    statsd_sink.py PORT FILE     e.g. .airflow-cluster/run/statsd.txt

``airflow.export.render.rows.acme.daily-spend:1234|c`` — name, value and type, one a line, so
``grep '^airflow.export.' .airflow-cluster/run/statsd.txt`` shows what an export emitted. At
10 MB the file is moved to FILE.1 (the one before is dropped): a cluster left running for days
keeps at most 20 MB. The supervisor (scripts/supervise.py) starts and restarts it.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

MAX_BYTES = 10 * 1024 * 1024


def serve(port: int, path: Path) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", port))
    out = path.open("ab")
    try:
        while True:
            data = sock.recv(65535)
            # One datagram may carry several metrics, one a line (StatsD's multi-metric packets).
            lines = [line for line in data.splitlines() if line.strip()]
            if not lines:
                continue
            out.write(b"\n".join(lines) + b"\n")
            out.flush()
            if out.tell() > MAX_BYTES:
                out.close()
                os.replace(path, path.with_name(path.name + ".1"))
                out = path.open("ab")
    finally:
        out.close()
        sock.close()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[0].isdigit():
        print(__doc__, file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    serve(int(argv[0]), Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
