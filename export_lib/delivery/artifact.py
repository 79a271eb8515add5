"""What delivery needs to know about a published artifact."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from export_lib.checksums import sha256_file
from export_lib.errors import DeliveryError

if TYPE_CHECKING:
    from export_lib.storage.objects import StoredObject

CHUNK = 1024 * 1024


@dataclass(frozen=True)
class DeliverableArtifact:
    """A published, immutable artifact file and its identity.

    ``name`` is the period-named file name (``acme_daily-spend_2026-03-28_v1.csv``): every
    destination stores it under that name, so a retry or re-trigger targets the same object.
    ``uri`` is where the published artifact lives; webhooks and oversized e-mails link to it.
    The bytes are read in place: ``local_path`` for the local store, else ``stored`` (an
    object store's artifact, which transports stream, or copy server-side when they can:
    :mod:`export_lib.storage.objects`); never through a local copy.
    """

    local_path: Path | None
    name: str
    version: int
    sha256: str
    bytes: int
    rows: int
    format: str
    uri: str
    window_start: datetime
    window_end: datetime
    manifest: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    stored: StoredObject | None = field(default=None, hash=False, compare=False)

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or "\\" in self.name or self.name in {".", ".."}:
            raise DeliveryError(
                f"artifact name {self.name!r} must be a plain file name without '/' "
                "(destination paths come from the destination config)"
            )

    def open(self) -> BinaryIO:
        """The artifact's bytes as a forward-only stream, read in place."""
        if self.stored is not None:
            return self.stored.open()
        assert self.local_path is not None, "a deliverable artifact has a path or a store"
        return self.local_path.open("rb")

    def check_file(self) -> None:
        """Fail permanently when the published file is gone or not the size the ledger says."""
        where = self.stored.uri if self.stored is not None else self.local_path
        size: int | None = None
        if self.stored is not None:
            size = self.stored.size()
        elif self.local_path is not None and self.local_path.exists():
            size = self.local_path.stat().st_size
        if size is None:
            raise DeliveryError(
                f"published artifact {where} is missing; re-publish the run "
                "(deliveries only send published files)"
            )
        if size != self.bytes:
            raise DeliveryError(
                f"published artifact {where} has {size} bytes, the manifest says "
                f"{self.bytes}; the file was changed after publication, re-publish the run"
            )


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in 1 MiB chunks (memory stays bounded)."""
    return sha256_file(path)
