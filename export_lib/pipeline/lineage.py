"""What an export run reads and writes, named the way OpenLineage names datasets.

A lineage backend (Marquez, DataHub, a warehouse's catalog) draws the export as one more edge
of the graph its users already read: the source table → the schedule's artifacts → each
destination. This module says *which* datasets those are, from the run's captured config and
the ledger; ``export_airflow.tasks.lineage`` turns it into OpenLineage facets for Airflow's
OpenLineage provider (ADR 0027). Airflow-free and side-effect free: it opens no source, store
or destination, and it never puts a credential in a name — namespaces carry scheme, host and
port only (the same rule as :meth:`Connection.masked_uri`).

Naming (OpenLineage's dataset naming where it defines one):

==============  =================================  ==========================================
dataset         namespace                          name
==============  =================================  ==========================================
PostgreSQL      ``postgres://host:port``           ``database.schema.table`` (``public`` when
                                                   the export names no schema)
SQLite          ``sqlite://<absolute file path>``  ``main.table``
artifacts       the store: ``s3://bucket``,        the schedule's folder in it (its Airflow
                ``gs://bucket``, ``file``          asset, ADR 0024), e.g. ``prefix/acme/daily-spend``
local dir       ``file``                           the absolute directory
S3 / GCS        ``s3://bucket`` / ``gs://bucket``  the key prefix (``/`` when none)
SFTP            ``sftp://host:port``               the directory
webhook         ``https://host:port``              the endpoint path
e-mail          ``smtp://host:port``               the recipients, comma-separated
==============  =================================  ==========================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from export_lib.config.destinations import (
    EmailDestination,
    GcsDestination,
    LocalDestination,
    S3Destination,
    SftpDestination,
    WebhookDestination,
)
from export_lib.ledger import Ledger
from export_lib.ledger.records import RunRecord
from export_lib.periods.names import period_label
from export_lib.pipeline.asset_events import schedule_asset_uri
from export_lib.pipeline.stages import schedule_of
from export_lib.source.connections import Connection, ConnectionResolver, resolve

DEFAULT_PORTS = {"postgres": 5432, "sftp": 22, "https": 443, "http": 80, "smtp": 25}


@dataclass(frozen=True)
class LineageDataset:
    """One dataset. ``columns`` are the exported columns (the schema's field names), and
    ``columns_from`` the dataset each of them is copied from unchanged (column lineage)."""

    namespace: str
    name: str
    columns: tuple[str, ...] = ()
    columns_from: LineageDataset | None = None
    # The file's type of each column (the schema contract's, ADR 0025), once a render of the
    # run has staged a file; empty before.
    types: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunLineage:
    """What one task of an export run reads and writes, and the run's facts (``run``: run key,
    company, schedule, period, window, time zone, config version; publish adds the version,
    sha256 and artifact URI)."""

    inputs: tuple[LineageDataset, ...]
    outputs: tuple[LineageDataset, ...]
    run: dict[str, str] = field(default_factory=dict)


def source_dataset(conn: Connection, table: str, schema: str | None,
                   columns: tuple[str, ...] = ()) -> LineageDataset:
    """The source table as OpenLineage names it; only PostgreSQL and SQLite are sources."""
    if conn.conn_type in ("sqlite", "file"):
        return LineageDataset(f"sqlite://{conn.schema or conn.host or ''}", f"main.{table}",
                              columns)
    port = conn.port or DEFAULT_PORTS["postgres"]
    return LineageDataset(f"postgres://{conn.host or 'localhost'}:{port}",
                          f"{conn.schema or ''}.{schema or 'public'}.{table}", columns)


def split_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` → (``s3://bucket``, ``a/b``); ``file:///x/y`` → (``file``, ``/x/y``)."""
    parts = urlsplit(uri)
    if parts.scheme == "file":
        return "file", parts.path
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}", parts.path.lstrip("/") or "/"


def artifacts_dataset(run: RunRecord, columns: tuple[str, ...] = (),
                      source: LineageDataset | None = None,
                      root: str | None = None, types: tuple[str, ...] = ()) -> LineageDataset:
    """The schedule's artifacts: its folder in the artifact store, i.e. its Airflow asset."""
    namespace, name = split_uri(schedule_asset_uri(run.company, run.schedule_id, root))
    return LineageDataset(namespace, name, columns, source if columns else None, types)


def file_types(ledger: Ledger, run_key: str, columns: tuple[str, ...]) -> tuple[str, ...]:
    """The column types of the run's newest staged file (empty before any render staged one,
    or when its columns are not the captured ones)."""
    staged = [a.file_schema for a in ledger.attempts(run_key) if a.file_schema]
    if not staged:
        return ()
    types = {str(c["name"]): str(c["type"]) for c in staged[-1]}
    return tuple(types[c] for c in columns) if set(columns) <= set(types) else ()


def _authority(conn: Connection, scheme: str) -> str:
    host = (conn.host or "localhost").split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    if ":" in host:  # an HTTP connection's host may carry its port
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{conn.port or DEFAULT_PORTS.get(scheme, 0)}"


def destination_dataset(destination: object, *, resolver: ConnectionResolver | None = None,
                        exports_root: str | None = None) -> LineageDataset:
    """Where one destination puts the files (see the module's table)."""
    from export_lib.delivery.transports.local import default_exports_root

    match destination:
        case LocalDestination(path=path):
            root = exports_root or str(default_exports_root().resolve())
            return LineageDataset("file", path if path.startswith("/") else f"{root}/{path}")
        case S3Destination(bucket=bucket, prefix=prefix):
            return LineageDataset(f"s3://{bucket}", prefix or "/")
        case GcsDestination(bucket=bucket, prefix=prefix):
            return LineageDataset(f"gs://{bucket}", prefix or "/")
        case SftpDestination(conn_id=conn_id, path=path):
            return LineageDataset(_authority(resolve(conn_id, resolver), "sftp"), path)
        case WebhookDestination(conn_id=conn_id, endpoint=endpoint):
            conn = resolve(conn_id, resolver)
            scheme = conn.masked_uri().split("://", 1)[0]
            return LineageDataset(_authority(conn, scheme if scheme in ("http", "https")
                                             else "https"), endpoint or "/")
        case EmailDestination(conn_id=conn_id, to=to):
            return LineageDataset(_authority(resolve(conn_id, resolver), "smtp"), ",".join(to))
    raise TypeError(f"no lineage for destination type {type(destination).__name__}")


def run_facts(run: RunRecord) -> dict[str, str]:
    return {"run_key": run.run_key, "company": run.company, "schedule": run.schedule_id,
            "period": period_label(run.window_start, run.window_end, run.timezone),
            "window_start": run.window_start.isoformat(),
            "window_end": run.window_end.isoformat(), "timezone": run.timezone,
            "config_version": run.config_version}


def _run(ledger: Ledger, run_key: str) -> RunRecord:
    run = ledger.get_run(run_key)
    if run is None:
        raise LookupError(f"run {run_key} is not in the ledger")
    return run


def export_lineage(ledger: Ledger, run_key: str, *,
                   resolver: ConnectionResolver | None = None,
                   root: str | None = None) -> RunLineage:
    """Render's and publish's lineage: the captured query's table in, the schedule's
    artifacts out, every exported column copied unchanged. Publish adds the newest version's
    facts once it exists (version, sha256, artifact URI)."""
    run = _run(ledger, run_key)
    query = schedule_of(run).query
    source = source_dataset(resolve(query.source, resolver), query.table, query.table_schema,
                            tuple(query.columns))
    facts = run_facts(run)
    artifact = ledger.latest_artifact(run_key)
    if artifact is not None:
        facts.update(version=str(artifact.version), sha256=artifact.sha256,
                     artifact_uri=artifact.uri)
    return RunLineage((source,), (artifacts_dataset(
        run, source.columns, source, root, file_types(ledger, run_key, source.columns)),), facts)


def deliver_lineage(ledger: Ledger, run_key: str, destination_id: str, *,
                    resolver: ConnectionResolver | None = None, root: str | None = None,
                    exports_root: str | None = None) -> RunLineage:
    """Deliver's lineage: the schedule's artifacts in, the destination out (the captured
    destination: the one this run delivers to, whatever the config says today)."""
    from export_lib.config.destinations import select_destinations

    run = _run(ledger, run_key)
    (destination,) = select_destinations(schedule_of(run).destinations, [destination_id])
    return RunLineage((artifacts_dataset(run, root=root),),
                      (destination_dataset(destination, resolver=resolver,
                                           exports_root=exports_root),),
                      run_facts(run))
