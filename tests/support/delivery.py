"""Shared test values and a ``run`` helper calling ``deliver`` with the usual arguments."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from export_lib.config.destinations import Destination
from export_lib.delivery import DeliverableArtifact, DeliveryOutcome, deliver, list_deliveries

NOW = datetime(2026, 3, 29, 6, 0, tzinfo=UTC)
RUN_KEY = "acme/daily-spend/2026-03-28"
PERIOD = "2026-03-28"
OWNER = "alice@acme.example"
WINDOW_END = NOW + timedelta(days=5)  # the default retry window of a slot at NOW


def run(engine: sa.Engine, destination: Destination, artifact: DeliverableArtifact,
        **overrides: Any) -> DeliveryOutcome:
    kwargs: dict[str, Any] = {
        "run_key": RUN_KEY, "period_label": PERIOD, "owner": OWNER,
        "authorized": {OWNER}, "retry_until": WINDOW_END, "now": NOW,
    }
    kwargs.update(overrides)
    return deliver(engine, destination, artifact, **kwargs)


def only_record(engine: sa.Engine) -> dict[str, Any]:
    (record,) = list_deliveries(engine)
    return record
