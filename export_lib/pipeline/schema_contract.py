"""The schema contract in the stages (ADR 0025): render checks the file's
schema against the run's contract before it reads a row, publish records the contract the file
is published under and writes it into the manifest, and the schedule's history answers
``exportctl schema``.

Manual exports (``kind: manual``) have no contract: their columns are the requester's choice
and their windows are not periods of a schedule. Their manifests still carry the schema and its
fingerprint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from export_lib.ledger import Ledger
from export_lib.ledger.contracts import (
    ContractEntry,
    SchemaPublication,
    check_schema,
    history,
    unsent_warnings,
)
from export_lib.logfmt import get_logger
from export_lib.source.export_schema import ExportSchema

if TYPE_CHECKING:
    from export_lib.config.models import Schedule
    from export_lib.ledger.records import AttemptRecord, RunRecord

log = get_logger(__name__)


def schema_policy_of(schedule: Schedule) -> str | None:
    """The policy a run of ``schedule`` applies (None: no contract, a manual export)."""
    return None if schedule.kind == "manual" else schedule.policies.schema_policy


def render_check(ledger: Ledger, run: RunRecord, schedule: Schedule
                 ) -> Callable[[ExportSchema], None] | None:
    """What render calls with the file's schema before it reads a row: under ``fail``, a
    changed schema ends the render with SchemaContractError (nothing read, nothing staged);
    the first check captures the run's baseline (the contract its retries compare with)."""
    policy = schema_policy_of(schedule)
    if policy is None:
        return None

    def check(observed: ExportSchema) -> None:
        verdict = check_schema(ledger.engine, run, observed, policy)
        if verdict.changed:
            log.warning("the file's schema differs from contract %s (major %d): %s; "
                        "schema_policy %s publishes it", verdict.contract.fingerprint[:12],
                        verdict.contract.major, "; ".join(verdict.diff), policy)

    return check


def manifest_fields(attempt: AttemptRecord, publication: SchemaPublication | None
                    ) -> dict[str, Any]:
    """The manifest's (and the asset event's) schema fields: ``schema`` (the columns),
    ``schema_fingerprint``, ``schema_major``, ``schema_change`` (``warn``, ``new_major`` or
    None) and ``schema_diff`` (one line per change; empty without one)."""
    if attempt.file_schema is None:  # staged before revision 0008
        return {"schema": None, "schema_fingerprint": None, "schema_major": None,
                "schema_change": None, "schema_diff": []}
    observed = ExportSchema.from_json(attempt.file_schema)
    return {"schema": observed.as_json(), "schema_fingerprint": observed.fingerprint,
            "schema_major": publication.entry.major if publication else None,
            "schema_change": publication.change if publication else None,
            "schema_diff": list(publication.diff) if publication else []}


def contract_history(ledger: Ledger, schedule_id: str) -> list[ContractEntry]:
    """Every published contract of ``schedule_id``, oldest first (the last is current)."""
    return history(ledger.engine, schedule_id)


def pending_schema_alerts(ledger: Ledger, schedule_id: str) -> list[ContractEntry]:
    """The ``warn`` changes of ``schedule_id`` whose one alert has not been sent (never
    asked, or its send failed): what the Airflow edge sends after a publication. Its claim in
    ``export_notices`` makes it once, whoever asks."""
    return unsent_warnings(ledger.engine, schedule_id)


__all__ = ["contract_history", "manifest_fields", "pending_schema_alerts", "render_check",
           "schema_policy_of"]
