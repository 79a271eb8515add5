"""Google Cloud Storage destination through google-cloud-storage.

Connection forms (``AIRFLOW_CONN_<ID>``)::

    google-cloud-platform://?project=acme-exports&key_path=%2Fsecrets%2Fsa.json
    google-cloud-platform://?project=test&endpoint=http%3A%2F%2F127.0.0.1%3A9023
    {"conn_type": "google_cloud_platform",
     "extra": {"project": "acme-exports", "keyfile_dict": {...service account json...}}}

``key_path`` / ``keyfile_dict`` name a service account (Airflow's
``extra__google_cloud_platform__`` prefixed spellings are accepted); with neither, Application
Default Credentials apply. ``endpoint`` points at an emulator and uses anonymous credentials.

The object is ``prefix/<artifact name>`` with metadata ``sha256``; an existing object with the
same size and sha256 is acknowledged without uploading. Uploads use ``if_generation_match=0``
(create-only), so two racing attempts cannot both write.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import quote

from export_lib.config.destinations import GcsDestination
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
from export_lib.source.connections import Connection, ConnectionResolver
from export_lib.storage.clients import gcs_client, gcs_retry

if TYPE_CHECKING:
    from google.cloud.storage import Blob, Bucket

T = TypeVar("T")
# A multiple of 256 KiB, as the resumable protocol requires. The client holds about two
# chunks (the one read, the request's copy): 8 MiB of heap whatever the file's size, where
# 8 MiB chunks held 16 MiB and 2 MiB chunks took twice the requests of these.
UPLOAD_CHUNK = 4 * 1024 * 1024


class GcsTransport(Transport):
    kind = "gcs"
    can_withdraw = True

    def __init__(self, destination: GcsDestination, *,
                 resolver: ConnectionResolver | None = None) -> None:
        self.destination = destination
        self._resolver = resolver
        self._conn: Connection | None = None
        self._bucket: Bucket | None = None

    def target(self, artifact: DeliverableArtifact) -> str:
        return f"gs://{self.destination.bucket}/{join_key(self.destination.prefix, artifact.name)}"

    def __enter__(self) -> GcsTransport:
        self._conn = resolve_connection(self.destination.conn_id, self.destination.id,
                                  self._resolver)
        client = self._guard(lambda: gcs_client(self._conn))
        self._bucket = client.bucket(self.destination.bucket)
        return self

    def find_existing(self, artifact: DeliverableArtifact, ctx: DeliveryContext) -> str | None:
        key = join_key(self.destination.prefix, artifact.name)
        blob = self._guard(lambda: self._bucket.get_blob(key, timeout=30, retry=gcs_retry()))
        if blob is None:
            return None
        found = (blob.metadata or {}).get("sha256")
        if found != artifact.sha256 or blob.size != artifact.bytes:
            raise conflict(self.target(artifact), f"{blob.size} bytes, sha256 {found}",
                           f"{artifact.bytes} bytes, sha256 {artifact.sha256}")
        return f"present generation={blob.generation}"

    def send(self, artifact: DeliverableArtifact, ctx: DeliveryContext) -> str:
        blob = self._bucket.blob(join_key(self.destination.prefix, artifact.name))
        blob.chunk_size = UPLOAD_CHUNK  # resumable upload in chunks: memory stays bounded
        blob.metadata = {"sha256": artifact.sha256, "delivery-id": ctx.delivery_id,
                         "run-key": quote(ctx.run_key, safe="/:=@-_.")}
        if self._copyable(artifact):
            return self._copy(artifact, blob, ctx)
        with artifact.open() as stream:
            # Streamed in UPLOAD_CHUNK pieces from where the artifact lives: never loaded.
            self._guard(lambda: blob.upload_from_file(
                stream, size=artifact.bytes, rewind=False, if_generation_match=0, timeout=120,
                retry=gcs_retry()))
        return f"generation={blob.generation} size={blob.size}"

    def _copyable(self, artifact: DeliverableArtifact) -> bool:
        """The artifact is in GCS and this connection is the artifact store's: GCS copies it
        (a rewrite inside the service), no byte passes through this process."""
        from export_lib.storage.objects import same_account

        stored = artifact.stored
        return (stored is not None and stored.scheme == "gs" and self._conn is not None
                and same_account(stored.conn, self._conn))

    def _copy(self, artifact: DeliverableArtifact, blob: Blob, ctx: DeliveryContext) -> str:
        assert artifact.stored is not None and self._bucket is not None
        source = self._bucket.client.bucket(artifact.stored.bucket).blob(artifact.stored.key)
        # The destination's metadata (sha256, delivery id) goes with the rewrite request, so
        # the copy appears whole with it; create-only like an upload.
        token: str | None = None
        while True:  # a large object takes several rewrite calls, each resuming with a token
            token, _, total = self._guard(functools.partial(
                blob.rewrite, source, token=token, if_generation_match=0, timeout=120,
                retry=gcs_retry()))
            if token is None:
                break
        wanted = {"sha256": artifact.sha256, "delivery-id": ctx.delivery_id,
                  "run-key": quote(ctx.run_key, safe="/:=@-_.")}
        if (blob.metadata or {}).get("sha256") != artifact.sha256:
            # GCS applies the request's metadata to the copy; an emulator that does not gets
            # it patched on (find_existing recognises a delivered object by it).
            blob.metadata = wanted
            self._guard(lambda: blob.patch(timeout=30, retry=gcs_retry()))
        if total != artifact.bytes:
            raise DeliveryError(f"{self.target(artifact)}: the copy holds {total} bytes, the "
                                f"manifest says {artifact.bytes}", retryable=True)
        return f"generation={blob.generation} size={total} copied from {artifact.stored.uri}"

    def withdraw(self, name: str) -> str:
        key = join_key(self.destination.prefix, name)
        blob = self._guard(lambda: self._bucket.get_blob(key, timeout=30, retry=gcs_retry()))
        if blob is None:
            return f"gs://{self.destination.bucket}/{key} was gone"
        self._guard(lambda: blob.delete(timeout=30, retry=gcs_retry()))
        return f"deleted gs://{self.destination.bucket}/{key}"

    def _guard(self, call: Callable[[], T]) -> T:
        """Run a client call, turning google/requests errors into classified DeliveryErrors."""
        from google.api_core import exceptions as gexc
        from google.auth.exceptions import GoogleAuthError
        from requests import exceptions as rexc

        assert self._conn is not None
        try:
            return call()
        except (gexc.Unauthorized, gexc.Forbidden, GoogleAuthError) as exc:
            raise auth_failure(self._conn, f"GCS: {exc}") from exc
        except gexc.NotFound as exc:
            raise DeliveryError(
                f"bucket {self.destination.bucket!r} not found via connection "
                f"{self._conn.conn_id!r}; create it or fix the destination's bucket"
            ) from exc
        except gexc.PreconditionFailed as exc:  # a racing attempt created it first
            raise DeliveryError(f"GCS object appeared during upload ({exc}); the next attempt "
                                "verifies it", retryable=True) from exc
        except (gexc.TooManyRequests, gexc.ServerError, gexc.RequestRangeNotSatisfiable) as exc:
            raise network_failure(self._conn, exc) from exc
        except gexc.GoogleAPICallError as exc:
            raise DeliveryError(f"GCS via connection {self._conn.conn_id!r}: {exc}") from exc
        except gexc.RetryError as exc:  # the client's retries (gcs_retry) ran out: retry later
            raise network_failure(self._conn, exc) from exc
        except (rexc.ConnectionError, rexc.Timeout, OSError) as exc:
            raise network_failure(self._conn, exc) from exc
