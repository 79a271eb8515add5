"""S3 (or S3-compatible) destination through boto3.

Connection forms (``AIRFLOW_CONN_<ID>``)::

    aws://AKIA...:SECRET@/?region_name=eu-west-1
    aws://AKIA...:SECRET@/?endpoint_url=http%3A%2F%2F127.0.0.1%3A9000&region_name=us-east-1
    {"conn_type": "aws", "login": "AKIA...", "password": "SECRET",
     "extra": {"region_name": "eu-west-1", "endpoint_url": "https://minio.example:9000"}}

``login``/``password`` are the access key id and secret (``extra.aws_access_key_id`` /
``aws_secret_access_key`` / ``aws_session_token`` are honoured too). Without a key the default
AWS credential chain applies (instance role, IRSA), which keeps keys out of config entirely.

The object key is ``prefix/<artifact name>``; its user metadata carries ``sha256``. A
``head_object`` first acknowledges an object that already holds the same size and sha256
(the "stored, but the response was lost" case) without uploading again. The write itself is
conditional (``If-None-Match: *``): an object another writer put under the key after
that check is never replaced — the same bytes are acknowledged, other bytes are a conflict
(a multipart upload carries the precondition on its completion). ``ChecksumSHA256`` on a
single upload makes S3 verify the body it stored against the artifact's hash.

An artifact in an S3 artifact store this connection reaches with the same credentials is
copied server-side (ADR 0031: S3 computes the copy's SHA-256); any other store's artifact is
streamed from the store, never through a local file.
"""

from __future__ import annotations

import base64
import hashlib
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from export_lib.config.destinations import S3Destination
from export_lib.delivery.artifact import DeliverableArtifact
from export_lib.delivery.transports.base import (
    DeliveryContext,
    Transport,
    auth_failure,
    conflict,
    join_key,
    network_failure,
    resolve_connection,
)
from export_lib.errors import DeliveryError
from export_lib.logfmt import get_logger
from export_lib.source.connections import ConnectionResolver

if TYPE_CHECKING:
    from botocore.exceptions import ClientError

    from export_lib.source.connections import Connection

log = get_logger(__name__)

SINGLE_PUT_LIMIT = 5 * 1024**3  # S3's maximum PutObject size
PART_SIZE = 64 * 1024 * 1024
STREAM_PART = 5 * 1024 * 1024  # a store's stream: one part held at a time (S3's minimum)
COPY_PART = 1024 * 1024 * 1024  # server-side copy ranges (S3's maximum part: 5 GiB)
_AUTH_CODES = {
    "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "ExpiredToken",
    "InvalidToken", "InvalidClientTokenId", "UnrecognizedClientException", "403", "401",
}
_RETRY_CODES = {"SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "Throttling"}


class S3Transport(Transport):
    kind = "s3"
    can_withdraw = True

    def __init__(self, destination: S3Destination, *,
                 resolver: ConnectionResolver | None = None) -> None:
        self.destination = destination
        self._resolver = resolver
        self._client: Any = None
        self._conn = None

    def target(self, artifact: DeliverableArtifact) -> str:
        return f"s3://{self.destination.bucket}/{join_key(self.destination.prefix, artifact.name)}"

    def __enter__(self) -> S3Transport:
        from export_lib.storage.clients import s3_client

        conn = resolve_connection(self.destination.conn_id, self.destination.id,
                                  self._resolver)
        self._conn = conn
        self._client = s3_client(conn)  # EXPORT_OBJECT_STORE_MAX_ATTEMPTS tries a call
        return self

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def find_existing(self, artifact: DeliverableArtifact, ctx: DeliveryContext) -> str | None:
        key = join_key(self.destination.prefix, artifact.name)
        try:
            head = self._call("head_object", Bucket=self.destination.bucket, Key=key)
        except _NotFound:
            return None
        found = (head.get("Metadata") or {}).get("sha256")
        size = head.get("ContentLength")
        if found != artifact.sha256 or size != artifact.bytes:
            raise conflict(self.target(artifact), f"{size} bytes, sha256 {found}",
                           f"{artifact.bytes} bytes, sha256 {artifact.sha256}")
        return f"present etag={head.get('ETag', '').strip(chr(34))}"

    def send(self, artifact: DeliverableArtifact, ctx: DeliveryContext) -> str:
        key = join_key(self.destination.prefix, artifact.name)
        metadata = {"sha256": artifact.sha256, "delivery-id": ctx.delivery_id,
                    "run-key": quote(ctx.run_key, safe="/:=@-_.")}
        try:
            if self._copyable(artifact):
                return self._copy(artifact, key, metadata)
            if artifact.bytes > (STREAM_PART if artifact.stored is not None else SINGLE_PUT_LIMIT):
                return self._send_multipart(artifact, key, metadata)
            return self._put(artifact, key, metadata)
        except _Exists:
            # Written between find_existing and now (another attempt, another tool): ours if
            # it holds the same bytes, else a conflict; it is never overwritten.
            found = self.find_existing(artifact, ctx)
            if found is None:  # deleted again meanwhile: the retry decides
                raise DeliveryError(f"{self.target(artifact)} changed while it was written; "
                                    "the delivery will retry", retryable=True) from None
            return f"{found} (written concurrently)"

    def _copyable(self, artifact: DeliverableArtifact) -> bool:
        """The artifact is in S3 and this connection is the artifact store's (same endpoint
        and credentials): S3 copies it, no byte passes through this process."""
        from export_lib.storage.objects import same_account

        stored = artifact.stored
        return (stored is not None and stored.scheme == "s3" and self._conn is not None
                and same_account(stored.conn, self._conn))

    def _copy(self, artifact: DeliverableArtifact, key: str, metadata: dict[str, str]) -> str:
        """Server-side copy, create-only (``If-None-Match: *``). S3 computes the copy's
        SHA-256 (``ChecksumAlgorithm``); one that differs from the artifact's is deleted."""
        assert artifact.stored is not None
        source = {"Bucket": artifact.stored.bucket, "Key": artifact.stored.key}
        if artifact.bytes > SINGLE_PUT_LIMIT:
            return self._copy_multipart(artifact, key, metadata, source)
        response = self._call("copy_object", Bucket=self.destination.bucket, Key=key,
                              CopySource=source, Metadata=metadata, MetadataDirective="REPLACE",
                              ChecksumAlgorithm="SHA256", IfNoneMatch="*")
        result = response.get("CopyObjectResult", {})
        found = result.get("ChecksumSHA256")
        if found and found != _b64(artifact.sha256):
            self._call("delete_object", Bucket=self.destination.bucket, Key=key)
            raise DeliveryError(f"{self.target(artifact)}: S3 computed SHA-256 {found} for the "
                                f"copy of {artifact.stored.uri}, the manifest says "
                                f"{_b64(artifact.sha256)}; the copy is deleted, the delivery "
                                "retries", retryable=True)
        receipt = f"etag={result.get('ETag', '').strip(chr(34))} copied from {artifact.stored.uri}"
        return receipt + (" sha256 verified by S3" if found else "")

    def _copy_multipart(self, artifact: DeliverableArtifact, key: str,
                        metadata: dict[str, str], source: dict[str, str]) -> str:
        """Above S3's single-copy limit: ``UploadPartCopy`` ranges, completed create-only."""
        bucket = self.destination.bucket
        upload_id = self._call("create_multipart_upload", Bucket=bucket, Key=key,
                               Metadata=metadata)["UploadId"]
        try:
            parts = []
            for number, start in enumerate(range(0, artifact.bytes, COPY_PART), start=1):
                end = min(start + COPY_PART, artifact.bytes) - 1
                answer = self._call("upload_part_copy", Bucket=bucket, Key=key,
                                    UploadId=upload_id, PartNumber=number, CopySource=source,
                                    CopySourceRange=f"bytes={start}-{end}")
                parts.append({"ETag": answer["CopyPartResult"]["ETag"], "PartNumber": number})
            self._call("complete_multipart_upload", Bucket=bucket, Key=key, UploadId=upload_id,
                       MultipartUpload={"Parts": parts}, IfNoneMatch="*")
        except BaseException:
            self._abort(key, upload_id)
            raise
        return f"multipart copy from {artifact.stored.uri if artifact.stored else '-'}"

    def _put(self, artifact: DeliverableArtifact, key: str, metadata: dict[str, str]) -> str:
        checksum = _b64(artifact.sha256)
        with artifact.open() as stream:
            # A store's stream is read whole here: at most STREAM_PART bytes (send() sends a
            # larger one in parts); a local file is passed as it is.
            body = stream if artifact.stored is None else stream.read()
            response = self._call(
                "put_object",
                Bucket=self.destination.bucket,
                Key=key,
                Body=body,
                ContentLength=artifact.bytes,
                ChecksumSHA256=checksum,
                Metadata=metadata,
                IfNoneMatch="*",  # create only: never replace what another writer put there
            )
        receipt = f"etag={response.get('ETag', '').strip(chr(34))}"
        if response.get("VersionId"):
            receipt += f" version_id={response['VersionId']}"
        return receipt

    def withdraw(self, name: str) -> str:
        key = join_key(self.destination.prefix, name)
        self._call("delete_object", Bucket=self.destination.bucket, Key=key)
        return f"deleted s3://{self.destination.bucket}/{key}"

    def _send_multipart(self, artifact: DeliverableArtifact, key: str,
                        metadata: dict[str, str]) -> str:
        """Above S3's single-PUT limit (or a store's stream above ``STREAM_PART``): a multipart
        upload, parts streamed (one part held at a time), each with its ``ChecksumSHA256`` for
        S3 to verify, completed with ``If-None-Match: *`` (boto3's managed transfer cannot pass
        that on) only once the sha256 of everything sent equals the artifact's.

        The object only becomes visible when the upload completes, so there is still never a
        partial object under the key; a failed or refused upload is aborted (no billed parts
        left behind).
        """
        bucket = self.destination.bucket
        size = PART_SIZE if artifact.stored is None else STREAM_PART
        upload_id = self._call("create_multipart_upload", Bucket=bucket, Key=key,
                               Metadata=metadata, ChecksumAlgorithm="SHA256")["UploadId"]
        try:
            parts, whole = [], hashlib.sha256()
            with artifact.open() as body:
                while chunk := _read_full(body, size):
                    whole.update(chunk)
                    number = len(parts) + 1
                    checksum = base64.b64encode(hashlib.sha256(chunk).digest()).decode()
                    answer = self._call("upload_part", Bucket=bucket, Key=key,
                                        UploadId=upload_id, PartNumber=number, Body=chunk,
                                        ChecksumSHA256=checksum)
                    parts.append({"ETag": answer["ETag"], "PartNumber": number,
                                  "ChecksumSHA256": checksum})
                    del chunk
            if whole.hexdigest() != artifact.sha256:
                raise DeliveryError(f"{self.target(artifact)}: the bytes read have sha256 "
                                    f"{whole.hexdigest()}, the manifest says {artifact.sha256}; "
                                    "not completed, the delivery retries", retryable=True)
            self._call("complete_multipart_upload", Bucket=bucket, Key=key, UploadId=upload_id,
                       MultipartUpload={"Parts": parts}, IfNoneMatch="*")
        except BaseException:
            self._abort(key, upload_id)
            raise
        head = self._call("head_object", Bucket=bucket, Key=key)
        return f"etag={head.get('ETag', '').strip(chr(34))} multipart size={head['ContentLength']}"

    def _abort(self, key: str, upload_id: str) -> None:
        try:
            self._client.abort_multipart_upload(Bucket=self.destination.bucket, Key=key,
                                                UploadId=upload_id)
        except Exception as exc:  # noqa: BLE001 - the upload's own error is the one to raise
            log.warning("connection %r: could not abort multipart upload %s of %s (%s); "
                        "a bucket lifecycle rule for incomplete uploads removes it",
                        self.destination.conn_id, upload_id[:12], key, type(exc).__name__)

    def _call(self, operation: str, **kwargs: Any) -> Any:
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        assert self._conn is not None, "use the transport as a context manager"
        try:
            return getattr(self._client, operation)(**kwargs)
        except ClientError as exc:
            raise _classify(self._conn, operation, exc, kwargs) from exc
        except Boto3Error as exc:  # the managed transfer wraps the ClientError that failed it
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, ClientError):
                raise _classify(self._conn, operation, cause, kwargs) from exc
            raise network_failure(self._conn, exc) from exc
        except NoCredentialsError as exc:
            raise auth_failure(self._conn, "no credentials found") from exc
        except (BotoCoreError, OSError) as exc:  # endpoint unreachable, read timeout, reset
            raise network_failure(self._conn, exc) from exc


def _b64(sha256_hex: str) -> str:
    return base64.b64encode(bytes.fromhex(sha256_hex)).decode()


def _read_full(stream: Any, size: int) -> bytearray:
    """Up to ``size`` bytes (fewer only at the end; a network stream returns short reads),
    read into one buffer: the part is held once."""
    buf = bytearray(size)
    view, filled = memoryview(buf), 0
    while filled < size and (got := stream.readinto(view[filled:])):
        filled += got
    view.release()
    del buf[filled:]
    return buf


class _NotFound(Exception):  # noqa: N818 - private control flow, never escapes this module
    """head_object said 404: the object is absent."""


class _Exists(Exception):  # noqa: N818 - private control flow, never escapes this module
    """A conditional put found the key taken (412 PreconditionFailed, or 409 when a
    concurrent conditional write is in flight)."""


_TAKEN_CODES = {"PreconditionFailed", "412", "ConditionalRequestConflict"}


def _classify(conn: Connection, operation: str, exc: ClientError, kwargs: dict[str, Any]
              ) -> Exception:
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    if operation == "head_object" and (status == 404 or code in {"404", "NoSuchKey"}):
        return _NotFound()
    if kwargs.get("IfNoneMatch") and (code in _TAKEN_CODES or status == 412):
        return _Exists()
    if code == "NoSuchBucket":
        return DeliveryError(
            f"bucket {kwargs.get('Bucket')!r} does not exist (connection {conn.conn_id!r}); "
            "create it or fix the destination's bucket"
        )
    if code in _AUTH_CODES or status in (401, 403):
        return auth_failure(conn, f"S3 {operation} answered {status} {code}")
    retryable = code in _RETRY_CODES or status >= 500 or status in (408, 429)
    return DeliveryError(
        f"S3 {operation} on s3://{kwargs.get('Bucket')}/{kwargs.get('Key')} via connection "
        f"{conn.conn_id!r} failed: {status} {code} {error.get('Message', '')}".rstrip(),
        retryable=retryable,
    )
