"""The asset an export schedule publishes to, and the event a newly published artifact makes.

An export is the start of someone else's pipeline (a warehouse load, a partner's job): each
schedule is one asset, named ``export:<schedule id>`` with the URI of its folder in the artifact
store (``s3://bucket/prefix/acme/daily-spend``, ``file:///…/artifacts/acme/daily-spend``), and
every *new* artifact version is one event on it. A re-run that finds its artifact already
published (a cleared publish, an Airflow retry after the commit, unchanged content) makes no
event, so a consumer scheduled on the asset runs once per published period and version. The
event's extra is the manifest's: what a consumer needs to find, check and date the file without
reading our ledger — its schema too (ADR 0025): ``schema`` (the columns), ``schema_fingerprint``,
``schema_major``, and ``schema_change`` (``warn`` or ``new_major`` when the file was published
under a schema change, with ``schema_diff``; None otherwise). Airflow-free:
``export_airflow.tasks.assets`` turns it into an Airflow asset event.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any

from export_lib.checksums import sha256_stream
from export_lib.errors import ArtifactValidationError
from export_lib.ledger import Ledger
from export_lib.periods.names import period_label, schedule_slug
from export_lib.pipeline.results import PublishResult, ResultModel
from export_lib.storage.stores import ArtifactStore, root_uri

if TYPE_CHECKING:
    from export_lib.ledger.records import ArtifactRecord, RunRecord

NAME_PREFIX = "export:"


class AssetEvent(ResultModel):
    """One event on the schedule's asset: ``extra`` describes the artifact version it announces."""

    name: str
    uri: str
    extra: dict[str, Any]


def schedule_asset_name(schedule_id: str) -> str:
    """``export:acme/daily-spend``: the asset's name, what a consumer schedules on."""
    return NAME_PREFIX + schedule_id


def schedule_asset_uri(company: str, schedule_id: str, root: str | None = None) -> str:
    """The schedule's folder in the artifact store (``root``, else ``EXPORT_ARTIFACT_ROOT``):
    every artifact of the schedule is an object under it."""
    return f"{root_uri(root)}/{company}/{schedule_slug(schedule_id)}"


def published_event(ledger: Ledger, published: PublishResult, *,
                    root: str | None = None) -> AssetEvent | None:
    """The event for ``published`` when it is a new artifact version; None when publish found
    nothing new (no consumer is told twice about one version)."""
    if not published.created:
        return None
    run = ledger.get_run(published.run_key)
    artifact = next((a for a in ledger.artifacts(published.run_key)
                     if a.version == published.version), None)
    if run is None or artifact is None:  # publish just recorded both: a ledger out of step
        raise LookupError(f"run {published.run_key} v{published.version} is not in the ledger")
    return artifact_event(ledger, run, artifact, root=root)


def owed_batch_events(ledger: Ledger, run_keys: Iterable[str], origin_prefix: str,
                      announced: Collection[tuple[str, int]], *,
                      root: str | None = None) -> list[AssetEvent]:
    """The events a batch task (ADR 0032) owes for ``run_keys``: one for each artifact version
    a try of that task published (its attempt's origin starts with ``origin_prefix``, e.g.
    ``airflow:recovery_batch__acme/<run id>/export_periods/``) that is not ``announced``
    already ((run key, version) pairs: the events Airflow recorded for the task).

    Airflow records a task's outlet events only when the task succeeds: the versions a failed
    try (a period of it failed) or a killed one published were never announced, and the next
    try finds those periods done. It announces them then, in slot order, once each."""
    owed = []
    for key in run_keys:
        run = ledger.get_run(key)
        if run is None:
            continue
        for artifact in ledger.artifacts(key):
            if (key, artifact.version) in announced:
                continue
            if ledger.get_attempt(artifact.attempt_id).origin.startswith(origin_prefix):
                owed.append(artifact_event(ledger, run, artifact, root=root))
    return owed


def artifact_event(ledger: Ledger, run: RunRecord, artifact: ArtifactRecord, *,
                   root: str | None = None) -> AssetEvent:
    """The event announcing ``artifact`` (a version of ``run``): the manifest's fields."""
    extra = {
        "run_key": run.run_key, "company": run.company, "schedule": run.schedule_id,
        "period": period_label(run.window_start, run.window_end, run.timezone),
        "slot_utc": run.slot.isoformat(), "timezone": run.timezone,
        "window_start_utc": artifact.window_start.isoformat(),
        "window_end_utc": artifact.window_end.isoformat(),
        "config_version": artifact.config_version, "version": artifact.version,
        "supersedes": artifact.supersedes, "correction": bool(artifact.correction),
        "sha256": artifact.sha256, "rows": artifact.rows, "bytes": artifact.bytes,
        "format": artifact.format, "artifact_uri": artifact.uri,
        "manifest_uri": artifact.manifest_uri,
        "generated_at": artifact.generated_at.isoformat(),
        "schema": ledger.get_attempt(artifact.attempt_id).file_schema,
        "schema_fingerprint": artifact.schema_fingerprint,
        "schema_major": artifact.schema_major, "schema_change": artifact.schema_change,
        "schema_diff": (artifact.schema_diff or "").splitlines(),
    }
    return AssetEvent(name=schedule_asset_name(run.schedule_id),
                      uri=schedule_asset_uri(run.company, run.schedule_id, root), extra=extra)


def check_announced(store: ArtifactStore, extra: dict[str, Any], *,
                    schema_major: int | None = None) -> dict[str, Any]:
    """What a consumer does first with an event: read the artifact it names and check its
    sha256 and size against the event (a file replaced or truncated after the event is
    refused, naming both digests). Returns the fields a load would record.

    :param schema_major: the schema major version the consumer was written for (ADR 0025): a
        file of another major is refused before it is read (None: any major)
    """
    uri = extra["artifact_uri"]
    announced = extra.get("schema_major")
    if schema_major is not None and announced is not None and announced != schema_major:
        diff = "; ".join(extra.get("schema_diff") or ())
        raise ArtifactValidationError(
            f"{uri}: {extra['schedule']} {extra['period']} v{extra['version']} was published "
            f"under schema major {announced}{f' ({diff})' if diff else ''}, this consumer "
            f"reads major {schema_major}: update it for the new schema before loading this "
            "file")
    with store.read(uri) as fh:
        digest, size = sha256_stream(fh)
    if (digest, size) != (extra["sha256"], extra["bytes"]):
        raise ArtifactValidationError(
            f"{uri}: sha256 {digest[:16]}… and {size} bytes, but the asset event of "
            f"{extra['schedule']} {extra['period']} v{extra['version']} announced "
            f"{str(extra['sha256'])[:16]}… and {extra['bytes']} bytes; the object changed after "
            "it was published: do not load it, ask the exports team")
    loaded = {key: extra[key] for key in ("run_key", "schedule", "period", "version",
                                          "correction", "rows", "sha256", "artifact_uri")}
    # Events announced before the schema contract (ADR 0025) carry no schema fields.
    return {**loaded, **{key: extra.get(key) for key in ("schema_fingerprint", "schema_major",
                                                         "schema_change")}}
