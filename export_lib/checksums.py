"""sha256 of a stream or a file, read in 1 MiB chunks (memory stays bounded whatever the size).

The one hashing loop for stores, deliveries and transports; the render engine hashes as it
writes instead (it never re-reads an artifact).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import BinaryIO

CHUNK = 1024 * 1024


def sha256_stream(stream: BinaryIO) -> tuple[str, int]:
    """(hex digest, byte count) of everything left in ``stream``."""
    digest, size = hashlib.sha256(), 0
    while chunk := stream.read(CHUNK):
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def sha256_file(path: Path) -> str:
    with path.open("rb") as handle:
        return sha256_stream(handle)[0]
