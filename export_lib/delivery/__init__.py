"""Delivery of published artifacts to configured destinations, once each, with a ledger.

Public API::

    deliver(engine, destination, artifact, *, run_key, period_label, owner, authorized,
            retry_until, now, exports_root=None, stale_after=...) -> DeliveryOutcome
    refuse(engine, destination, artifact, *, run_key, period_label, reason, retry_until,
           now) -> DeliveryOutcome            (a destination removed before delivery)
    delivery_id(run_key, version, destination_id) -> str
    list_deliveries(engine, run_key=None, *, states=None) -> list[dict]   (UNRESOLVED states)
    requeue(engine, delivery_id, *, now, window=None) -> DeliveryRecord   (a fresh window)
    delivery_metadata  (the one ledger MetaData, ``export_lib.ledger.schema.metadata``: all
                        ledger tables, ``deliveries`` and ``delivery_attempts`` among them)
"""

from export_lib.delivery.artifact import DeliverableArtifact, file_sha256
from export_lib.delivery.engine import DeliveryOutcome, deliver, refuse
from export_lib.ledger.deliveries import (
    UNRESOLVED,
    DeliveryRecord,
    deliveries,
    delivery_attempts,
    delivery_id,
    delivery_metadata,
    list_deliveries,
    requeue,
)

__all__ = [
    "DeliverableArtifact",
    "DeliveryOutcome",
    "DeliveryRecord",
    "UNRESOLVED",
    "deliver",
    "deliveries",
    "delivery_attempts",
    "delivery_id",
    "delivery_metadata",
    "file_sha256",
    "list_deliveries",
    "refuse",
    "requeue",
]
