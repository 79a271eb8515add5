"""The run ledger: durable run identity, attempts with fencing, artifacts, and an event log.

Separate from Airflow's metadata DB (tasks cannot touch that one in Airflow 3). PostgreSQL in
production and tests, SQLite for the embedded demo; the URL comes from ``EXPORT_LEDGER_URL``.
"""

from export_lib.ledger.runs import Ledger, ledger_url, open_ledger
from export_lib.ledger.states import RunState, check_transition

__all__ = ["Ledger", "RunState", "check_transition", "ledger_url", "open_ledger"]
