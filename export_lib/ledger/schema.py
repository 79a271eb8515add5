"""All ledger tables (SQLAlchemy Core) on one ``metadata``: runs, attempts, artifacts, events,
deliveries and delivery_attempts, and the operator controls (revision 0005): operator_actions
(the audit trail), export_pauses and export_holds; the schema contracts (revision 0008):
export_schemas.

This is the *live* description the code reads and writes. The Alembic revisions in
``migrations/versions`` spell the same DDL out literally (frozen), and a test compares a freshly
migrated database with this module, so a change here needs a new revision.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.types import TypeDecorator

from export_lib.ledger.states import DeliveryState

metadata = MetaData()


class UtcDateTime(TypeDecorator):
    """Aware UTC datetimes on every backend (SQLite stores naive UTC; we re-attach the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r} given to the ledger; pass an aware one")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


runs = Table(
    "export_runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_key", String(300), nullable=False, unique=True),
    Column("company", String(100), nullable=False),
    Column("schedule_id", String(200), nullable=False),
    Column("slot", UtcDateTime, nullable=False),
    Column("window_start", UtcDateTime, nullable=False),
    Column("window_end", UtcDateTime, nullable=False),
    Column("timezone", String(64), nullable=False),
    Column("window_kind", String(40), nullable=False),
    Column("config_version", String(64), nullable=False),
    Column("config_snapshot", JSON, nullable=False),
    Column("source_cutoff", UtcDateTime, nullable=True),
    Column("deadline", UtcDateTime, nullable=True),
    Column("state", String(20), nullable=False),
    Column("reason", Text, nullable=True),
    Column("owner", String(200), nullable=False),
    Column("trigger", String(40), nullable=False),
    Column("current_generation", Integer, nullable=False, default=0),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Index("ix_export_runs_company_schedule", "company", "schedule_id", "slot"),
    # Revision 0007: a run's period is looked up before it exports (export_lib.ledger.periods).
    Index("ix_export_runs_period", "schedule_id", "window_start"),
    # Revision 0008: the schema contract the run compares its file with (export_schemas.seq;
    # 0: none was published yet), captured at its first check and never rewritten (ADR 0025).
    Column("schema_baseline", Integer, nullable=True),
    # Revision 0010: the Airflow task of the batched recovery that exported the run
    # (``dag_id/run_id/task_id``; ADR 0032); NULL when the run had its own DAG run.
    Column("batch", String(300), nullable=True),
)

attempts = Table(
    "export_attempts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("attempt_id", String(64), nullable=False, unique=True),
    Column("run_id", Integer, ForeignKey("export_runs.id"), nullable=False),
    Column("generation", Integer, nullable=False),
    Column("origin", String(300), nullable=False),
    # an AttemptState (states.py): running, staged, published, failed or abandoned
    Column("state", String(20), nullable=False),
    Column("lease_expires_at", UtcDateTime, nullable=False),
    Column("staging_uri", Text, nullable=False),
    Column("staging_cleaned", Integer, nullable=False, default=0),
    Column("rows", BigInteger, nullable=True),
    Column("bytes", BigInteger, nullable=True),
    Column("sha256", String(64), nullable=True),
    Column("error", Text, nullable=True),
    Column("started_at", UtcDateTime, nullable=False),
    Column("finished_at", UtcDateTime, nullable=True),
    UniqueConstraint("run_id", "generation", name="uq_export_attempts_generation"),
    # Revision 0008: the schema of the file the attempt staged (ExportSchema.as_json()).
    Column("file_schema", JSON, nullable=True),
    # Revision 0011: the bytes after the last full 256 KiB of a GCS upload session, which
    # publication finalises the session with (ADR 0031); NULL for every other attempt.
    Column("staging_tail", LargeBinary, nullable=True),
)

artifacts = Table(
    "export_artifacts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", Integer, ForeignKey("export_runs.id"), nullable=False),
    Column("version", Integer, nullable=False),
    Column("uri", Text, nullable=False),
    Column("manifest_uri", Text, nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("rows", BigInteger, nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("format", String(20), nullable=False),
    Column("window_start", UtcDateTime, nullable=False),
    Column("window_end", UtcDateTime, nullable=False),
    Column("config_version", String(64), nullable=False),
    Column("attempt_id", String(64), nullable=False),
    Column("generated_at", UtcDateTime, nullable=False),
    Column("supersedes", Integer, nullable=True),
    Column("correction", Integer, nullable=False, default=0),
    # Revision 0005: an operator revoked it (never delivered again), or retention deleted the
    # object (the row stays: the manifest of what was published is kept). Reason says who/why.
    Column("revoked_at", UtcDateTime, nullable=True),
    Column("revoked_reason", Text, nullable=True),
    Column("deleted_at", UtcDateTime, nullable=True),
    Column("deleted_reason", Text, nullable=True),
    UniqueConstraint("run_id", "version", name="uq_export_artifacts_version"),
    # One object, one artifact: a URI can never be recorded for two runs (revision 0004).
    Index("uq_export_artifacts_uri", "uri", unique=True),
    # Revision 0008 (ADR 0025): the file's schema fingerprint, the major version it is published
    # under, and the schema policy that published a change (warn, new_major; NULL: none) with
    # its diff, one change per line. NULL on artifacts published before 0008.
    Column("schema_fingerprint", String(64), nullable=True),
    Column("schema_major", Integer, nullable=True),
    Column("schema_change", String(16), nullable=True),
    Column("schema_diff", Text, nullable=True),
)

events = Table(
    "export_run_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", Integer, ForeignKey("export_runs.id"), nullable=False, index=True),
    Column("at", UtcDateTime, nullable=False),
    Column("from_state", String(20), nullable=True),
    Column("to_state", String(20), nullable=False),
    Column("attempt_id", String(64), nullable=True),
    Column("detail", Text, nullable=True),
)

# One record per (run, artifact version, destination); the primary key is derived from that
# triple (see deliveries.delivery_id), which makes insert-or-ignore race-free.
deliveries = Table(
    "deliveries",
    metadata,
    Column("delivery_id", String(80), primary_key=True),
    Column("run_key", String(400), nullable=False),
    Column("artifact_version", Integer, nullable=False),
    Column("destination_id", String(64), nullable=False),
    Column("destination_type", String(16), nullable=False),
    Column("destination_config", Text, nullable=False),
    Column("target", Text, nullable=False),
    Column("artifact_name", String(400), nullable=False),
    Column("artifact_sha256", String(64), nullable=False),
    Column("artifact_bytes", BigInteger, nullable=False),
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, server_default="0"),
    # attempts made before the last operator requeue: the retry budget counts from here.
    Column("budget_base", Integer, nullable=False, server_default="0"),
    Column("last_error", Text),
    Column("receipt", Text),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("attempt_started_at", UtcDateTime),
    Column("acknowledged_at", UtcDateTime),
    # the end of the retry window (revision 0003): a retryable failure at or after it exhausts
    # the delivery; NULL on records made before 0003 (then created_at + the destination's window).
    Column("retry_until", UtcDateTime),
    UniqueConstraint("run_key", "artifact_version", "destination_id", name="uq_delivery_triple"),
    CheckConstraint(
        f"state IN {tuple(s.value for s in DeliveryState)!r}", name="ck_delivery_state"
    ),
    Index("ix_deliveries_run_key", "run_key"),
    Index("ix_deliveries_state", "state"),
)

delivery_attempts = Table(
    "delivery_attempts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "delivery_id",
        String(80),
        ForeignKey("deliveries.delivery_id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("attempt", Integer, nullable=False),
    Column("started_at", UtcDateTime, nullable=False),
    Column("duration_ms", Integer),
    Column("outcome", String(24), nullable=False),
    Column("error", Text),
    Column("receipt", Text),
    # renewed (the database's clock) while the attempt's worker runs (revision 0012): silent
    # for long enough, the attempt is taken over; NULL on attempts of an earlier release.
    Column("heartbeat_at", UtcDateTime),
    UniqueConstraint("delivery_id", "attempt", name="uq_delivery_attempt"),
)

# Things announced once per run (revision 0006): alerts (kind ``alert``, key per run and reason
# or destination) and once-only metrics (kind ``metric``, e.g. a run counted completed). The
# unique ``notice_key`` makes the claim race-free; ``claims`` counts every ask (retries, clears).
notices = Table(
    "export_notices",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("notice_key", String(500), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("run_key", String(300), nullable=False),
    Column("reason", String(64), nullable=False),
    Column("recipients", Text, nullable=True),
    # claimed (being sent), sent, or failed (the next ask may try again)
    Column("state", String(16), nullable=False),
    Column("claims", Integer, nullable=False, server_default="1"),
    Column("error", Text, nullable=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("sent_at", UtcDateTime, nullable=True),
    Index("uq_export_notices_key", "notice_key", unique=True),
    Index("ix_export_notices_run_key", "run_key"),
)

# Each schedule's schema contracts, in order (revision 0008, ADR 0025): ``seq`` 1 is the schema
# of its first published file (change ``initial``); a later one is a change a run published
# under ``warn`` or ``new_major`` (``major`` counts the new_major changes from 1). The newest is
# the current contract. ``run_key``/``period``/``slot``: the run that first published it.
schemas = Table(
    "export_schemas",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("schedule_id", String(200), nullable=False),
    Column("company", String(100), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("major", Integer, nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("columns", JSON, nullable=False),
    Column("change", String(16), nullable=False),
    Column("previous_fingerprint", String(64), nullable=True),
    Column("diff", Text, nullable=True),
    Column("run_key", String(300), nullable=False),
    Column("period", String(100), nullable=False),
    Column("slot", UtcDateTime, nullable=False),
    Column("recorded_at", UtcDateTime, nullable=False),
    UniqueConstraint("schedule_id", "seq", name="uq_export_schemas_seq"),
)

# -- operator controls (revision 0005) --------------------------------------------------------

# Every operator action (pause, cancel, revoke, hold, release, requeue, a retention deletion),
# also those that changed nothing: ``changed`` 0 and ``outcome`` "nothing changed: <reason>".
operator_actions = Table(
    "operator_actions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", UtcDateTime, nullable=False),
    Column("who", String(200), nullable=False),
    Column("action", String(40), nullable=False),
    Column("target_kind", String(20), nullable=False),
    Column("target_id", String(400), nullable=False),
    Column("company", String(100), nullable=True),
    Column("schedule_id", String(200), nullable=True),
    Column("why", Text, nullable=False),
    Column("changed", Integer, nullable=False),
    Column("outcome", Text, nullable=False),
    Index("ix_operator_actions_company", "company", "at"),
)

# A pause of a whole company (schedule_id NULL) or of one schedule; active while resumed_at is
# NULL. start_run records the slots of a paused schedule as skipped with the pause's reason.
pauses = Table(
    "export_pauses",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("company", String(100), nullable=False),
    Column("schedule_id", String(200), nullable=True),
    Column("paused_by", String(200), nullable=False),
    Column("paused_at", UtcDateTime, nullable=False),
    Column("why", Text, nullable=False),
    Column("resumed_by", String(200), nullable=True),
    Column("resumed_at", UtcDateTime, nullable=True),
    Index("ix_export_pauses_company", "company"),
)

# A hold on one artifact, or on a run (every version of it): retention never deletes a held
# artifact. Active while released_at is NULL.
holds = Table(
    "export_holds",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", Integer, ForeignKey("export_runs.id"), nullable=False),
    Column("artifact_id", Integer, ForeignKey("export_artifacts.id"), nullable=True),
    Column("held_by", String(200), nullable=False),
    Column("held_at", UtcDateTime, nullable=False),
    Column("why", Text, nullable=False),
    Column("released_by", String(200), nullable=True),
    Column("released_at", UtcDateTime, nullable=True),
    Index("ix_export_holds_run", "run_id"),
)

# -- spent form tokens (revision 0009) --------------------------------------------------------

# The token (its HMAC) of every change made on the company page, spent once: a replayed form
# is refused. ``expires_at`` lets a clean-up drop rows whose token could not be used anyway.
form_tokens = Table(
    "export_form_tokens",
    metadata,
    Column("mac", String(64), primary_key=True),
    Column("who", String(200), nullable=False),
    Column("spent_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
)
