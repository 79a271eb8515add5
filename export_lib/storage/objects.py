"""A published artifact in an object store, as delivery sees it: a stream, or a copy source.

Delivery never downloads an artifact to local disk (ADR 0031): a destination on the same
object store account copies it server-side (:attr:`StoredObject.conn` tells which account),
every other destination reads :meth:`StoredObject.open`, a bounded stream (reads of at most
1 MiB of the store's response body: a GCS destination's resumable upload then sends 1 MiB
chunks). :attr:`bytes_read` counts what was streamed, so a server-side
copy is visible as 0.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

from export_lib.errors import StorageError
from export_lib.source.connections import Connection

READ_CHUNK = 1024 * 1024


class StoredObject:
    """``scheme://bucket/key`` read through ``client`` (the store's S3 or GCS client)."""

    def __init__(self, scheme: str, bucket: str, key: str, conn: Connection, client: Any) -> None:
        self.scheme, self.bucket, self.key = scheme, bucket, key
        self.conn, self.client = conn, client
        self.bytes_read = 0

    @property
    def uri(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.key}"

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """The store's errors once its client's own retries are spent (503 SlowDown, 500, a
        reset connection; google's RetryError) as a retryable StorageError naming the object:
        the delivery is retried later, never failed for good by a busy store."""
        try:
            yield
        except StorageError:
            raise
        except Exception as exc:
            if not _transient(exc):
                raise
            raise StorageError(f"cannot read {self.uri} (via connection {self.conn.conn_id!r}):"
                               f" {type(exc).__name__}: {self.conn.scrub(exc)}; the store "
                               "answered an error past EXPORT_OBJECT_STORE_MAX_ATTEMPTS tries"
                               ) from exc

    def open(self) -> BinaryIO:
        """A forward-only binary stream of the object (bounded memory, no local copy)."""
        with self._reading():
            return self._open()

    def _open(self) -> BinaryIO:
        if self.scheme == "s3":
            try:
                body = self.client.get_object(Bucket=self.bucket, Key=self.key)["Body"]
            except self.client.exceptions.NoSuchKey as exc:
                raise StorageError(f"object {self.uri} does not exist") from exc
            raw: Any = body
        else:
            from export_lib.storage.clients import gcs_retry

            blob = self.client.bucket(self.bucket).get_blob(self.key, retry=gcs_retry())
            if blob is None:
                raise StorageError(f"object {self.uri} does not exist")
            raw = blob.open("rb", chunk_size=READ_CHUNK, retry=gcs_retry())
        return _Counting(raw, self)

    def size(self) -> int | None:
        """The stored size in bytes; None when the object is gone."""
        if self.scheme == "s3":
            from botocore.exceptions import ClientError

            try:
                with self._reading():
                    return self.client.head_object(Bucket=self.bucket,
                                                   Key=self.key)["ContentLength"]
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                    return None
                raise StorageError(f"cannot read {self.uri}: {exc}") from exc
        from export_lib.storage.clients import gcs_retry

        with self._reading():
            blob = self.client.bucket(self.bucket).get_blob(self.key, retry=gcs_retry())
        return None if blob is None else blob.size


def _transient(exc: BaseException) -> bool:
    """A server error, throttling or a broken connection: S3's (botocore) or GCS's."""
    name = type(exc).__name__
    if name in ("RetryError", "ServiceUnavailable", "InternalServerError", "TooManyRequests",
                "BadGateway", "GatewayTimeout", "EndpointConnectionError",
                "ConnectionClosedError", "ReadTimeoutError", "ConnectTimeoutError",
                "ConnectionError", "ChunkedEncodingError", "ProtocolError"):
        return True
    response = getattr(exc, "response", None)
    status = (response.get("ResponseMetadata", {}).get("HTTPStatusCode")
              if isinstance(response, dict) else None)
    return (status is not None and status >= 500) or isinstance(exc, OSError)


def same_account(a: Connection, b: Connection) -> bool:
    """Whether two connections reach the same store with the same credentials (one
    connection id, or the same endpoint, keys and extras under two ids): then one can copy
    what the other can read, server-side."""
    return a.conn_id == b.conn_id or dataclasses.replace(a, conn_id=b.conn_id) == b


class _Counting(io.RawIOBase):
    """The store's body, read in pieces of at most ``READ_CHUNK``, counted."""

    def __init__(self, raw: Any, owner: StoredObject) -> None:
        self._raw, self._owner = raw, owner
        self._position = 0

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        # Forward-only: an uploader may "seek" to where it already is (GCS's resumable
        # upload does after each chunk); going back would mean reading the store again.
        target = {io.SEEK_SET: offset, io.SEEK_CUR: self._position + offset}.get(whence)
        if target != self._position:
            raise io.UnsupportedOperation(f"{self._owner.uri} is streamed forward only")
        return self._position

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:  # all of it (an e-mail attachment, bounded by its limit)
            return b"".join(iter(lambda: self.read(READ_CHUNK), b""))
        # min(size, READ_CHUNK) bytes unless the object ends: whole pieces of 1 MiB (a
        # multiple of 256 KiB, which a GCS resumable upload needs of every chunk but the last),
        # whatever sizes the network returns.
        want = min(size, READ_CHUNK)
        data = self._raw.read(want)
        while data and len(data) < want and (more := self._raw.read(want - len(data))):
            data += more
        self._owner.bytes_read += len(data)
        self._position += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()
