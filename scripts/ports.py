"""Port helpers for the run scripts (stdlib only).

    ports.py free PORT          exit 0 when PORT can be bound on this machine, 1 when taken
    ports.py first-free START   print the first free port from START (up to START+100)
"""

from __future__ import annotations

import socket
import sys


def is_free(port: int) -> bool:
    # Bind like a server would (all interfaces), without SO_REUSEADDR surprises from TIME_WAIT.
    for family, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET, "127.0.0.1")):
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("free", "first-free") or not argv[1].isdigit():
        print(__doc__, file=sys.stderr)
        return 2
    port = int(argv[1])
    if argv[0] == "free":
        return 0 if is_free(port) else 1
    for candidate in range(port, port + 101):
        if is_free(candidate):
            print(candidate)
            return 0
    print(f"no free port in {port}..{port + 100}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
