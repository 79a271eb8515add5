"""An SMTP relay and a StatsD listener that run in processes of their own and keep what they
receive in a directory, so every pytest worker can read it.

The scheduler modules share one stack per test run (tests/system/scheduler/shared.py), whichever
worker runs them; the stack sends its mail and metrics to one relay and one listener, which
therefore cannot live inside the worker that happened to start the stack.

``python -m tests.services.spool smtp|statsd DIR PORT`` serves until SIGTERM/SIGKILL. Each
accepted message is one JSON file (``000001.json``: envelope and content, written to a temp
name and renamed, so a reader never sees half of one); StatsD lines are appended to
``statsd.log`` one datagram at a time.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from email import message_from_bytes
from email.message import Message
from pathlib import Path

from tests.services.ports import free_port, wait_for_port

STATSD_LOG = "statsd.log"


@dataclass(frozen=True)
class SpoolRelay:
    """The relay's port and spool directory (a reader of what it accepted)."""

    port: int
    spool: Path
    pid: int

    def received(self) -> list[tuple[Message, tuple[str, list[str]]]]:
        """Every accepted message with its envelope (sender, recipients), in arrival order."""
        out = []
        for path in sorted(self.spool.glob("*.json")):
            data = json.loads(path.read_text())
            out.append((message_from_bytes(base64.b64decode(data["content"])),
                        (data["mail_from"], list(data["rcpt_tos"]))))
        return out

    @property
    def messages(self) -> list[Message]:
        return [message for message, _ in self.received()]


@dataclass(frozen=True)
class SpoolStatsd:
    """The listener's UDP port and the lines it received."""

    port: int
    spool: Path
    pid: int

    @property
    def lines(self) -> list[str]:
        try:
            text = (self.spool / STATSD_LOG).read_text(errors="replace")
        except FileNotFoundError:
            return []
        return text.splitlines()

    def values(self, name: str) -> list[tuple[float, str]]:
        """``(value, type)`` of every line for metric ``name`` (prefix included)."""
        out = []
        for line in self.lines:
            metric, _, rest = line.partition(":")
            if metric == name:
                value, _, kind = rest.partition("|")
                out.append((float(value), kind.split("|")[0]))
        return out


def _spawn(kind: str, spool: Path, port: int) -> int:
    spool.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.services.spool", kind, str(spool), str(port)],
        cwd=Path(__file__).resolve().parents[2], start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=open(spool / f"{kind}.err", "ab"))
    return process.pid


def start_spool_relay(spool: Path) -> SpoolRelay:
    port = free_port()
    pid = _spawn("smtp", spool, port)
    wait_for_port(port, what="the spool SMTP relay")
    return SpoolRelay(port, spool, pid)


def start_spool_statsd(spool: Path) -> SpoolStatsd:
    port = free_port()
    pid = _spawn("statsd", spool, port)
    ready = spool / "statsd.ready"
    for _ in range(300):  # UDP has no connect to wait on: the server says when it is bound
        if ready.exists():
            break
        import time
        time.sleep(0.05)
    else:
        raise RuntimeError(f"the spool StatsD listener did not bind 127.0.0.1:{port} in 15 s "
                           f"(see {spool / 'statsd.err'})")
    return SpoolStatsd(port, spool, pid)


def stop_spooled(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class _Handler:
    def __init__(self, spool: Path) -> None:
        self.spool, self.count = spool, 0

    async def handle_DATA(self, server, session, envelope) -> str:  # noqa: N802
        self.count += 1
        name = f"{self.count:06d}"
        tmp = self.spool / f".{name}.tmp"
        tmp.write_text(json.dumps({
            "mail_from": envelope.mail_from, "rcpt_tos": list(envelope.rcpt_tos),
            "content": base64.b64encode(envelope.content).decode()}))
        os.replace(tmp, self.spool / f"{name}.json")
        return f"250 Ok: queued as Q{name}"


def _serve_smtp(spool: Path, port: int) -> None:
    from aiosmtpd.controller import Controller

    controller = Controller(_Handler(spool), hostname="127.0.0.1", port=port, ready_timeout=10)
    controller.start()
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    controller.stop()


def _serve_statsd(spool: Path, port: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", port))
    (spool / "statsd.ready").touch()
    with open(spool / STATSD_LOG, "ab", buffering=0) as out:
        while True:
            data = sock.recv(65535)
            out.write(data.rstrip(b"\n") + b"\n")


if __name__ == "__main__":
    kind, directory, port_text = sys.argv[1:4]
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    if kind == "smtp":
        _serve_smtp(Path(directory), int(port_text))
    else:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
        _serve_statsd(Path(directory), int(port_text))
