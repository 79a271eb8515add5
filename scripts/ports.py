"""Port helpers for the run scripts (stdlib only).

    ports.py free PORT          exit 0 when PORT can be bound on this machine, 1 when taken
    ports.py first-free START   print the first free port from START (up to START+100)
    ports.py free-udp PORT / first-free-udp START   the same for a UDP port (StatsD)
    ports.py start PORT MOVES CMD...
                                run the server start command CMD, whose arguments say
                                ``{port}`` where the port goes; when it fails because PORT was
                                taken meanwhile (another server bound it between the pick and
                                this start), run it again on the next free port, at most MOVES
                                times, saying which port it moved to (stderr). Prints the port
                                the server started on (stdout); CMD's stdout is dropped, its
                                stderr passes through.
                                MOVES 0: a port the user chose, never moved.
"""

from __future__ import annotations

import socket
import subprocess
import sys

SPAN = 100  # first-free looks this far above START


def is_free(port: int, kind: int = socket.SOCK_STREAM) -> bool:
    # Bind like a server would (all interfaces), without SO_REUSEADDR surprises from TIME_WAIT
    # (TCP; on UDP the option would let two sockets share the port, so a taken one looks free).
    for family, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET, "127.0.0.1")):
        with socket.socket(family, kind) as s:
            if kind == socket.SOCK_STREAM:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


def first_free(start: int, kind: int = socket.SOCK_STREAM) -> int | None:
    return next((p for p in range(start, start + SPAN + 1) if p <= 65535 and is_free(p, kind)),
                None)


def start(port: int, moves: int, command: list[str]) -> int:
    """Run ``command`` on ``port``, moving on while the port was taken meanwhile (docstring)."""
    for moved in range(moves + 1):
        argv = [arg.replace("{port}", str(port)) for arg in command]
        # Its progress lines (pg_ctl's "waiting for server…") are not the port we print.
        code = subprocess.run(argv, stdout=subprocess.DEVNULL, check=False).returncode
        if code == 0:
            print(port)
            return 0
        if is_free(port):
            return code  # it failed for another reason: its output says which
        if moved == moves:
            break
        following = first_free(port + 1)
        if following is None:
            print(f"Port {port} is taken and no port in {port + 1}..{port + 1 + SPAN} is free",
                  file=sys.stderr)
            return 1
        print(f"Port {port} was taken by the time the server started (another server starting "
              f"at the same moment?); moving to port {following}", file=sys.stderr)
        port = following
    print(f"Port {port} is already in use, so the server cannot start there"
          + (f" (moved {moves} time(s) already)" if moves else "")
          + f"; pick another, e.g. {first_free(port + 1) or port + 1}", file=sys.stderr)
    return 1


def main(argv: list[str]) -> int:
    if len(argv) >= 4 and argv[0] == "start" and argv[1].isdigit() and argv[2].isdigit():
        return start(int(argv[1]), int(argv[2]), argv[3:])
    if len(argv) != 2 or argv[0] not in ("free", "first-free", "free-udp", "first-free-udp") \
            or not argv[1].isdigit():
        print(__doc__, file=sys.stderr)
        return 2
    port = int(argv[1])
    kind = socket.SOCK_DGRAM if argv[0].endswith("-udp") else socket.SOCK_STREAM
    if argv[0].startswith("free"):
        return 0 if is_free(port, kind) else 1
    found = first_free(port, kind)
    if found is None:
        print(f"no free port in {port}..{port + SPAN}", file=sys.stderr)
        return 1
    print(found)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
