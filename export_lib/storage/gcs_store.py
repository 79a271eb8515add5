"""The GCS artifact store (same contract as ``LocalStore`` and ``S3Store``).

The render writes its bytes once, to the artifact's final name: a resumable upload session
(:mod:`export_lib.storage.resumable`) opened with ``ifGenerationMatch=0``, fed every full
chunk as the render produces it and left open; the tail (under 256 KiB) travels to
publication in the ledger with the attempt. Publication, inside the ledger's fenced
transaction, claims the name (the manifest created only if absent), then finalises the
session with the tail (:meth:`GcsStore.promote`): the object appears whole, never over an
existing one, and GCS checks it against the render's CRC32C. Nothing is copied and no
staging object is ever listed. An attempt staged by an older release (a staging object
under ``<prefix>/.staging/``) is still published by a server-side copy (``cloud``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import BinaryIO

from export_lib import settings
from export_lib.errors import ArtifactValidationError, PublishError, StorageError
from export_lib.logfmt import get_logger
from export_lib.source.connections import Connection
from export_lib.storage.clients import gcs_client, gcs_retry
from export_lib.storage.cloud import _BucketStore
from export_lib.storage.ownership import unowned
from export_lib.storage.resumable import GONE, SessionWriter, cancel, finalise, parse_pending, status

log = get_logger(__name__)


class GcsStore(_BucketStore):
    scheme = "gs"

    def __init__(self, bucket: str, prefix: str, conn: Connection) -> None:
        super().__init__(bucket, prefix)
        self.client = gcs_client(conn)
        self.conn = conn
        self._bucket = self.client.bucket(bucket)
        self._retry = gcs_retry()  # every call, conditional writes too (clients.py)
        self._attempts = settings.object_store_max_attempts()

    # --- the render's session, and its publication -------------------------------------------

    @contextmanager
    def open_direct(self, key_of: Callable[[], str], *, attempt_id: str,
                    on_started: Callable[[str], None]) -> Iterator[SessionWriter]:
        """A writer whose full chunks go to a resumable session at ``<prefix>/<key_of()>``,
        left open for :meth:`promote` to finalise; cancelled when the block fails."""
        writer = SessionWriter(self._open_session, self.client._http, self.bucket,
                               lambda: self._key(key_of()), attempt_id=attempt_id,
                               on_started=on_started, max_attempts=self._attempts)
        try:
            yield writer
            writer.finish()
        except BaseException:
            try:
                writer.abort()
            except StorageError as exc:  # the render's failure is the one to report
                log.warning("could not cancel the upload session of gs://%s/%s: %s; garbage "
                            "collection does", self.bucket, writer.key, exc)
            raise

    def _open_session(self, key: str, metadata: dict[str, str]) -> str:
        blob = self._bucket.blob(key)
        blob.metadata = metadata
        # ifGenerationMatch=0 is the session's: GCS checks it when publication finalises it.
        return blob.create_resumable_upload_session(
            content_type="application/octet-stream", checksum=None, if_generation_match=0,
            retry=self._retry)

    def verify_staged(self, uri: str, nbytes: int, tail: bytes | None = None) -> bool:
        """A pending session holds what the render sent, and with the tail ``nbytes``: True.
        False for a plain staging object (the caller reads it)."""
        pending = parse_pending(uri)
        if pending is None:
            return False
        key, session, attempt_id, _ = pending
        placed = self._placed_by(key)
        if placed is not None and placed[0] == attempt_id:
            stored = placed[1]  # finalised by this attempt's publication, its commit lost
        else:
            code, held = status(self.client._http, session, self._attempts)
            if code in GONE:
                raise ArtifactValidationError(
                    f"the upload session of {self._uri(key)} no longer exists (cancelled, or "
                    "expired after a week); it is not published. A retry renders it again")
            if code != 308:
                raise ArtifactValidationError(
                    f"the upload session of {self._uri(key)} answers HTTP {code}, not an open "
                    "session; it is not published. A retry renders it again")
            stored = held + len(_tail_of(uri, tail))
        if stored != nbytes:
            raise ArtifactValidationError(
                f"the upload session of {self._uri(key)} holds {stored} bytes with its tail, "
                f"the render wrote {nbytes}; it is not published. A retry renders it again")
        return True

    def promote(self, staging_uri: str, key: str, manifest: dict,
                tail: bytes | None = None) -> tuple[str, str]:
        """A pending session: claim the name, then finalise the session under it with the
        tail (created only if absent). A plain staged object: copied, as before."""
        pending = parse_pending(staging_uri)
        if pending is None:
            return super().promote(staging_uri, key, manifest)
        self._own(staging_uri)
        session_key, session, attempt_id, crc32c = pending
        final = self._key(key)
        if session_key != final:
            cancel(self.client._http, session)
            raise ArtifactValidationError(
                f"the render uploaded {self._uri(session_key)} but publication names the "
                f"artifact {self._uri(final)} (a schema change of the schedule was published "
                "meanwhile); the upload session is cancelled. Render the period again")
        manifest_key = final + ".manifest.json"
        body = _manifest_text(manifest).encode()
        fresh = self._claim(manifest_key, body, manifest["run_key"])
        placed = self._placed_by(final)
        placed_by = placed[0] if placed is not None else None
        if placed_by == attempt_id:
            log.info("artifact %s was already finalised by this attempt", self._uri(final))
        else:
            if placed_by is not None:
                if fresh:
                    self._delete(manifest_key)  # our claim; the object is someone else's
                    raise unowned(self._uri(final))
                log.warning("replacing unrecorded object %s left by an interrupted publication "
                            "of run %s", self._uri(final), manifest["run_key"])
                self._delete(final)
            self._finalise(staging_uri, session, final, attempt_id, crc32c,
                           int(manifest["bytes"]), _tail_of(staging_uri, tail))
        self._put_bytes(manifest_key, body, "application/json")
        return self._uri(final), self._uri(manifest_key)

    def _finalise(self, uri: str, session: str, final: str, attempt_id: str, crc32c: str,
                  total: int, tail: bytes) -> None:
        try:
            finalise(self.client._http, session, sent=total - len(tail), tail=tail,
                     crc32c=crc32c, uri=self._uri(final), max_attempts=self._attempts)
        except PublishError as exc:
            placed = self._placed_by(final)
            if placed is None:
                raise ArtifactValidationError(
                    f"GCS refused to finalise {self._uri(final)}: the bytes it holds are not "
                    f"the render's (CRC32C {crc32c}; {exc}); it is not published. A retry "
                    "renders it again") from exc
            if placed[0] != attempt_id:
                raise PublishError(
                    f"{self._uri(final)} was created by another writer while this publication "
                    "finalised its upload; it is not replaced. A retry of publish sees which "
                    "run owns it") from exc
        blob = self._bucket.get_blob(final, retry=self._retry)
        found = (None, None, None) if blob is None else (
            (blob.metadata or {}).get("attempt"), blob.size, blob.crc32c)
        if found[:2] != (attempt_id, total) or (crc32c and found[2] != crc32c):
            raise ArtifactValidationError(
                f"after finalising its upload session, {self._uri(final)} is {found} "
                f"(attempt, bytes, CRC32C), not ({attempt_id}, {total}, {crc32c}); it is not "
                "published. A retry renders it again")

    def _placed_by(self, key: str) -> tuple[str, int] | None:
        """None when ``key`` is absent, else the attempt that placed it ("" if unknown) and
        its size."""
        blob = self._bucket.get_blob(key, retry=self._retry)
        if blob is None:
            return None
        return (blob.metadata or {}).get("attempt", ""), int(blob.size or 0)

    def delete(self, uri: str) -> None:
        """A pending session is cancelled (never the object: the key is the final name)."""
        pending = parse_pending(uri)
        if pending is None:
            super().delete(uri)
            return
        self._own(uri)
        if cancel(self.client._http, pending[1]):
            log.info("cancelled the upload session of %s (attempt %s)",
                     self._uri(pending[0]), pending[2][:12])

    def exists(self, uri: str) -> bool:
        pending = parse_pending(uri)
        if pending is None:
            return super().exists(uri)
        return status(self.client._http, pending[1], self._attempts)[0] not in GONE

    # --- objects ---------------------------------------------------------------------------

    def _upload(self, key: str, fh: BinaryIO, meta: dict) -> None:
        blob = self._bucket.blob(key)
        blob.metadata = meta or None
        blob.upload_from_file(fh, rewind=True, retry=self._retry)

    def read(self, uri: str):
        if parse_pending(uri) is not None:
            raise StorageError(f"{uri} is an unfinished upload session: it has no object to "
                               "read until it is published")
        # blob.open() is lazy: a missing object would only fail at the first read, as a
        # NotFound from deep inside the client. Look it up first to fail here, clearly.
        blob = self._bucket.get_blob(self._own(uri), retry=self._retry)
        if blob is None:
            raise StorageError(f"object {uri} does not exist")
        return blob.open("rb", retry=self._retry)

    def _sha256_meta(self, key: str) -> str | None:
        blob = self._bucket.get_blob(key, retry=self._retry)
        if blob is None:
            return None
        return (blob.metadata or {}).get("sha256", "")

    def _exists(self, key: str) -> bool:
        return self._bucket.get_blob(key, retry=self._retry) is not None

    def _copy(self, src: str, dst: str, meta: dict) -> None:
        new = self._bucket.copy_blob(self._bucket.blob(src), self._bucket, dst,
                                     retry=self._retry)
        new.metadata = meta
        new.patch(retry=self._retry)

    def _delete(self, key: str) -> None:
        from google.api_core.exceptions import NotFound

        try:
            self._bucket.blob(key).delete(retry=self._retry)
        except NotFound:
            pass

    def _put_bytes(self, key: str, body: bytes, content_type: str) -> None:
        self._bucket.blob(key).upload_from_string(body, content_type=content_type,
                                                  retry=self._retry)

    def _put_if_absent(self, key: str, body: bytes) -> bool:
        from google.api_core.exceptions import PreconditionFailed

        try:
            self._bucket.blob(key).upload_from_string(body, content_type="application/json",
                                                      if_generation_match=0, retry=self._retry)
        except PreconditionFailed:
            return False
        return True

    def _get_bytes(self, key: str) -> bytes | None:
        blob = self._bucket.get_blob(key, retry=self._retry)
        return None if blob is None else blob.download_as_bytes(retry=self._retry)


def _tail_of(uri: str, tail: bytes | None) -> bytes:
    if tail is None:
        raise ArtifactValidationError(
            f"the attempt of {uri} recorded no tail (the bytes after its last full 256 KiB), "
            "so its upload session cannot be finalised; it is not published. A retry renders "
            "it again")
    return tail


def _manifest_text(manifest: dict) -> str:
    import json

    return json.dumps(manifest, indent=2, sort_keys=True) + "\n"
