"""One transport per destination type; :func:`transport_for` picks it from the config."""

from __future__ import annotations

from pathlib import Path

from export_lib.config.destinations import (
    Destination,
    EmailDestination,
    GcsDestination,
    LocalDestination,
    S3Destination,
    SftpDestination,
    WebhookDestination,
)
from export_lib.delivery.transports.base import DeliveryContext, Transport
from export_lib.delivery.transports.email import EmailTransport
from export_lib.delivery.transports.gcs import GcsTransport
from export_lib.delivery.transports.local import LocalTransport
from export_lib.delivery.transports.s3 import S3Transport
from export_lib.delivery.transports.sftp import SftpTransport
from export_lib.delivery.transports.webhook import WebhookTransport
from export_lib.source.connections import ConnectionResolver

__all__ = ["DeliveryContext", "Transport", "transport_for"]


def transport_for(destination: Destination, *, exports_root: Path | None = None,
                  resolver: ConnectionResolver | None = None) -> Transport:
    """The transport for ``destination`` (not yet connected: use it as a context manager).

    Its connection resolves through ``resolver`` on enter (the environment when None).
    """
    match destination:
        case LocalDestination():
            return LocalTransport(destination, exports_root=exports_root)
        case S3Destination():
            return S3Transport(destination, resolver=resolver)
        case GcsDestination():
            return GcsTransport(destination, resolver=resolver)
        case SftpDestination():
            return SftpTransport(destination, resolver=resolver)
        case WebhookDestination():
            return WebhookTransport(destination, resolver=resolver)
        case EmailDestination():
            return EmailTransport(destination, resolver=resolver)
    raise TypeError(f"no transport for destination type {type(destination).__name__}")
