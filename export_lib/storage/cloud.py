"""The S3 artifact store, and what it shares with GCS's (same contract as ``LocalStore``).

On S3 the render writes its bytes once, straight to the artifact's final key: a multipart
upload (:mod:`export_lib.storage.multipart`) that publication completes with
``If-None-Match: *`` after claiming the key (:meth:`S3Store.promote`); nothing is copied and no
staging object is ever listed. GCS does the same with a resumable upload session
(:mod:`export_lib.storage.gcs_store`, :mod:`export_lib.storage.resumable`).

An attempt staged by an older release (and any store without a direct path) has a staging
object, uploaded from a disk-spooled temp file (memory stays bounded) under
``<prefix>/.staging/<attempt>.<ext>``; promotion is a server-side copy to the immutable final
key — an object store makes a copied object visible whole or not at all — followed by deleting
the staging object. The sha256 travels as object metadata so a re-publication of identical
content is recognised without downloading it.

Connections (``EXPORT_ARTIFACT_CONN``, default ``aws_default`` / ``google_cloud_default``):
``aws://KEY:SECRET@/?endpoint_url=http%3A%2F%2Fhost%3A9000&region_name=us-east-1`` and
``google-cloud-platform://?endpoint=http%3A%2F%2Fhost%3A9023&project=p`` (an endpoint means an
emulator: anonymous credentials).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

from export_lib.errors import ArtifactValidationError, StorageError
from export_lib.logfmt import get_logger
from export_lib.source.connections import Connection
from export_lib.storage.clients import s3_client
from export_lib.storage.multipart import (
    PartWriter,
    abort_others,
    abort_upload,
    complete_upload,
    parse_pending,
    uploaded_parts,
)
from export_lib.storage.objects import StoredObject
from export_lib.storage.ownership import check_owner, owner_of, unowned

log = get_logger(__name__)
SPOOL_BYTES = 8 * 1024 * 1024


def _split(uri: str, scheme: str) -> tuple[str, str]:
    parts = urlsplit(uri)
    if parts.scheme != scheme or not parts.netloc:
        raise StorageError(f"{uri} is not a {scheme}://bucket/key URI")
    return parts.netloc, parts.path.lstrip("/")


class _BucketStore:
    scheme = ""

    def __init__(self, bucket: str, prefix: str = "") -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")

    def _own(self, uri: str) -> str:
        """The key of ``uri``, refusing objects of another bucket (never touch what a
        differently configured store wrote)."""
        bucket, key = _split(uri, self.scheme)
        if bucket != self.bucket:
            raise StorageError(f"{uri} belongs to bucket {bucket}, not to this store's bucket "
                               f"{self.bucket}; check EXPORT_ARTIFACT_ROOT")
        return key

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _uri(self, key: str) -> str:
        return f"{self.scheme}://{self.bucket}/{key}"

    def staging_uri(self, attempt_id: str, ext: str) -> str:
        return self._uri(self._key(f".staging/{attempt_id}.{ext}"))

    @contextmanager
    def open_staging(self, uri: str) -> Iterator[BinaryIO]:
        from export_lib.storage.space import guard_space

        key = self._own(uri)
        spool_dir = Path(tempfile.gettempdir())
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
            # A full temp volume once the spool rolled over to disk: StorageFull naming it
            # (the spool file is unlinked already; nothing was uploaded).
            with guard_space(spool_dir, spool.tell, setting="TMPDIR", cleanup=lambda: None,
                             what=f"the spool file of {uri} in {spool_dir}"):
                yield spool
                spool.seek(0)
            self._upload(key, spool, {})

    def local_path(self, uri: str) -> Path | None:
        return None

    def stored(self, uri: str) -> StoredObject:
        """A published object, for delivery to stream or copy (never downloaded to disk)."""
        return StoredObject(self.scheme, self.bucket, self._own(uri), self.conn, self.client)

    def promote(self, staging_uri: str, key: str, manifest: dict) -> tuple[str, str]:
        """Claim the key (manifest created only if absent), then copy the object; a key
        another run owns is refused (see :mod:`export_lib.storage.stores`)."""
        src = self._own(staging_uri)
        final = self._key(key)
        manifest_key = final + ".manifest.json"
        body = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
        fresh = self._claim(manifest_key, body, manifest["run_key"])
        existing = self._sha256_meta(final)
        if fresh and existing is not None and existing != manifest["sha256"]:
            self._delete(manifest_key)  # our claim; the object is someone else's
            raise unowned(self._uri(final))
        if existing == manifest["sha256"]:
            log.info("artifact %s already holds this content", self._uri(final))
        else:
            if existing is not None:
                log.warning("replacing unrecorded object %s left by an interrupted publication "
                            "of run %s", self._uri(final), manifest["run_key"])
            self._copy(src, final, {"sha256": manifest["sha256"]})
        self._delete(src)
        self._put_bytes(manifest_key, body, "application/json")
        return self._uri(final), self._uri(manifest_key)

    def _claim(self, manifest_key: str, body: bytes, run_key: str) -> bool:
        """Create the manifest if absent (True) or confirm this run owns it (False).

        Checked first, then written conditionally: the conditional write closes the race
        (``If-None-Match: *`` on S3, ``ifGenerationMatch=0`` on GCS).
        """
        current = self._get_bytes(manifest_key)
        if current is None and self._put_if_absent(manifest_key, body):
            return True
        current = self._get_bytes(manifest_key) if current is None else current
        check_owner(self._uri(manifest_key), owner_of(current or b""), run_key)
        return False

    def delete(self, uri: str) -> None:
        self._delete(self._own(uri))

    def exists(self, uri: str) -> bool:
        return self._exists(self._own(uri))


class S3Store(_BucketStore):
    scheme = "s3"

    def __init__(self, bucket: str, prefix: str, conn: Connection) -> None:
        super().__init__(bucket, prefix)
        self.client = s3_client(conn)
        self.conn = conn

    def _upload(self, key: str, fh: BinaryIO, meta: dict) -> None:
        self.client.upload_fileobj(fh, self.bucket, key, ExtraArgs={"Metadata": meta})

    @contextmanager
    def open_direct(self, key_of: Callable[[], str], *, attempt_id: str,
                    on_started: Callable[[str], None]) -> Iterator[PartWriter]:
        """A writer whose bytes become a multipart upload to ``<prefix>/<key_of()>``, left
        pending for :meth:`promote` to complete; aborted when the block fails."""
        writer = PartWriter(self.client, self.bucket, lambda: self._key(key_of()),
                            attempt_id=attempt_id, on_started=on_started)
        try:
            yield writer
            writer.finish()
        except BaseException:
            writer.abort()
            raise

    def verify_staged(self, uri: str, nbytes: int) -> bool:
        """A pending upload's stored parts add up to ``nbytes`` (S3 checked each part's
        CRC32 when it stored it): True. False for a plain object (the caller reads it)."""
        pending = parse_pending(uri)
        if pending is None:
            return False
        key, upload_id, attempt_id = pending
        placed = self._placed_by(key)
        if placed is not None and placed[0] == attempt_id:
            # Completed by this attempt's publication, whose ledger commit was lost: a retry.
            stored = placed[1]
        else:
            stored = sum(p["Size"] for p in self._parts(uri, key, upload_id))
        if stored != nbytes:
            raise ArtifactValidationError(
                f"the upload of {self._uri(key)} holds {stored} bytes, the render wrote "
                f"{nbytes}; it is not published. A retry renders it again")
        return True

    def _parts(self, uri: str, key: str, upload_id: str) -> list[dict]:
        return uploaded_parts(self.client, self.bucket, key, upload_id, uri=uri,
                              via=self.conn.masked_uri())

    def promote(self, staging_uri: str, key: str, manifest: dict) -> tuple[str, str]:
        """A pending upload: claim the key, then complete the upload under it with
        ``If-None-Match: *`` (the write that makes it visible, whole). A plain staged object:
        copied, as before."""
        pending = parse_pending(staging_uri)
        if pending is None:
            return super().promote(staging_uri, key, manifest)
        self._own(staging_uri)
        upload_key, upload_id, attempt_id = pending
        final = self._key(key)
        if upload_key != final:
            abort_upload(self.client, self.bucket, upload_key, upload_id)
            raise ArtifactValidationError(
                f"the render uploaded {self._uri(upload_key)} but publication names the "
                f"artifact {self._uri(final)} (a schema change of the schedule was published "
                "meanwhile); the upload is aborted. Render the period again")
        manifest_key = final + ".manifest.json"
        body = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
        fresh = self._claim(manifest_key, body, manifest["run_key"])
        placed = self._placed_by(final)
        placed_by = placed[0] if placed is not None else None
        if placed_by == attempt_id:
            log.info("artifact %s was already completed by this attempt", self._uri(final))
        else:
            if placed_by is not None:
                if fresh:
                    self._delete(manifest_key)  # our claim; the object is someone else's
                    raise unowned(self._uri(final))
                log.warning("replacing unrecorded object %s left by an interrupted publication "
                            "of run %s", self._uri(final), manifest["run_key"])
                self._delete(final)
            complete_upload(self.client, self.bucket, final, upload_id, uri=staging_uri,
                            via=self.conn.masked_uri())
        # Publication is fenced: any other upload of this key is a stale attempt's (a worker
        # killed before it recorded its upload leaves one that no attempt names).
        abort_others(self.client, self.bucket, final, keep=upload_id)
        self._put_bytes(manifest_key, body, "application/json")
        return self._uri(final), self._uri(manifest_key)

    def _placed_by(self, key: str) -> tuple[str, int] | None:
        """None when ``key`` is absent, else the attempt that placed it ("" if unknown) and
        its size."""
        from botocore.exceptions import ClientError

        try:
            head = self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise StorageError(f"cannot read {self._uri(key)} via {self.conn.masked_uri()}: "
                               f"{exc}") from exc
        return head.get("Metadata", {}).get("attempt", ""), head["ContentLength"]

    def read(self, uri: str):
        if parse_pending(uri) is not None:
            raise StorageError(f"{uri} is an unfinished upload: it has no object to read "
                               "until it is published")
        key = self._own(uri)
        try:
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
        except self.client.exceptions.NoSuchKey as exc:
            raise StorageError(f"object {uri} does not exist") from exc

    def _sha256_meta(self, key: str) -> str | None:
        from botocore.exceptions import ClientError

        try:
            head = self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise StorageError(f"cannot read {self._uri(key)} via {self.conn.masked_uri()}: {exc}") from exc
        return head.get("Metadata", {}).get("sha256", "")

    def _exists(self, key: str) -> bool:
        return self._sha256_meta(key) is not None

    def exists(self, uri: str) -> bool:
        pending = parse_pending(uri)
        if pending is None:
            return super().exists(uri)
        try:
            self._parts(uri, pending[0], pending[1])
        except ArtifactValidationError:
            return False
        return True

    def _copy(self, src: str, dst: str, meta: dict) -> None:
        self.client.copy({"Bucket": self.bucket, "Key": src}, self.bucket, dst,
                         ExtraArgs={"Metadata": meta, "MetadataDirective": "REPLACE"})

    def _delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=key)

    def delete(self, uri: str) -> None:
        """Delete the object and abort every unfinished multipart upload of its key: a worker
        killed while uploading a staging object (over 8 MB goes up in parts) leaves the parts
        stored, billed and absent from object listings until the upload is aborted."""
        from botocore.exceptions import ClientError

        key = self._own(uri)
        pending = parse_pending(uri)
        if pending is not None:  # never the object: the key is the artifact's final name
            if abort_upload(self.client, self.bucket, pending[0], pending[1]):
                log.info("aborted the unfinished upload %s of %s", pending[1][:12], uri)
            return
        self._delete(key)
        try:
            pages = self.client.get_paginator("list_multipart_uploads").paginate(
                Bucket=self.bucket, Prefix=key)
            for upload in (u for page in pages for u in page.get("Uploads", [])):
                if upload["Key"] == key:
                    self.client.abort_multipart_upload(Bucket=self.bucket, Key=key,
                                                       UploadId=upload["UploadId"])
                    log.info("aborted the unfinished multipart upload %s of %s",
                             upload["UploadId"][:12], uri)
        except ClientError as exc:
            raise StorageError(f"cannot abort the unfinished uploads of {uri} via "
                               f"{self.conn.masked_uri()}: {exc}; the object itself is "
                               "deleted, run `exportctl ledger gc` again") from exc

    def _put_bytes(self, key: str, body: bytes, content_type: str) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType=content_type)

    def _put_if_absent(self, key: str, body: bytes) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body, IfNoneMatch="*",
                                   ContentType="application/json")
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412",
                                                             "ConditionalRequestConflict"):
                return False
            raise
        return True

    def _get_bytes(self, key: str) -> bytes | None:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None
