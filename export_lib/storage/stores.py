"""Artifact stores: where staging objects are written and immutable artifacts published.

The local filesystem is the embedded default (``EXPORT_ARTIFACT_ROOT``, ``./exports/artifacts``).
Staging objects live under ``.staging/`` named by the attempt id, so a crashed attempt never
leaves anything under a final name. Promotion is an atomic rename on the same filesystem and
never overwrites a published artifact with different content.

**Ownership**: a final key belongs to the run whose ``run_key`` its manifest names.
Promotion first *claims* the key by creating the manifest only if it does not exist (``os.link``
of a complete temp file: create-if-absent, atomic; ``If-None-Match: *`` on S3,
``if_generation_match=0`` on GCS), then places the object. A key claimed by another run, or an
object nobody claimed, is refused with :class:`PublishError` and left untouched; only the same
run's own unrecorded leftover (an interrupted publication) is replaced.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Protocol
from urllib.parse import unquote, urlsplit

from export_lib import settings
from export_lib.checksums import sha256_stream
from export_lib.errors import PublishError, StorageError
from export_lib.logfmt import get_logger
from export_lib.storage.ownership import check_owner, owner_of, unowned

if TYPE_CHECKING:
    from export_lib.source.connections import ConnectionResolver

log = get_logger(__name__)

CHUNK = 1024 * 1024


class ArtifactStore(Protocol):
    """What publication needs from an object store."""

    def staging_uri(self, attempt_id: str, ext: str) -> str: ...
    def open_staging(self, uri: str) -> BinaryIO: ...
    def read(self, uri: str) -> BinaryIO: ...
    def promote(self, staging_uri: str, key: str, manifest: dict) -> tuple[str, str]: ...
    def delete(self, uri: str) -> None: ...
    def local_path(self, uri: str) -> Path | None: ...
    def exists(self, uri: str) -> bool: ...


def artifact_root() -> Path:
    from export_lib.source.connections import project_root

    return Path(settings.artifact_root() or project_root() / "exports" / "artifacts")


class LocalStore:
    """A directory tree: ``<root>/<company>/<schedule>/<name>`` plus ``<root>/.staging/``."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root else artifact_root()

    def _path(self, uri: str) -> Path:
        parts = urlsplit(uri)
        if parts.scheme != "file":
            raise StorageError(f"{uri} is not a file:// URI of the local artifact store")
        return Path(unquote(parts.path))  # as_uri() percent-encodes spaces and the like

    def staging_uri(self, attempt_id: str, ext: str) -> str:
        return (self.root / ".staging" / f"{attempt_id}.{ext}").resolve().as_uri()

    @contextmanager
    def _writer(self, path: Path) -> Iterator[BinaryIO]:
        from export_lib.storage.space import guard_space

        # A full volume: StorageFull naming it, and no partial staging file left behind.
        with guard_space(path, lambda: path.stat().st_size, setting="EXPORT_ARTIFACT_ROOT",
                         cleanup=lambda: path.unlink(missing_ok=True)):
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as fh:
                yield fh
                fh.flush()
                os.fsync(fh.fileno())

    def open_staging(self, uri: str):
        return self._writer(self._path(uri))

    def read(self, uri: str) -> BinaryIO:
        try:
            return open(self._path(uri), "rb")
        except FileNotFoundError as exc:
            raise StorageError(f"object {uri} does not exist") from exc

    def exists(self, uri: str) -> bool:
        return self._path(uri).exists()

    def delete(self, uri: str) -> None:
        self._path(uri).unlink(missing_ok=True)

    def local_path(self, uri: str) -> Path | None:
        return self._path(uri)

    def promote(self, staging_uri: str, key: str, manifest: dict) -> tuple[str, str]:
        """Claim ``key`` for ``manifest["run_key"]``, move the staged object there and write
        its manifest beside it. Refuses (``PublishError``) a key another run owns."""
        src = self._path(staging_uri)
        final = (self.root / key).resolve()
        if self.root.resolve() not in final.parents:
            raise PublishError(f"artifact key {key!r} escapes the artifact root {self.root}")
        try:
            return self._promote(src, final, manifest)
        except OSError as exc:  # a full disk, a permission, a path in the way: a retry may pass
            raise StorageError(
                f"cannot publish {staging_uri} as {final}: {exc}; the staged object is kept and "
                "the task's retry publishes it once the artifact directory is writable again"
            ) from exc

    def _promote(self, src: Path, final: Path, manifest: dict) -> tuple[str, str]:
        manifest_path = final.with_name(final.name + ".manifest.json")
        final.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
        fresh = self._claim(manifest_path, text, manifest["run_key"])
        try:
            os.link(src, final)  # create-if-absent: never replaces anything
        except FileExistsError:
            with open(final, "rb") as fh:
                existing_sha, _ = sha256_stream(fh)
            if fresh and existing_sha != manifest["sha256"]:
                manifest_path.unlink()  # our claim; the object is someone else's
                raise unowned(final.as_uri()) from None
            if existing_sha == manifest["sha256"]:
                log.info("artifact %s already holds this content; nothing to move", final)
            else:
                # Only this run's interrupted earlier publication (claimed, object placed,
                # ledger commit lost) leaves this: no consumer was told about it.
                log.warning("replacing unrecorded object %s left by an interrupted publication "
                            "of run %s", final, manifest["run_key"])
                os.replace(src, final)
        src.unlink(missing_ok=True)
        tmp = manifest_path.with_name(f".{manifest_path.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, manifest_path)
        return final.as_uri(), manifest_path.as_uri()

    @staticmethod
    def _claim(manifest_path: Path, text: str, run_key: str) -> bool:
        """Create the manifest if absent (True), or confirm this run owns it (False)."""
        tmp = manifest_path.with_name(f".{manifest_path.name}.claim-{os.getpid()}")
        tmp.write_text(text)
        try:
            os.link(tmp, manifest_path)
            return True
        except FileExistsError:
            check_owner(manifest_path.as_uri(), owner_of(manifest_path.read_bytes()), run_key)
            return False
        finally:
            tmp.unlink(missing_ok=True)


def _unsupported(target: str, scheme: str) -> StorageError:
    return StorageError(f"EXPORT_ARTIFACT_ROOT={target!r}: unsupported scheme {scheme!r}; use a "
                        "local path, file://, s3://bucket/prefix or gs://bucket/prefix")


def root_uri(uri: str | None = None) -> str:
    """The artifact root (``uri``, else ``EXPORT_ARTIFACT_ROOT``) as the URI its artifacts'
    URIs start with: ``file:///abs/path`` (resolved, as LocalStore names its artifacts),
    ``s3://bucket/prefix``, ``gs://bucket/prefix``. No I/O: DAG files call it when parsed."""
    target = uri or settings.artifact_root()
    parts = urlsplit(target or "")
    if not target or parts.scheme in ("", "file"):
        path = Path(parts.path if parts.scheme else target) if target else artifact_root()
        return path.resolve().as_uri()
    if parts.scheme in ("s3", "gs"):
        prefix = parts.path.strip("/")
        return f"{parts.scheme}://{parts.netloc}" + (f"/{prefix}" if prefix else "")
    raise _unsupported(target, parts.scheme)


def open_store(uri: str | None = None, *, resolver: ConnectionResolver | None = None
               ) -> ArtifactStore:
    """The store for ``EXPORT_ARTIFACT_ROOT``: a path, ``file://``, ``s3://`` or ``gs://`` URI.

    An object store's connection (``EXPORT_ARTIFACT_CONN``) is resolved through ``resolver``
    (the environment when None)."""
    target = uri or settings.artifact_root()
    if not target:
        return LocalStore()
    parts = urlsplit(target)
    if parts.scheme in ("", "file"):
        return LocalStore(parts.path if parts.scheme else target)
    if parts.scheme in ("s3", "gs"):
        from export_lib.source.connections import resolve
        from export_lib.storage.cloud import S3Store
        from export_lib.storage.gcs_store import GcsStore

        default = "aws_default" if parts.scheme == "s3" else "google_cloud_default"
        conn = resolve(settings.artifact_conn(default), resolver)
        cls = S3Store if parts.scheme == "s3" else GcsStore
        return cls(parts.netloc, parts.path.strip("/"), conn)
    raise _unsupported(target, parts.scheme)
