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

__all__ = ["DeliveryContext", "Transport", "transport_for"]


def transport_for(destination: Destination, *, exports_root: Path | None = None) -> Transport:
    """The transport for ``destination`` (not yet connected: use it as a context manager)."""
    match destination:
        case LocalDestination():
            return LocalTransport(destination, exports_root=exports_root)
        case S3Destination():
            return S3Transport(destination)
        case GcsDestination():
            return GcsTransport(destination)
        case SftpDestination():
            return SftpTransport(destination)
        case WebhookDestination():
            return WebhookTransport(destination)
        case EmailDestination():
            return EmailTransport(destination)
    raise TypeError(f"no transport for destination type {type(destination).__name__}")
