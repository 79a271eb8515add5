"""The stages after the start: render → publish → deliver, plus the late-data watermark check
(staging clean-up, ``exportctl ledger gc``, is in :mod:`export_lib.pipeline.retention`).

Each stage is one function over the ledger; the Airflow operators call one each and the CLI
(``exportctl run``) calls them in a row, so both worlds run the same code. Every stage is
idempotent on the run key: a repeated trigger, a retry or a cleared task finds what the ledger
already holds instead of producing a second artifact or delivery.

Just over 400 lines on purpose: render, publish and deliver share the run context, the
config-at-run-time lookup and the "already done" checks defined here; splitting the stages
apart would have each import the others' private helpers.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from export_lib.errors import (
    ArtifactValidationError,
    ConfigError,
    DeliveryError,
    ExportError,
    FencingError,
    LedgerUnavailable,
    PublishError,
    SchemaContractError,
)
from export_lib.formats import file_extension, media_type
from export_lib.formats.registry import format_label
from export_lib.ledger import Ledger, RunState
from export_lib.ledger.budget import RenderBudget
from export_lib.ledger.records import ArtifactRecord, RunRecord
from export_lib.logfmt import bind, get_logger, scope
from export_lib.periods.names import artifact_key, period_label
from export_lib.pipeline.results import (
    AlreadyPublished,
    DeliverResult,
    PublishResult,
    Rendered,
    RenderResult,
    RenderSkipped,
)
from export_lib.pipeline.schema_contract import manifest_fields, render_check, schema_policy_of
from export_lib.pipeline.staging import ArtifactTarget, validate_staged
from export_lib.source.connections import ConnectionResolver
from export_lib.storage.stores import ArtifactStore

if TYPE_CHECKING:
    from export_lib.config.destinations import Destination
    from export_lib.config.loader import Allowlist
    from export_lib.config.models import Schedule
    from export_lib.ledger.contracts import SchemaPublication
    from export_lib.render.engine import RenderResult as Rendering
    from export_lib.render.job import RenderOptions
    from export_lib.source.export_schema import ExportSchema

    # A range scan's writer of one period (ADR 0038): (run, sink, check_schema) -> what it wrote.
    Produce = Callable[[RunRecord, Any, Callable[[ExportSchema], None]], Rendering]

log = get_logger(__name__)


@dataclass(frozen=True)
class RunContext:
    """Where a stage runs (for the attempt record and log lines)."""

    origin: str = "cli"
    trigger: str = "scheduled"


def schedule_of(run: RunRecord) -> Schedule:
    """The schedule exactly as captured at registration (never today's config)."""
    from export_lib.config.loader import Schedule

    return Schedule.model_validate(run.config_snapshot)


def render_options(run: RunRecord, schedule: Schedule | None = None) -> RenderOptions:
    """How the run's file is written, from its captured schedule: one place, so a period's
    own render and a batch's range scan (ADR 0038) print the same bytes."""
    from export_lib.render.job import RenderOptions

    schedule = schedule or schedule_of(run)
    return RenderOptions(format=schedule.format, compression=schedule.compression,
                         timezone=run.timezone, delimiter=schedule.csv.delimiter,
                         timestamps=schedule.csv.timestamps,
                         neutralize_formulas=schedule.csv.neutralize_formulas)


@scope
def render_run(ledger: Ledger, store: ArtifactStore, run_key: str, *, now: datetime,
               ctx: RunContext = RunContext(), regenerate: bool = False,
               resolver: ConnectionResolver | None = None,
               budget: RenderBudget | None = None,
               wait: timedelta = timedelta(0),
               allowlist: Allowlist | None = None,
               produce: Produce | None = None) -> RenderResult:
    """Claim a new attempt within the render budget (``budget``, default from the environment:
    4 at once, 2 per company; RenderBudgetError when full) and render the captured query into
    its staging object, keeping the attempt's lease alive while the source is read.

    While another attempt holds the run's lease, this one waits up to ``wait`` for it to
    publish (then reports that artifact) or lapse (then takes over); after that it stands down
    with LeaseHeldError. The query's source connection is resolved through ``resolver`` (the
    environment when None). With ``allowlist`` (``defaults.yaml`` today), the captured query is
    checked against it again first: a run registered under an older version, or before the
    platform took a table off the list or the source's connection from the company, reads
    nothing the list no longer allows (ConfigError, nothing claimed).

    ``produce`` writes the period's bytes instead of a query of its own: a batch's range scan
    (ADR 0038), called with the run, the sink and the schema contract's check.
    """
    from export_lib.ledger.runs import render_lease
    from export_lib.pipeline.lease import LeaseKeeper, claim_waiting
    from export_lib.render.engine import render
    from export_lib.source.connections import resolve
    from export_lib.source.database import open_source

    run = _get(ledger, run_key)
    bind(**run.log_context())
    latest = ledger.latest_artifact(run_key)
    if run.state == RunState.READY and not regenerate:
        log.info("already ready as v%s; not rendering again", latest.version)
        return _already(run_key, latest)
    schedule = schedule_of(run)
    if allowlist is not None:
        _check_allowed(run, schedule, allowlist)
    ext = file_extension(schedule.format, schedule.compression)
    lease = render_lease()
    try:
        attempt = claim_waiting(
            ledger, run.run_key, now=now, wait=wait, origin=ctx.origin,
            regenerate=regenerate,
            staging_uri=lambda attempt_id: store.staging_uri(attempt_id, ext),
            budget=budget or RenderBudget.from_env(), lease=lease,
        )
    except PublishError:
        # A concurrent trigger of the same slot published while we looked: that is our result.
        latest = ledger.latest_artifact(run_key)
        if regenerate or latest is None:
            raise
        log.info("published as v%s meanwhile; not rendering again", latest.version)
        return _already(run_key, latest)
    run = _get(ledger, run_key)  # a regeneration moved the source cutoff to now
    target: ArtifactTarget | None = None
    try:
        ledger.advance(run_key, attempt.attempt_id, RunState.RENDERING, now)
        options = render_options(run, schedule)
        # Straight to the final name where the store can (ADR 0031), else a staging object.
        target = ArtifactTarget(ledger, store, run, attempt, schedule,
                                render_check(ledger, run, schedule))
        with LeaseKeeper(ledger, attempt.attempt_id, lease), \
                (nullcontext() if produce else
                 open_source(resolve(schedule.query.source, resolver))) as source, \
                target.open() as sink:
            result = produce(run, sink, target.check_schema) if produce else render(
                source, schedule.query, company_id=run.company, window_start=run.window_start,
                window_end=run.window_end, cutoff=run.source_cutoff, options=options, sink=sink,
                schedule_id=run.schedule_id, check_schema=target.check_schema,
            )
            target.check_head()
        ledger.record_staged(run_key, attempt.attempt_id, rows=result.rows, nbytes=result.bytes,
                             sha256=result.sha256, now=now,
                             file_schema=result.export_schema.as_json(), **target.recorded())
    except LedgerUnavailable:
        # Nothing can be recorded: the attempt keeps its lease until it lapses (the keeper
        # has stopped renewing), then the task's retry takes the run over.
        raise
    except BaseException as exc:  # a task timeout or kill too: give the budget place back
        reason = str(exc) if isinstance(exc, ExportError) else f"interrupted: {exc!r}"
        ledger.fail(run_key, attempt.attempt_id, reason, now)
        if target is not None:
            target.discard()
        raise
    log.info("rendered %d rows, %d bytes, sha256 %s (attempt %s, generation %d)",
             result.rows, result.bytes, result.sha256[:16], attempt.attempt_id[:12],
             attempt.generation)
    if result.rows == 0 and schedule.policies.skip_empty and latest is None:
        reason = "the window holds no rows and the export sets skip_empty; nothing is published"
        store.delete(target.uri)
        ledger.skip(run_key, reason, now)
        log.info("%s", reason)
        return RenderSkipped(run_key=run_key, skipped=reason)
    if result.rows == 0:
        # Said, not silent: a new company whose rows are not in the source yet (or whose id
        # differs from the source's tenant column) would otherwise send empty files unseen.
        log.warning("company=%s schedule=%s period=%s: 0 rows in [%s, %s) from %s; the file "
                    "has %s", run.company, run.schedule_id,
                    period_label(run.window_start, run.window_end, run.timezone),
                    run.window_start.isoformat(), run.window_end.isoformat(),
                    schedule.query.table, {"csv": "only its header", "parquet": "only its "
                                           "schema"}.get(schedule.format, "no rows"))
    return Rendered(run_key=run_key, attempt_id=attempt.attempt_id,
                    generation=attempt.generation, rows=result.rows, bytes=result.bytes,
                    sha256=result.sha256, columns=tuple(result.columns))


def _check_allowed(run: RunRecord, schedule: Schedule, allowlist: Allowlist) -> None:
    from export_lib.config.isolation import source_issues

    where = f"run {run.run_key}: captured query"
    issues = source_issues(schedule.query, allowlist.sources, where)
    if issues:
        raise ConfigError(f"{'; '.join(issues)}. The run's config version "
                          f"{run.config_version} is not rendered: the source allowlist "
                          "(defaults.yaml 'sources') no longer allows what it reads")
    refused = allowlist.connection_issue(schedule.query.source, "source", run.company)
    if refused:
        raise ConfigError(f"{where}.source: {refused}. The run's config version "
                          f"{run.config_version} is not rendered: defaults.yaml no longer "
                          "grants the company its source connection")


def _already(run_key: str, latest: ArtifactRecord) -> AlreadyPublished:
    return AlreadyPublished(run_key=run_key, artifact_version=latest.version,
                            sha256=latest.sha256, rows=latest.rows)


@scope
def publish_run(ledger: Ledger, store: ArtifactStore, run_key: str, attempt_id: str | None, *,
                now: datetime, columns: list[str] | None = None,
                correction: bool = False) -> PublishResult:
    """Validate the staged object and publish it (fenced) as an immutable, versioned artifact."""
    run = _get(ledger, run_key)
    bind(**run.log_context())
    if attempt_id is None:  # render found the run already ready: nothing new to publish
        latest = ledger.latest_artifact(run_key)
        return _artifact_summary(run_key, latest, created=False)
    attempt = ledger.get_attempt(attempt_id)
    if attempt.state == "published":
        # A cleared publish task, or an Airflow retry after the commit: this attempt's work is
        # done; report what it published instead of walking a ready run back to validating.
        done = [a for a in ledger.artifacts(run_key) if a.attempt_id == attempt_id]
        artifact = done[-1] if done else ledger.latest_artifact(run_key)
        log.info("attempt %s already published v%d; nothing to do", attempt_id[:12],
                 artifact.version)
        return _artifact_summary(run_key, artifact, created=False)
    if attempt.state == "failed":
        # A publish cleared (or retried) after this attempt failed validation: its staged
        # object is not publishable; only a new render is.
        raise PublishError(
            f"run {run_key}: attempt {attempt_id[:12]} failed ({attempt.error}); its staged "
            "object is not published. Clear render with downstream to render the period again."
        )
    schedule = schedule_of(run)
    fmt = format_label(schedule.format, schedule.compression)  # csv, jsonl.gz, ...
    period = period_label(run.window_start, run.window_end, run.timezone)

    def promote(version: int, publication: SchemaPublication | None = None) -> tuple[str, str]:
        manifest = {
            "run_key": run.run_key, "company": run.company, "schedule": run.schedule_id,
            "window_start_utc": run.window_start.isoformat(), "timezone": run.timezone,
            "window_end_utc": run.window_end.isoformat(), "period": period,
            "rows": attempt.rows, "bytes": attempt.bytes, "sha256": attempt.sha256,
            "format": fmt, "compression": schedule.compression,
            "media_type": media_type(schedule.format, schedule.compression),
            "config_version": run.config_version,
            "late_data_policy": schedule.policies.late_data.policy,
            "reproducible": schedule.query.ingested_column is not None,
            "source_cutoff_utc": run.source_cutoff.isoformat() if run.source_cutoff else None,
            "generated_at": now.isoformat(), "version": version,
            "supersedes": version - 1 if version > 1 else None,
            "correction": bool(correction and version > 1),
            **manifest_fields(attempt, publication),
        }
        key = artifact_key(run.company, run.schedule_id, period, run.slot, version,
                           file_extension(schedule.format, schedule.compression),
                           major=publication.entry.major if publication else None)
        return store.promote(attempt.staging_uri, key, manifest, **tail)

    # Only a GCS upload session has a tail (the bytes that finalise it); other stores' promote
    # takes none.
    tail = {} if attempt.staging_tail is None else {"tail": attempt.staging_tail}
    try:
        ledger.advance(run_key, attempt_id, RunState.VALIDATING, now)
        validate_staged(store, attempt.staging_uri, sha256=attempt.sha256 or "",
                        nbytes=attempt.bytes or 0, fmt=schedule.format,
                        compression=schedule.compression,
                        columns=columns or list(schedule.query.columns),
                        delimiter=schedule.csv.delimiter, tail=attempt.staging_tail)
        artifact, created = ledger.publish(run_key, attempt_id, now=now, fmt=fmt,
                                           promote=promote, correction=correction,
                                           schema_policy=schema_policy_of(schedule))
    except (SchemaContractError, ArtifactValidationError) as exc:
        # The staged bytes are not what was rendered; another run's contract came first (ADR
        # 0025), or it renamed this file (ADR 0031).
        ledger.fail(run_key, attempt_id, str(exc), now)
        raise
    except FencingError:
        _discard_fenced(store, attempt.staging_uri)
        raise
    if created and artifact.schema_change:
        log.warning("published v%d under a changed schema (schema_policy %s, schema major "
                    "%d): %s", artifact.version, artifact.schema_change, artifact.schema_major,
                    "; ".join((artifact.schema_diff or "").splitlines()))
    if not created:
        store.delete(attempt.staging_uri)
    log.info("%s v%d %s (%d rows, sha256 %s)",
             "published" if created else "content unchanged, kept", artifact.version,
             artifact.uri, artifact.rows, artifact.sha256[:16])
    return _artifact_summary(run_key, artifact, created=created)


def _discard_fenced(store: ArtifactStore, staging_uri: str) -> None:
    """A newer attempt owns the run: this one's staged bytes (its own staging object, or its
    pending upload: never a published object) can never be published, so they go now rather
    than at the next garbage collection."""
    try:
        store.delete(staging_uri)
    except Exception:  # noqa: BLE001 - the fencing is the error to report; gc retries this
        log.warning("could not remove the fenced attempt's staged %s; garbage collection "
                    "does", staging_uri)


def _artifact_summary(run_key: str, artifact: ArtifactRecord, *, created: bool
                      ) -> PublishResult:
    return PublishResult(run_key=run_key, created=created, version=artifact.version,
                         uri=artifact.uri, sha256=artifact.sha256, rows=artifact.rows,
                         bytes=artifact.bytes)


def _get(ledger: Ledger, run_key: str) -> RunRecord:
    run = ledger.get_run(run_key)
    if run is None:
        raise ExportError(f"run {run_key} is not registered; resolve it first")
    return run


def captured_destinations(ledger: Ledger, run_key: str) -> list[str]:
    """The ids of the destinations the run captured at registration, in config order: what
    its deliveries are (a destination added to the config later belongs to later slots)."""
    return [d.id for d in schedule_of(_get(ledger, run_key)).destinations]


@scope
def deliver_run(ledger: Ledger, run_key: str, destination_id: str, *, now: datetime,
                config_dir: str | None = None,
                resolver: ConnectionResolver | None = None) -> DeliverResult:
    """Deliver the newest artifact of the run to one of its captured destinations, once.

    The destination comes from the run's captured config (a destination added later applies
    to later slots only); the *current* config is consulted for two revocations: the owner's
    authorisation (revoking access stops deliveries of runs registered before the change) and
    the destination itself — one removed from the config (from the version in force for the
    run's slot) before delivery is recorded ``refused`` with the reason, and the call returns.
    A retryable failure is retried until the delivery's window closes (:func:`retry_window_end`:
    the run's slot + the destination's ``retry_window``); then it is ``exhausted``.
    The destination's and the artifact store's connections resolve through ``resolver`` (the
    environment when None).
    """
    from urllib.parse import unquote, urlsplit

    from export_lib.config.destinations import select_destinations
    from export_lib.delivery import DeliverableArtifact, deliver, refuse
    from export_lib.pipeline.controls import delivery_block
    from export_lib.storage.stores import open_store

    run = _get(ledger, run_key)
    bind(**run.log_context())
    schedule = schedule_of(run)
    (destination,) = select_destinations(schedule.destinations, [destination_id])
    artifact = ledger.latest_artifact(run_key)
    if artifact is None:
        raise PublishError(f"run {run_key} has no published artifact to deliver yet")
    current = _current_config(run, config_dir)
    retry_until = retry_window_end(run, destination)
    period = period_label(run.window_start, run.window_end, run.timezone)
    manifest = {"company": run.company, "schedule": run.schedule_id, "run_key": run_key,
                "config_version": run.config_version}
    blocked = delivery_block(run, artifact)  # cancelled or revoked by an operator
    removed = blocked or current.removal_reason(destination, run.company)
    # Read in place (ADR 0031): a file:// artifact whatever EXPORT_ARTIFACT_ROOT says now; an
    # object-store artifact streamed from the store, or copied server-side by the transport.
    local = stored = None
    if artifact.uri.startswith("file:"):
        local = Path(unquote(urlsplit(artifact.uri).path))
    elif removed is None:
        stored = open_store(resolver=resolver).stored(artifact.uri)  # type: ignore[attr-defined]
    deliverable = DeliverableArtifact(
        local_path=local, name=local.name if local else artifact.uri.rsplit("/", 1)[-1],
        version=artifact.version,
        sha256=artifact.sha256, bytes=artifact.bytes, rows=artifact.rows,
        format=artifact.format, uri=artifact.uri, window_start=artifact.window_start,
        window_end=artifact.window_end, manifest=manifest, stored=stored,
    )
    if removed is not None:
        outcome = refuse(ledger.engine, destination, deliverable, run_key=run_key,
                         period_label=period, reason=removed, retry_until=retry_until, now=now)
    else:
        outcome = deliver(
            ledger.engine, destination, deliverable, run_key=run_key, period_label=period,
            owner=run.owner, authorized=current.authorized, retry_until=retry_until,
            now=now, resolver=resolver,
        )
    if blocked is not None:
        raise DeliveryError(f"run {run_key}: {blocked}; not delivered to {destination_id}")
    return DeliverResult(run_key=run_key, destination=destination_id, **outcome.as_xcom())


def retry_window_end(run: RunRecord, destination: Destination) -> datetime:
    """When a delivery of ``run`` to ``destination`` stops retrying: the slot + the
    destination's ``retry_window``. A run registered after its deadline (catch-up after an
    outage, a backfill — the runs ADR 0003 gives no Deadline Alert) counts from its
    registration instead, so an old period still gets the whole window."""
    late = run.deadline is not None and run.created_at > run.deadline
    return (run.created_at if late else run.slot) + destination.retry_window


@dataclass(frozen=True)
class _CurrentConfig:
    """What today's config says about a registered run (None: no config directory known)."""

    authorized: set[str]
    destination_ids: frozenset[str] | None
    where: str
    allowlist: Allowlist | None = None

    def removal_reason(self, destination: Destination, company: str) -> str | None:
        """Why the run may no longer go to ``destination``: removed from the config, or its
        connection no longer granted to the company (defaults.yaml ``connections``)."""
        from export_lib.config.grants import destination_connection

        used = destination_connection(destination)
        refused = (self.allowlist.connection_issue(*used, company)
                   if used and self.allowlist is not None else None)
        if refused:
            return (f"destination {destination.id!r} is no longer allowed: {refused}; not "
                    "delivered. Grant it again and requeue the delivery to send it after all")
        if self.destination_ids is None or destination.id in self.destination_ids:
            return None
        return (f"destination {destination.id!r} was removed from {self.where} before this "
                "run was delivered; not delivered. Add it back and requeue the delivery to "
                "send it after all")


def _current_config(run: RunRecord, config_dir: str | None) -> _CurrentConfig:
    """Identities allowed to receive the company's data now (owner + ``authorized``) and the
    destinations the current config gives the run's schedule for the run's slot.

    Read from the current config (``config_dir`` or ``EXPORT_CONFIG_DIR``); a company that is
    gone from the config has nobody authorised. Manual exports (and a call without a config
    directory) are not checked for removed destinations: they name their own.
    """
    from export_lib import settings
    from export_lib.ledger.seniority import open_catalog

    directory = config_dir or settings.config_dir()
    if not directory:
        company = schedule_of(run).company
        return _CurrentConfig({company.owner, *company.authorized}, None, "-")
    from export_lib.config.loader import Allowlist

    catalog = open_catalog(directory, only=run.company)
    allowlist = Allowlist(catalog.sources, catalog.connections)
    company = catalog.companies.get(run.company)
    if company is None:
        return _CurrentConfig(set(), None, directory, allowlist)
    where = f"{Path(directory) / run.company}.yaml"
    ids: frozenset[str] | None = None
    if schedule_of(run).kind != "manual":
        found = [s for s in catalog.schedules if s.schedule_id == run.schedule_id]
        version = found[0].version_for(run.slot) if found else None
        ids = frozenset(d.id for d in version.destinations) if version else frozenset()
        if not found:
            where = f"{where} (schedule {run.schedule_id} is gone)"
    return _CurrentConfig({company.owner, *company.authorized}, ids, where, allowlist)


def list_deliveries(ledger: Ledger, run_key: str) -> list[dict[str, Any]]:
    from export_lib.delivery import list_deliveries as _list

    return [{"destination": d["destination_id"], "state": d["state"],
             "version": d["artifact_version"], "attempts": d["attempts"],
             "receipt": d.get("receipt"), "last_error": d.get("last_error")}
            for d in _list(ledger.engine, run_key)]


@scope
def watermark_ready(ledger: Ledger, run_key: str, *, now: datetime,
                    resolver: ConnectionResolver | None = None) -> tuple[bool, str]:
    """``late_data: wait_for_watermark``: has the source's ingestion watermark passed the
    window end + grace? At the run's deadline the answer is yes regardless (export what is there
    rather than miss the deadline); the reason says which."""
    from export_lib.source.connections import resolve
    from export_lib.source.database import open_source, watermark_passed

    run = _get(ledger, run_key)
    bind(**run.log_context())
    schedule = schedule_of(run)
    grace = schedule.policies.late_data.grace
    now = ledger.agreed_now(now)  # reached by both clocks: a fast worker exports nothing early
    if run.deadline is not None and now >= run.deadline:
        return True, f"deadline {run.deadline:%Y-%m-%dT%H:%MZ} reached; exporting what has arrived"
    with open_source(resolve(schedule.query.source, resolver)) as source:
        passed = watermark_passed(source, schedule.query, window_end=run.window_end, grace=grace,
                                  now=now)
    due = run.window_end + grace
    return passed, (f"watermark passed {due:%Y-%m-%dT%H:%MZ}" if passed
                    else f"waiting for the watermark to pass {due:%Y-%m-%dT%H:%MZ}")
