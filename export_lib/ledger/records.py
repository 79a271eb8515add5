"""Plain records the ledger hands out and takes in (frozen dataclasses).

Run-side records are JSON-able through ``as_dict``; delivery records are built from rows with
``DeliveryRecord.from_row`` (timestamps in UTC on every backend).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from export_lib.periods.instants import format_instant
from export_lib.periods.names import period_label


def _iso(value: Any) -> Any:
    return format_instant(value) if isinstance(value, datetime) else value


@dataclass(frozen=True)
class RunRegistration:
    """What registration captures once per run key; never rewritten afterwards."""

    run_key: str
    company: str
    schedule_id: str
    slot: datetime
    window_start: datetime
    window_end: datetime
    timezone: str
    window_kind: str
    config_version: str
    config_snapshot: dict[str, Any]
    owner: str
    trigger: str = "scheduled"
    source_cutoff: datetime | None = None
    deadline: datetime | None = None


@dataclass(frozen=True)
class RunRecord:
    id: int
    run_key: str
    company: str
    schedule_id: str
    slot: datetime
    window_start: datetime
    window_end: datetime
    timezone: str
    window_kind: str
    config_version: str
    config_snapshot: dict[str, Any]
    source_cutoff: datetime | None
    deadline: datetime | None
    state: str
    reason: str | None
    owner: str
    trigger: str
    current_generation: int
    created_at: datetime
    updated_at: datetime
    schema_baseline: int | None = None
    """The schema contract (``export_schemas.seq``, 0: none yet) the run compares its file
    with, captured at its first check (ADR 0025); None until then."""
    batch: str | None = None
    """The batched recovery that exported the run (``dag_id/run_id/task_id``, ADR 0032); None
    when the run had its own DAG run or came from the command line."""

    def as_dict(self, *, with_snapshot: bool = False) -> dict[str, Any]:
        data = {k: _iso(v) for k, v in asdict(self).items()}
        if not with_snapshot:
            data.pop("config_snapshot")
        return data

    def log_context(self) -> dict[str, str]:
        """The run's log fields (``with run_context(**run.log_context()):``)."""
        return {"company": self.company, "schedule": self.schedule_id, "run": self.run_key,
                "period": period_label(self.window_start, self.window_end, self.timezone),
                "status": self.state}


@dataclass(frozen=True)
class AttemptRecord:
    id: int
    attempt_id: str
    run_id: int
    generation: int
    origin: str
    state: str
    lease_expires_at: datetime
    staging_uri: str
    staging_cleaned: int
    rows: int | None
    bytes: int | None
    sha256: str | None
    error: str | None
    started_at: datetime
    finished_at: datetime | None
    file_schema: list[dict[str, Any]] | None = None
    """The schema of the staged file (``ExportSchema.as_json()``); None before revision 0008."""
    staging_tail: bytes | None = None
    """What a GCS upload session's publication still sends (revision 0011); None elsewhere."""

    def as_dict(self) -> dict[str, Any]:
        data = {k: _iso(v) for k, v in asdict(self).items() if k != "staging_tail"}
        return {**data, "staging_tail_bytes": (None if self.staging_tail is None
                                               else len(self.staging_tail))}


@dataclass(frozen=True)
class ArtifactRecord:
    id: int
    run_id: int
    version: int
    uri: str
    manifest_uri: str
    sha256: str
    rows: int
    bytes: int
    format: str
    window_start: datetime
    window_end: datetime
    config_version: str
    attempt_id: str
    generated_at: datetime
    supersedes: int | None
    correction: int
    revoked_at: datetime | None = None
    revoked_reason: str | None = None
    deleted_at: datetime | None = None
    deleted_reason: str | None = None
    schema_fingerprint: str | None = None
    schema_major: int | None = None
    schema_change: str | None = None
    """``warn`` or ``new_major`` when this file was published under a schema change its run
    did not start with (ADR 0025); None otherwise."""
    schema_diff: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: _iso(v) for k, v in asdict(self).items()}


def utc(moment: datetime) -> datetime:
    """``moment`` in UTC; naive values (SQLite reads) are taken as UTC."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


@dataclass(frozen=True)
class DeliveryRecord:
    """One row of ``deliveries`` as read back (timestamps in UTC)."""

    delivery_id: str
    run_key: str
    artifact_version: int
    destination_id: str
    destination_type: str
    destination_config: str
    target: str
    artifact_sha256: str
    state: str
    attempts: int
    budget_base: int
    last_error: str | None
    receipt: str | None
    attempt_started_at: datetime | None
    created_at: datetime
    retry_until: datetime | None
    """End of the retry window; None on records written before revision 0003."""

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> DeliveryRecord:
        moments = ("attempt_started_at", "created_at", "retry_until")
        return cls(
            **{name: row[name] for name in cls.__dataclass_fields__ if name not in moments},
            **{name: utc(row[name]) if row[name] else None for name in moments},
        )


@dataclass(frozen=True)
class NewDelivery:
    """What the delivery engine knows when it first records a delivery."""

    delivery_id: str
    run_key: str
    artifact_version: int
    destination_id: str
    destination_type: str
    destination_config: str
    target: str
    artifact_name: str
    artifact_sha256: str
    artifact_bytes: int
    retry_until: datetime
    """End of the retry window: slot (or registration) + the destination's ``retry_window``."""
