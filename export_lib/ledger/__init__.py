"""The ledger: durable run identity, attempts with fencing, artifacts, an event log, and the
deliveries of published artifacts.

Separate from Airflow's metadata DB (tasks cannot touch that one in Airflow 3). PostgreSQL in
production and tests, SQLite for the embedded demo; the URL comes from ``EXPORT_LEDGER_URL``.

Layout: ``schema`` (every table, one MetaData), ``states`` (every state machine and the one
transition check), ``records`` (frozen records), ``runs`` (the run repository, ``Ledger``),
``deliveries`` (the delivery repository), ``access`` (what repositories share),
``database`` (URL and engine), ``migrations`` (frozen Alembic revisions).
"""

from export_lib.ledger.runs import Ledger, ledger_url, open_ledger
from export_lib.ledger.states import (
    DELIVERY_STATES,
    RUN_STATES,
    AttemptState,
    DeliveryState,
    RunState,
    check_transition,
)

__all__ = [
    "DELIVERY_STATES",
    "RUN_STATES",
    "AttemptState",
    "DeliveryState",
    "Ledger",
    "RunState",
    "check_transition",
    "ledger_url",
    "open_ledger",
]
