"""Retention (30 days unless configured): delete published artifacts older than their schedule's
``retention_days``, and the staging leftovers of attempts that never published, unless a hold
keeps them (:mod:`export_lib.pipeline.holds`, ADR 0017): the schedule's ``legal_hold``, an
operator's hold on the artifact or its run, a delivery of the artifact that is not final or whose
retry window is still open, or a config that cannot be read. Each kept object is reported with
that reason. :func:`collect_staging_garbage` (``exportctl ledger gc``) applies the same holds.

Each deletion is recorded in the ledger: the artifact row (the manifest of what was published)
stays, marked deleted with the reason, and the audit trail gets one ``retention`` action. The
manifest object beside a local artifact stays too, marked ``deleted_at``. A store that cannot
delete an object is recorded ("nothing changed: …") and retention carries on with the rest.
``dry_run`` reports what would be deleted and changes nothing.

The policy in force is today's config (``catalog``): a legal hold put on a schedule protects its
old artifacts at once, and a manual run follows its base export. A schedule gone from a valid
config keeps the policy its runs captured; without a readable config nothing is deleted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from export_lib.ledger import Ledger
from export_lib.ledger import controls as repo
from export_lib.ledger.controls import NOTHING_CHANGED, Action
from export_lib.ledger.records import ArtifactRecord, AttemptRecord, RunRecord
from export_lib.logfmt import bind, get_logger, run_context, scope
from export_lib.periods.instants import format_instant
from export_lib.pipeline.holds import HoldRules
from export_lib.pipeline.results import (
    HeldStagingObject,
    KeptStagingObject,
    ResultModel,
    StagingCleanup,
    StagingObject,
)
from export_lib.storage.stores import ArtifactStore

if TYPE_CHECKING:
    from export_lib.config.loader import Catalog

log = get_logger(__name__)

WHO = "retention"


class ExpiredArtifact(ResultModel):
    """An artifact past its schedule's ``retention_days``."""

    artifact_id: int
    company: str
    schedule_id: str
    run_key: str
    version: int
    uri: str
    generated_at: str
    retention_days: int


class HeldArtifact(ExpiredArtifact):
    """An expired artifact kept: ``reason`` names the hold (legal, operator's, a delivery, a
    config that cannot be read) and how it ends."""

    reason: str


class UndeletableArtifact(ExpiredArtifact):
    """An expired artifact the store could not delete (recorded; retention went on)."""

    error: str


class StagingLeftover(ResultModel):
    """The staging object of an attempt that never published, past its run's retention."""

    attempt_id: str
    run_key: str
    uri: str


class UndeletableStaging(StagingLeftover):
    """A staging leftover the store could not delete."""

    error: str


class HeldStaging(StagingLeftover):
    """A staging leftover kept: ``reason`` names the hold on its run."""

    reason: str


class RetentionReport(ResultModel):
    """What one retention pass did (or, with ``dry_run``, would do). Lists in the order met."""

    dry_run: bool
    deleted: list[ExpiredArtifact] = []
    kept: list[HeldArtifact] = []
    failed: list[UndeletableArtifact | UndeletableStaging] = []
    staging_deleted: list[StagingLeftover] = []
    staging_kept: list[HeldStaging] = []

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (``exportctl retention --json``)."""
        return self.as_xcom()


@dataclass
class _Pass:
    """The report being gathered during one pass (frozen into a RetentionReport at its end)."""

    dry_run: bool
    deleted: list[ExpiredArtifact] = field(default_factory=list)
    kept: list[HeldArtifact] = field(default_factory=list)
    failed: list[UndeletableArtifact | UndeletableStaging] = field(default_factory=list)
    staging_deleted: list[StagingLeftover] = field(default_factory=list)
    staging_kept: list[HeldStaging] = field(default_factory=list)

    def report(self) -> RetentionReport:
        return RetentionReport(dry_run=self.dry_run, deleted=self.deleted, kept=self.kept,
                               failed=self.failed, staging_deleted=self.staging_deleted,
                               staging_kept=self.staging_kept)


def _item(artifact: ArtifactRecord, run: RunRecord, days: int) -> ExpiredArtifact:
    return ExpiredArtifact(artifact_id=artifact.id, company=run.company,
                           schedule_id=run.schedule_id, run_key=run.run_key,
                           version=artifact.version, uri=artifact.uri,
                           generated_at=format_instant(artifact.generated_at),
                           retention_days=days)


def apply_retention(ledger: Ledger, catalog: Catalog | None, store: ArtifactStore, *, now: datetime,
                    dry_run: bool = False) -> RetentionReport:
    """One retention pass over every artifact not yet deleted (see the module docstring)."""
    report = _Pass(dry_run=dry_run)
    rules = HoldRules(ledger, catalog)
    for artifact, run in repo.live_artifacts(ledger):
        days = rules.policy(run).retention_days
        if artifact.generated_at >= now - timedelta(days=days):
            continue
        item = _item(artifact, run, days)
        why = rules.artifact_hold(run, artifact, now=now)
        if why is not None:
            log.info("retention keeps v%d %s: %s", artifact.version, artifact.uri, why,
                     extra=run.log_context())
            report.kept.append(HeldArtifact(**item.model_dump(), reason=why))
            continue
        if dry_run:
            report.deleted.append(item)
            continue
        _delete(ledger, store, artifact, run, item, days, now, report)
    _staging(ledger, rules, store, now=now, dry_run=dry_run, report=report)
    log.info("retention%s: %d artifact(s) deleted, %d kept (held), %d not deletable, %d staging "
             "leftover(s) deleted, %d kept (held)", " (dry run)" if dry_run else "",
             len(report.deleted), len(report.kept), len(report.failed),
             len(report.staging_deleted), len(report.staging_kept))
    return report.report()


@scope
def _delete(ledger: Ledger, store: ArtifactStore, artifact: ArtifactRecord, run: RunRecord,
            item: ExpiredArtifact, days: int, now: datetime, report: _Pass) -> None:
    bind(**run.log_context())  # the store's lines too
    why = (f"older than retention_days={days} (generated "
           f"{format_instant(artifact.generated_at)})")
    try:
        store.delete(artifact.uri)
    except Exception as exc:  # noqa: BLE001 - any store failure is recorded; retention goes on
        error = f"{type(exc).__name__}: {exc}"
        repo.record_action(ledger, Action(
            at=now, who=WHO, action="retention-delete", target_kind="artifact",
            target_id=str(artifact.id), why=why, changed=False,
            outcome=f"{NOTHING_CHANGED}the store cannot delete {artifact.uri}: {error}",
            company=run.company, schedule_id=run.schedule_id))
        log.warning("retention cannot delete %s: %s", artifact.uri, error)
        report.failed.append(UndeletableArtifact(**item.model_dump(), error=error))
        return
    reason = f"deleted by retention at {format_instant(now)}: {why}"
    _mark_manifest(store, artifact.manifest_uri, now, reason)
    repo.mark_deleted(ledger, artifact.id, reason, now, Action(
        at=now, who=WHO, action="retention-delete", target_kind="artifact",
        target_id=str(artifact.id), why=why, changed=True,
        outcome=f"deleted {artifact.uri} (run {run.run_key} v{artifact.version}); the manifest "
                "stays, marked deleted", company=run.company, schedule_id=run.schedule_id))
    log.warning("retention deleted v%d %s", artifact.version, artifact.uri)
    report.deleted.append(item)


def _mark_manifest(store: ArtifactStore, manifest_uri: str, now: datetime, reason: str) -> None:
    """Add ``deleted_at``/``deleted_reason`` to a local manifest (best effort: the ledger row
    is the record; an object store's manifest stays as published)."""
    try:
        path = store.local_path(manifest_uri)
    except Exception:  # noqa: BLE001 - another store's URI: nothing to mark here
        return
    if path is None or not path.is_file():
        return
    data = json.loads(path.read_text())
    data.update(deleted_at=now.isoformat(), deleted_reason=reason)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _garbage_runs(ledger: Ledger) -> Iterator[tuple[AttemptRecord, RunRecord]]:
    """Each staging leftover (abandoned or failed attempt not cleaned) with its run."""
    runs: dict[int, RunRecord] = {}
    for attempt in ledger.staging_garbage():
        if attempt.run_id not in runs:
            found = ledger.get_run(ledger.run_key_of(attempt.run_id))
            assert found is not None  # an attempt's run is never deleted
            runs[attempt.run_id] = found
        yield attempt, runs[attempt.run_id]


def _staging(ledger: Ledger, rules: HoldRules, store: ArtifactStore, *, now: datetime,
             dry_run: bool, report: _Pass) -> None:
    """Staging objects of abandoned or failed attempts past their run's retention."""
    for attempt, run in _garbage_runs(ledger):
        if attempt.started_at >= now - timedelta(days=rules.policy(run).retention_days):
            continue
        item = StagingLeftover(attempt_id=attempt.attempt_id, run_key=run.run_key,
                               uri=attempt.staging_uri)
        why = rules.staging_hold(run)
        if why is not None:
            report.staging_kept.append(HeldStaging(**item.model_dump(), reason=why))
            continue
        if not dry_run:
            try:
                with run_context(**run.log_context()):  # the store's lines
                    store.delete(attempt.staging_uri)
            except Exception as exc:  # noqa: BLE001 - recorded, retention goes on
                report.failed.append(UndeletableStaging(**item.model_dump(),
                                                        error=f"{type(exc).__name__}: {exc}"))
                continue
            ledger.mark_cleaned(attempt.attempt_id)
        report.staging_deleted.append(item)


def collect_staging_garbage(ledger: Ledger, store: ArtifactStore,
                            catalog: Catalog | None) -> StagingCleanup:
    """``exportctl ledger gc``: delete the staging objects of abandoned and failed attempts
    and mark them cleaned, whatever their age, unless a hold keeps their run (the same holds
    as retention: legal_hold, an operator's hold on the run, a config that cannot be read).

    Only attempts that can never publish are collected: an abandoned attempt lost its
    generation, a failed one its run's state, so fencing rejects either if it ever wakes up.
    An object that cannot be deleted (another store, a permission) stays recorded as garbage.
    """
    from export_lib.errors import StorageError

    rules = HoldRules(ledger, catalog)
    cleaned: list[StagingObject] = []
    kept: list[KeptStagingObject] = []
    held: list[HeldStagingObject] = []
    for attempt, run in _garbage_runs(ledger):
        item = StagingObject(attempt_id=attempt.attempt_id, run_key=run.run_key,
                             uri=attempt.staging_uri)
        why = rules.staging_hold(run)
        if why is not None:
            log.info("staging object %s of attempt %s kept: %s", attempt.staging_uri,
                     attempt.attempt_id[:12], why, extra=run.log_context())
            held.append(HeldStagingObject(**item.model_dump(), reason=why))
            continue
        try:
            with run_context(**run.log_context()):  # the store's lines
                store.delete(attempt.staging_uri)
        except StorageError as exc:
            log.warning("staging object %s of attempt %s not deleted: %s", attempt.staging_uri,
                        attempt.attempt_id[:12], exc, extra=run.log_context())
            kept.append(KeptStagingObject(**item.model_dump(), error=str(exc)))
            continue
        ledger.mark_cleaned(attempt.attempt_id)
        log.info("deleted staging object %s of %s attempt %s", attempt.staging_uri,
                 attempt.state, attempt.attempt_id[:12], extra=run.log_context())
        cleaned.append(item)
    return StagingCleanup(cleaned=tuple(cleaned), kept=tuple(kept), held=tuple(held))
