"""The render's bytes, written once: an S3 multipart upload to the artifact's final key.

:class:`PartWriter` is the raw file the render's :class:`~export_lib.render.sink.HashingSink`
writes into. It cuts the stream into parts of ``part_size`` and uploads them on ``workers``
threads while the render goes on reading the source; at most ``workers + 1`` parts are held
(being uploaded, being filled), so memory stays bounded whatever the artifact's size.

The upload is created lazily, at the first full part (or at the end for a small file): by
then the render has seen the file's schema, which the final key's name may depend on
(``key_of``). It is never completed here. Publication completes it (``CompleteMultipartUpload``
with ``If-None-Match: *``, :meth:`export_lib.storage.cloud.S3Store.promote`): until then no
object exists under the key, so nothing partial is ever listed, and a failed render aborts it.

The upload is named by a *pending upload URI*,
``s3://bucket/<key>?upload=<UploadId>&attempt=<attempt id>``: what
the attempt records as its staging URI, so publication finds the upload and garbage
collection aborts it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from export_lib.errors import ArtifactValidationError, PublishError, StorageError
from export_lib.logfmt import get_logger

log = get_logger(__name__)

PART_SIZE = 16 * 1024 * 1024
WORKERS = 2
HEAD_BYTES = 64 * 1024  # the start of the file, kept for the CSV header check


def pending_uri(bucket: str, key: str, upload_id: str, attempt_id: str) -> str:
    return (f"s3://{bucket}/{key}?upload={quote(upload_id, safe='')}"
            f"&attempt={quote(attempt_id, safe='')}")


def parse_pending(uri: str) -> tuple[str, str, str] | None:
    """(key, upload id, attempt id) of a pending upload URI; None for a plain object URI."""
    parts = urlsplit(uri)
    query = parse_qs(parts.query)
    if "upload" not in query:
        return None
    return parts.path.lstrip("/"), query["upload"][0], query.get("attempt", [""])[0]


class PartWriter:
    """A write-only raw file whose bytes become the parts of one multipart upload.

    ``on_started(uri)`` is called once, right after the upload is created, with its pending
    upload URI (the caller records it, so a killed render's upload can be found and aborted).
    Call :meth:`finish` after the last write (the parts are then all stored), or :meth:`abort`.
    """

    def __init__(self, client: Any, bucket: str, key_of: Callable[[], str], *,
                 attempt_id: str, on_started: Callable[[str], None],
                 part_size: int | None = None, workers: int = WORKERS) -> None:
        self._client = client
        self._bucket = bucket
        self._key_of = key_of
        self._attempt_id = attempt_id
        self._on_started = on_started
        self._part_size = part_size or PART_SIZE
        self._buf = bytearray()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="export-part")
        self._slots = threading.BoundedSemaphore(workers + 1)
        self._futures: list[Future[None]] = []
        self._numbers = 0
        self.key: str | None = None
        self.upload_id: str | None = None
        self.head = b""

    @property
    def uri(self) -> str | None:
        if self.key is None or self.upload_id is None:
            return None
        return pending_uri(self._bucket, self.key, self.upload_id, self._attempt_id)

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data)
        if len(self.head) < HEAD_BYTES:
            self.head += bytes(view[:HEAD_BYTES - len(self.head)])
        self._buf += view
        if len(self._buf) >= self._part_size:
            part = bytes(self._buf)
            self._buf.clear()
            self._submit(part)
        return view.nbytes

    def flush(self) -> None:
        self._raise_failed()

    def finish(self) -> str:
        """Upload what is buffered, wait for every part; the pending upload URI."""
        if self._buf or not self._numbers:  # an upload needs one part, even an empty one
            part = bytes(self._buf)
            self._buf.clear()
            self._submit(part)
        self._pool.shutdown(wait=True)
        self._raise_failed()
        assert self.uri is not None
        return self.uri

    def abort(self) -> None:
        """Stop uploading and abort the upload: its parts are deleted, nothing is listed."""
        self._buf.clear()
        for future in self._futures:
            future.cancel()
        self._pool.shutdown(wait=True)
        if self.upload_id is not None:
            abort_upload(self._client, self._bucket, self.key or "", self.upload_id)

    def _start(self) -> None:
        self.key = self._key_of()
        # CRC32 per part (cheap): S3 checks each part it stores; the sha256 of the whole file
        # is the render's, recorded in the ledger and the manifest.
        self.upload_id = self._client.create_multipart_upload(
            Bucket=self._bucket, Key=self.key, Metadata={"attempt": self._attempt_id},
            ChecksumAlgorithm="CRC32")["UploadId"]
        try:
            self._on_started(self.uri or "")
        except BaseException:
            abort_upload(self._client, self._bucket, self.key, self.upload_id)
            self.upload_id = None
            raise

    def _submit(self, part: bytes) -> None:
        self._raise_failed()
        if self.upload_id is None:
            self._start()
        self._numbers += 1
        self._slots.acquire()  # bounded: at most workers + 1 parts held
        future = self._pool.submit(self._upload, self._numbers, part)
        future.add_done_callback(lambda _: self._slots.release())
        self._futures.append(future)

    def _upload(self, number: int, part: bytes) -> None:
        self._client.upload_part(Bucket=self._bucket, Key=self.key, UploadId=self.upload_id,
                                 PartNumber=number, Body=part, ChecksumAlgorithm="CRC32")

    def _raise_failed(self) -> None:
        for future in self._futures:
            if future.done() and not future.cancelled() and future.exception() is not None:
                raise future.exception()  # type: ignore[misc]


def abort_upload(client: Any, bucket: str, key: str, upload_id: str) -> bool:
    """Abort one upload; False when it was already gone (completed or aborted)."""
    from botocore.exceptions import ClientError

    try:
        client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchUpload", "404"):
            return False
        raise StorageError(f"cannot abort the upload {upload_id[:12]} of s3://{bucket}/{key}: "
                           f"{exc}; a bucket lifecycle rule for incomplete uploads removes it"
                           ) from exc
    return True


def abort_others(client: Any, bucket: str, key: str, *, keep: str) -> None:
    """Abort every unfinished upload of ``key`` but ``keep``; a failure is logged (the
    artifact is published; garbage collection or a lifecycle rule gets them)."""
    try:
        found = client.list_multipart_uploads(Bucket=bucket, Prefix=key).get("Uploads", [])
        for upload in found:
            if upload["Key"] == key and upload["UploadId"] != keep:
                abort_upload(client, bucket, key, upload["UploadId"])
                log.info("aborted the stale upload %s of s3://%s/%s", upload["UploadId"][:12],
                         bucket, key)
    except Exception as exc:  # noqa: BLE001 - never fails a publication that happened
        log.warning("could not abort the stale uploads of s3://%s/%s: %s", bucket, key, exc)


def complete_upload(client: Any, bucket: str, key: str, upload_id: str, *, uri: str,
                    via: str) -> None:
    """Complete the upload with its stored parts, create-only (``If-None-Match: *``)."""
    from botocore.exceptions import ClientError

    parts = [{"PartNumber": p["PartNumber"], "ETag": p["ETag"],
              **({"ChecksumCRC32": p["ChecksumCRC32"]} if p.get("ChecksumCRC32") else {})}
             for p in uploaded_parts(client, bucket, key, upload_id, uri=uri, via=via)]
    try:
        client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id,
                                         MultipartUpload={"Parts": parts}, IfNoneMatch="*")
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412",
                                                         "ConditionalRequestConflict"):
            raise PublishError(
                f"s3://{bucket}/{key} was created by another writer while this publication "
                "completed its upload; it is not replaced. A retry of publish sees which run "
                "owns it") from exc
        raise StorageError(f"cannot complete the upload of s3://{bucket}/{key} via {via}: "
                           f"{exc}") from exc


def uploaded_parts(client: Any, bucket: str, key: str, upload_id: str, *, uri: str,
                   via: str) -> list[dict[str, Any]]:
    """The upload's stored parts, in order (``ListParts`` pages of up to 1,000).
    ArtifactValidationError when the upload is gone (nothing of it can be published)."""
    from botocore.exceptions import ClientError

    parts: list[dict[str, Any]] = []
    try:
        for page in client.get_paginator("list_parts").paginate(Bucket=bucket, Key=key,
                                                                UploadId=upload_id):
            parts.extend(page.get("Parts", []))
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchUpload", "404"):
            raise ArtifactValidationError(
                f"the upload {uri} no longer exists (aborted, or completed by another "
                "publication); it is not published. A retry renders it again") from exc
        raise StorageError(f"cannot list the parts of {uri} via {via}: {exc}") from exc
    return sorted(parts, key=lambda p: p["PartNumber"])
