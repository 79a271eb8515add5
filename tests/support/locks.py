"""The two generated locks (``make lock``): requirements.txt, the runtime lock (the image, a
deployment), and requirements-dev.txt (``make venv``: the runtime pins plus the test tools).
Each pin is ``name==version \\`` followed by its ``--hash=sha256:…`` lines."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUNTIME = REPO / "requirements.txt"
DEV = REPO / "requirements-dev.txt"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lock: Path) -> dict[str, str]:
    """Normalised distribution name → pinned version."""
    found = {}
    for line in lock.read_text().splitlines():
        match = _PIN.match(line)
        if match:
            found[norm(match[1])] = match[2]
    return found


def unhashed(lock: Path) -> list[str]:
    """The pins of ``lock`` that carry no ``--hash`` line (``--require-hashes`` refuses them)."""
    blocks = re.split(r"\n(?=[A-Za-z0-9])", lock.read_text())
    return [block.split()[0] for block in blocks
            if _PIN.match(block) and "--hash=sha256:" not in block]
