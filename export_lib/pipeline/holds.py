"""What retention and ``exportctl ledger gc`` must keep, and why (ADR 0017).

Both passes ask the same rules; each answer is a reason a person can act on (None: nothing
holds), and every rule keeps when in doubt:

* :func:`policy_of`: the policy in force for a run. Today's config for its schedule, a manual
  run following its base export (:func:`manual_bases`); a ``legal_hold`` in today's config or in
  the run's captured snapshot keeps everything. Without a readable config (``catalog`` None), or
  while the company's config file or ``defaults.yaml`` has errors, today's ``legal_hold`` is
  unknown and everything of the run is kept. A schedule gone from a valid config keeps the
  policy its runs captured.
* an operator's hold (``exportctl hold``) on the run, or on the artifact;
* :func:`delivery_hold`, for an artifact only: a delivery of it that is not final (pending,
  attempting, exhausted or refused: the last two can be requeued) or that has not started while
  its retry window is open. Nothing of a cancelled run or a revoked artifact is delivered any
  more; a superseded version is never attempted again (deliver and requeue take the newest),
  so only an attempt in progress holds it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from export_lib.config.destinations import DEFAULT_RETRY_WINDOW, parse_destination
from export_lib.ledger import Ledger, RunState
from export_lib.ledger import controls as repo
from export_lib.ledger import deliveries as rec
from export_lib.ledger.records import ArtifactRecord, DeliveryRecord, RunRecord
from export_lib.periods.instants import format_instant
from export_lib.pipeline.stages import retry_window_end, schedule_of
from export_lib.pipeline.start import manual_bases_noted

if TYPE_CHECKING:
    from export_lib.config.loader import Catalog

NO_CONFIG = "no readable config: "
DEFAULT_RETENTION_DAYS = 30
# A manual run's schedule id: <company>/manual-<tag> (its run key: <company>/manual/<tag>).
_MANUAL = re.compile(r"[^/]+/manual(?:[-_/].*)?")
_DEFAULTS_FILE = "defaults.yaml"


@dataclass(frozen=True)
class Policy:
    """``retention_days`` in force for a run, and ``keep``: why everything of the run is kept
    whatever its age (None: retention applies)."""

    retention_days: int
    keep: str | None = None


def is_manual(run: RunRecord) -> bool:
    return (run.config_snapshot or {}).get("kind") == "manual" or bool(
        _MANUAL.fullmatch(run.schedule_id))


def manual_bases(run: RunRecord, events: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """The schedule id(s) a manual run was based on. The snapshot names a widget base exactly
    (``export_id``) and a data base by its channel only (``kind`` is ``manual``); the
    registration note (:func:`~export_lib.pipeline.start.manual_bases_noted`) says which kind.
    Unsure, both kinds of the channel count, and the stricter policy wins."""
    snapshot = run.config_snapshot or {}
    if snapshot.get("export_id"):
        candidates: tuple[str, ...] = (f"{run.company}/{snapshot['export_id']}",)
    elif snapshot.get("channel"):
        candidates = tuple(f"{run.company}/{snapshot['channel']}/{kind}"
                           for kind in ("primary", "secondary"))
    else:
        candidates = ()
    noted = manual_bases_noted(events) & set(candidates)
    return tuple(noted) if len(noted) == 1 else candidates


def broken_file(catalog: Catalog, company: str) -> str | None:
    """The config file with errors that hides ``company``'s policies: ``defaults.yaml`` (every
    company inherits it) or the company's own file; None when both are valid."""
    paths = [Path(key) for key in catalog.errors]
    for path in paths:
        if path.name == _DEFAULTS_FILE:
            return str(path)
    for path in paths:
        if path.suffix in (".yaml", ".yml") and path.stem == company:
            return str(path)
    return None


def policy_of(run: RunRecord, catalog: Catalog | None, *, bases: Sequence[str] = ()) -> Policy:
    """The policy in force for ``run`` (see the module docstring); ``bases``: a manual run's
    base export(s) (:func:`manual_bases`)."""
    captured = (run.config_snapshot or {}).get("policies", {})
    days = captured.get("retention_days", DEFAULT_RETENTION_DAYS)
    if catalog is None:
        return Policy(days, f"{NO_CONFIG}no config directory was given, so today's legal_hold "
                            f"and retention_days of {run.schedule_id} are unknown; kept (pass "
                            "--config DIR or set EXPORT_CONFIG_DIR)")
    broken = broken_file(catalog, run.company)
    if broken is not None:
        return Policy(days, f"config file {broken} has errors, so today's legal_hold and "
                            f"retention_days of company {run.company} are unknown; kept until "
                            f"it validates (exportctl validate {catalog.config_dir})")
    ids = tuple(bases) or (run.schedule_id,)
    found = [s for s in catalog.schedules if s.schedule_id in ids]
    if found:
        days = max(s.policies.retention_days for s in found)
    held = [s.schedule_id for s in found if s.policies.legal_hold]
    if not held and not captured.get("legal_hold"):
        return Policy(days)
    name = (held or list(ids))[0]
    if not bases:
        return Policy(days, f"schedule {name} is under legal_hold")
    return Policy(days, f"schedule {name} is under legal_hold; manual run {run.run_key} is "
                        "based on it")


def _window_end(record: DeliveryRecord) -> datetime:
    """The end of a record's retry window (records made before it was stored: created_at +
    the destination's window, as the delivery engine counts it)."""
    if record.retry_until is not None:
        return record.retry_until
    try:
        window = parse_destination(record.destination_config).retry_window
    except ValueError:
        window = DEFAULT_RETRY_WINDOW
    return record.created_at + window


def delivery_hold(run: RunRecord, artifact: ArtifactRecord, records: Sequence[DeliveryRecord],
                  *, newest: int, now: datetime) -> str | None:
    """Why a delivery keeps ``artifact`` (see the module docstring); ``records``: the run's
    delivery records, ``newest``: the run's newest artifact version."""
    if run.state == RunState.CANCELLED or artifact.revoked_at is not None:
        return None
    mine = [r for r in records if r.artifact_version == artifact.version]
    for record in mine:
        dest, until = record.destination_id, _window_end(record)
        if record.state in (rec.PENDING, rec.ATTEMPTING) and now < until and (
                artifact.version == newest or record.state == rec.ATTEMPTING):
            return f"delivery to {dest} is still retrying until {format_instant(until)}; kept"
        if artifact.version != newest:
            continue
        if record.state in (rec.PENDING, rec.ATTEMPTING):
            return (f"delivery to {dest} is still {record.state} though its retry window "
                    f"closed at {format_instant(until)}; kept until it is final (deliver it "
                    f"again, or revoke the artifact: exportctl revoke {artifact.id})")
        if record.state in (rec.EXHAUSTED, rec.REFUSED):
            return (f"delivery to {dest} is {record.state}, which is not final; kept until it "
                    f"is requeued (exportctl requeue {run.run_key}) or the artifact is revoked "
                    f"(exportctl revoke {artifact.id})")
    if artifact.version != newest:
        return None
    recorded = {r.destination_id for r in mine}
    for destination in schedule_of(run).destinations:
        until = retry_window_end(run, destination)
        if destination.id not in recorded and now < until:
            return (f"delivery to {destination.id} has not been attempted yet and may be "
                    f"until {format_instant(until)}; kept")
    return None


@dataclass
class HoldRules:
    """The rules for one pass over the ledger, reading each run's policy, delivery records and
    newest version once."""

    ledger: Ledger
    catalog: Catalog | None
    _policies: dict[int, Policy] = field(default_factory=dict, repr=False)
    _deliveries: dict[int, tuple[list[DeliveryRecord], int]] = field(default_factory=dict,
                                                                     repr=False)

    def policy(self, run: RunRecord) -> Policy:
        if run.id not in self._policies:
            bases = (manual_bases(run, self.ledger.events(run.run_key)) if is_manual(run)
                     else ())
            self._policies[run.id] = policy_of(run, self.catalog, bases=bases)
        return self._policies[run.id]

    def _operator(self, run: RunRecord, artifact_id: int | None) -> str | None:
        held = repo.active_holds(self.ledger, run.id, artifact_id)
        if not held:
            return None
        return (f"held by {held[0]['held_by']} at {format_instant(held[0]['held_at'])}: "
                f"{held[0]['why']}")

    def artifact_hold(self, run: RunRecord, artifact: ArtifactRecord, *,
                      now: datetime) -> str | None:
        """Why ``artifact`` (past its retention) is kept at ``now``: the policy, an operator's
        hold, a delivery."""
        found = self.policy(run).keep or self._operator(run, artifact.id)
        if found is not None:
            return found
        if run.id not in self._deliveries:
            latest = self.ledger.latest_artifact(run.run_key)
            self._deliveries[run.id] = (rec.records_of(self.ledger.engine, run.run_key),
                                        latest.version if latest else artifact.version)
        records, newest = self._deliveries[run.id]
        return delivery_hold(run, artifact, records, newest=newest, now=now)

    def staging_hold(self, run: RunRecord) -> str | None:
        """Why the staging leftovers of ``run``'s failed or abandoned attempts are kept: the
        policy's reason, or an operator's hold on the run."""
        return self.policy(run).keep or self._operator(run, None)
