"""Local directory destination (the embedded default).

No connection: ``path`` is a directory, relative paths resolve under the exports root
(``exports_root`` from the caller, else ``$EXPORT_HOME/exports``). The file is copied to a
hidden temp name in the same directory, fsync'd and ``os.replace``'d into place, so a reader
never sees a partial file under the final name. A ``<name>.sha256`` sidecar (``sha256sum``
format) is written the same way for the recipient to verify.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from export_lib.config.destinations import LocalDestination
from export_lib.delivery.artifact import DeliverableArtifact, file_sha256
from export_lib.delivery.transports.base import DeliveryContext, Transport, conflict
from export_lib.errors import DeliveryError
from export_lib.source.connections import project_root


def default_exports_root() -> Path:
    return project_root() / "exports"


class LocalTransport(Transport):
    kind = "local"
    can_withdraw = True

    def __init__(self, destination: LocalDestination, *, exports_root: Path | None = None) -> None:
        root = (exports_root or default_exports_root()).resolve()
        path = Path(destination.path)
        self.directory = path if path.is_absolute() else root / path
        self.destination = destination

    def target(self, artifact: DeliverableArtifact) -> str:
        return str(self.directory / artifact.name)

    def find_existing(self, artifact: DeliverableArtifact, ctx: DeliveryContext) -> str | None:
        final = self.directory / artifact.name
        try:
            size = final.stat().st_size
        except FileNotFoundError:
            return None
        digest = file_sha256(final) if size == artifact.bytes else "(size differs)"
        if digest != artifact.sha256:
            raise conflict(
                str(final), f"{size} bytes, sha256 {digest}",
                f"{artifact.bytes} bytes, sha256 {artifact.sha256}",
            )
        if not (self.directory / f"{artifact.name}.sha256").exists():
            self._write_atomic(f"{artifact.name}.sha256", _sidecar(artifact), ctx)
        return f"present size={size}"

    def send(self, artifact: DeliverableArtifact, ctx: DeliveryContext) -> str:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            temp = self.directory / f".{artifact.name}.part-{ctx.delivery_id}"
            with artifact.open() as source, temp.open("wb") as sink:
                shutil.copyfileobj(source, sink, 1024 * 1024)
                sink.flush()
                os.fsync(sink.fileno())
            os.replace(temp, self.directory / artifact.name)
            self._write_atomic(f"{artifact.name}.sha256", _sidecar(artifact), ctx)
            _fsync_dir(self.directory)
        except PermissionError as exc:
            raise DeliveryError(
                f"cannot write to {self.directory}: {exc.strerror}; grant the worker write "
                "access or change the destination path"
            ) from exc
        except OSError as exc:  # disk full, NFS hiccup: a later attempt may succeed
            raise DeliveryError(f"writing {self.target(artifact)} failed: {exc}",
                                retryable=True) from exc
        return f"written size={artifact.bytes}"

    def withdraw(self, name: str) -> str:
        removed = []
        for path in (self.directory / name, self.directory / f"{name}.sha256"):
            if path.exists():
                path.unlink()
                removed.append(str(path))
        return f"deleted {', '.join(removed)}" if removed else f"{self.directory / name} was gone"

    def _write_atomic(self, name: str, text: str, ctx: DeliveryContext) -> None:
        temp = self.directory / f".{name}.part-{ctx.delivery_id}"
        with temp.open("w", encoding="utf-8") as sink:
            sink.write(text)
            sink.flush()
            os.fsync(sink.fileno())
        os.replace(temp, self.directory / name)


def _sidecar(artifact: DeliverableArtifact) -> str:
    return f"{artifact.sha256}  {artifact.name}\n"


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable (a crash right after must not lose the directory entry)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
