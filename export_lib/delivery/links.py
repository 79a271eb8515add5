"""Links a recipient can open: time-limited pre-signed URLs for artifacts in S3 or GCS.

A notice (webhook body, e-mail too large to attach) never carries an internal location: a local
path, ``file://`` URI or bare bucket URI means nothing to the receiver and tells them about our
storage. For an artifact in an S3 or GCS artifact store the notice carries a pre-signed HTTPS
``GET`` URL valid for :data:`LINK_TTL`; for any other store it carries no link at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from export_lib.logfmt import get_logger
from export_lib.masking import mask_uri
from export_lib.source.connections import ConnectionResolver

log = get_logger(__name__)

LINK_TTL = timedelta(hours=24)


@dataclass(frozen=True)
class Link:
    url: str
    expires_at: datetime


def shareable_link(uri: str, *, now: datetime, ttl: timedelta = LINK_TTL,
                   resolver: ConnectionResolver | None = None) -> Link | None:
    """A pre-signed URL for the published artifact at ``uri``, or None when none can be made.
    The artifact store's connection (``EXPORT_ARTIFACT_CONN``) resolves through ``resolver``
    (the environment when None), as in :func:`export_lib.storage.stores.open_store`."""
    parts = urlsplit(uri)
    if parts.scheme not in ("s3", "gs") or not parts.netloc:
        return None
    from export_lib import settings
    from export_lib.source.connections import resolve
    from export_lib.storage.clients import gcs_client, s3_client

    default = "aws_default" if parts.scheme == "s3" else "google_cloud_default"
    bucket, key = parts.netloc, parts.path.lstrip("/")
    try:
        conn = resolve(settings.artifact_conn(default), resolver)
        if parts.scheme == "s3":
            url = s3_client(conn, signature_version="s3v4").generate_presigned_url(
                "get_object", Params={"Bucket": bucket, "Key": key},
                ExpiresIn=int(ttl.total_seconds()))
        else:
            url = gcs_client(conn).bucket(bucket).blob(key).generate_signed_url(
                version="v4", expiration=ttl, method="GET")
    except Exception as exc:  # noqa: BLE001 - no link is the safe answer; the reason is logged
        log.warning("no pre-signed link for %s: %s (the notice goes without a link)",
                    mask_uri(uri), type(exc).__name__)
        return None
    return Link(url=url, expires_at=now + ttl)
