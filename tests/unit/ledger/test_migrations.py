"""The frozen Alembic revisions: they build exactly the live schema, old installations keep
working, and an upgrade from the first revision loses nothing (PostgreSQL and SQLite)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from export_lib.ledger import RunState, deliveries
from export_lib.ledger.database import make_engine
from export_lib.ledger.migrations import context_options, current, head, upgrade
from export_lib.ledger.records import NewDelivery
from export_lib.ledger.runs import Ledger
from export_lib.ledger.schema import metadata
from tests.fixtures.ledger import NOW, registration
from tests.support.legacy_ledger import upgrade_with_old_code

NewDatabase = Callable[[], sa.Engine]


@pytest.fixture(params=["sqlite", "postgresql"])
def new_database(request: pytest.FixtureRequest, tmp_path) -> Iterator[NewDatabase]:
    """A factory of empty ledger databases on the parametrised backend (dropped afterwards)."""
    engines: list[sa.Engine] = []
    databases: list[str] = []
    server = request.getfixturevalue("postgres_server") if request.param == "postgresql" else None

    def make() -> sa.Engine:
        name = f"db_{uuid.uuid4().hex[:12]}"
        if server is None:
            url = f"sqlite:///{tmp_path / name}.db"
        else:
            import psycopg

            with psycopg.connect(server.dsn, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            databases.append(name)
            url = server.sqlalchemy_url.rsplit("/", 1)[0] + f"/{name}"
        engines.append(make_engine(url))
        return engines[-1]

    yield make
    for engine in engines:
        engine.dispose()
    if server is not None:
        import psycopg

        with psycopg.connect(server.dsn, autocommit=True) as conn:
            for name in databases:
                conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def proposed_changes(engine: sa.Engine) -> list[Any]:
    """What ``alembic revision --autogenerate`` would write, configured exactly like env.py."""
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts=context_options(conn))
        return compare_metadata(context, metadata)


def reflected(engine: sa.Engine) -> dict[str, Any]:
    """Every table as the database describes it: columns (type, nullability, server default),
    primary key, foreign keys, indexes, unique and check constraints, with their names."""
    inspector = sa.inspect(engine)

    def by_name(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted(items, key=lambda item: (str(item.get("name")), str(item)))

    schema: dict[str, Any] = {}
    for table in sorted(inspector.get_table_names()):
        schema[table] = {
            "columns": [{k: str(v) if k == "type" else v for k, v in column.items()}
                        for column in inspector.get_columns(table)],
            "primary_key": inspector.get_pk_constraint(table),
            "foreign_keys": by_name(inspector.get_foreign_keys(table)),
            "indexes": by_name(inspector.get_indexes(table)),
            "unique": by_name(inspector.get_unique_constraints(table)),
            "checks": by_name(inspector.get_check_constraints(table)),
        }
    return schema


def _sqlite_ddl(engine: sa.Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.text("SELECT name, sql FROM sqlite_master")).all())


def test_autogenerate_proposes_no_change_on_a_fresh_ledger(new_database: NewDatabase) -> None:
    engine = new_database()
    upgrade(engine)
    assert current(engine) == head() == "0012_delivery_heartbeat"
    assert set(sa.inspect(engine).get_table_names()) == set(metadata.tables) | {
        "export_alembic_version"}
    assert proposed_changes(engine) == []


def test_autogenerate_notices_a_schema_change(new_database: NewDatabase) -> None:
    """The comparison above is not blind: a missing column or index is reported."""
    engine = new_database()
    upgrade(engine)
    with engine.begin() as conn:
        conn.execute(sa.text("DROP INDEX ix_deliveries_state"))
        conn.execute(sa.text("CREATE TABLE stray (id INTEGER PRIMARY KEY)"))
        if engine.dialect.name == "postgresql":  # SQLite cannot change a column's type
            conn.execute(sa.text("ALTER TABLE deliveries ALTER COLUMN acknowledged_at "
                                 "TYPE TIMESTAMP WITHOUT TIME ZONE"))
            conn.execute(sa.text("ALTER TABLE export_runs ALTER COLUMN slot TYPE TEXT"))
    changes = proposed_changes(engine)
    named = [(c[0], c[1].name) for c in changes if isinstance(c, tuple)]
    assert ("add_index", "ix_deliveries_state") in named
    assert ("remove_table", "stray") in named
    if engine.dialect.name == "postgresql":
        # The UtcDateTime hook accepts only a zone-aware timestamp.
        modified = sorted((c[0][2], c[0][3]) for c in changes if isinstance(c, list))
        assert modified == [("deliveries", "acknowledged_at"), ("export_runs", "slot")]


def test_old_and_frozen_revisions_build_the_same_schema(new_database: NewDatabase) -> None:
    old, new, mixed = new_database(), new_database(), new_database()
    upgrade_with_old_code(old)  # what existing installations hold ...
    upgrade(old)  # ... upgraded by this code (0003 retry_until, 0004 unique artifact URIs)
    upgrade(new)
    upgrade_with_old_code(mixed, "0001_ledger")  # installed before deliveries existed ...
    upgrade(mixed)  # ... and upgraded by this code
    assert reflected(old) == reflected(new) == reflected(mixed)
    if new.dialect.name == "sqlite":  # SQLite keeps the DDL text: it must match to the byte
        assert _sqlite_ddl(old) == _sqlite_ddl(new) == _sqlite_ddl(mixed)
    for engine in (old, new, mixed):
        assert current(engine) == head()
        assert proposed_changes(engine) == []


def test_a_ledger_made_by_the_old_code_keeps_working(new_database: NewDatabase) -> None:
    engine = new_database()
    upgrade_with_old_code(engine)
    ledger = Ledger(engine)
    upgrade(engine)  # an old installation upgrades to the newest revision
    ledger.ensure_schema()  # now at head: nothing to do, no error
    upgrade(engine)  # idempotent
    run, created = ledger.register(registration(), NOW)
    assert created
    attempt = ledger.claim_attempt(run.run_key, origin="t", now=NOW,
                                   staging_uri=lambda a: f"file:///s/{a}")
    assert ledger.get_run(run.run_key).state == RunState.READING
    record = deliveries.ensure_record(engine, _delivery(run.run_key), now=NOW)
    assert (record.state, attempt.generation) == ("pending", 1)


def _delivery(run_key: str) -> NewDelivery:
    return NewDelivery(
        delivery_id=deliveries.delivery_id(run_key, 1, "archive"), run_key=run_key,
        artifact_version=1, destination_id="archive", destination_type="local",
        destination_config="{}", target="/exports/archive", artifact_name="f.csv",
        artifact_sha256="a" * 64, artifact_bytes=10, retry_until=NOW + timedelta(days=5),
    )


# The run-ledger tables as revision 0001_ledger laid them out, for writing rows the way the
# code of that time did (no live table objects: they may differ from that layout one day).
TS = sa.DateTime(timezone=True)
OLD_RUNS = sa.table(
    "export_runs", *(sa.column(n) for n in (
        "id", "run_key", "company", "schedule_id", "timezone", "window_kind", "config_version",
        "state", "reason", "owner", "trigger", "current_generation")),
    *(sa.column(n, TS) for n in ("slot", "window_start", "window_end", "source_cutoff",
                                 "deadline", "created_at", "updated_at")),
    sa.column("config_snapshot", sa.JSON),
)
OLD_ATTEMPTS = sa.table(
    "export_attempts", *(sa.column(n) for n in (
        "attempt_id", "run_id", "generation", "origin", "state", "staging_uri",
        "staging_cleaned", "rows", "bytes", "sha256", "error")),
    *(sa.column(n, TS) for n in ("lease_expires_at", "started_at", "finished_at")),
)
OLD_ARTIFACTS = sa.table(
    "export_artifacts", *(sa.column(n) for n in (
        "run_id", "version", "uri", "manifest_uri", "sha256", "rows", "bytes", "format",
        "config_version", "attempt_id", "supersedes", "correction")),
    *(sa.column(n, TS) for n in ("window_start", "window_end", "generated_at")),
)
OLD_EVENTS = sa.table(
    "export_run_events", *(sa.column(n) for n in (
        "run_id", "from_state", "to_state", "attempt_id", "detail")),
    sa.column("at", TS),
)
SLOT = datetime(2026, 3, 1, 5, 0, tzinfo=UTC)


def _fill_previous_layout(engine: sa.Engine) -> None:
    """A ready run with a failed and a published attempt, one artifact and its events."""
    key = "acme/daily-spend/2026-03-01T05:00Z"
    t = [SLOT + timedelta(minutes=m) for m in range(6)]
    with engine.begin() as conn:
        conn.execute(OLD_RUNS.insert().values(
            id=1, run_key=key, company="acme", schedule_id="acme/daily-spend", slot=SLOT,
            window_start=SLOT - timedelta(days=1), window_end=SLOT, timezone="Europe/Berlin",
            window_kind="calendar_day", config_version="v7",
            config_snapshot={"columns": ["day", "spend"]}, source_cutoff=t[0], deadline=None,
            state="ready", reason="artifact v1", owner="owner@acme.example",
            trigger="scheduled", current_generation=2, created_at=t[0], updated_at=t[5]))
        conn.execute(OLD_ATTEMPTS.insert(), [
            dict(attempt_id="a1", run_id=1, generation=1, origin="cli", state="failed",
                 staging_uri="file:///s/a1", staging_cleaned=0, rows=None, bytes=None,
                 sha256=None, error="source down", lease_expires_at=t[1] + timedelta(hours=1),
                 started_at=t[1], finished_at=t[2]),
            dict(attempt_id="a2", run_id=1, generation=2, origin="cli", state="published",
                 staging_uri="file:///s/a2", staging_cleaned=1, rows=42, bytes=4200,
                 sha256="b" * 64, error=None, lease_expires_at=t[3] + timedelta(hours=1),
                 started_at=t[3], finished_at=t[5]),
        ])
        conn.execute(OLD_ARTIFACTS.insert().values(
            run_id=1, version=1, uri="file:///x/v1.csv", manifest_uri="file:///x/v1.json",
            sha256="b" * 64, rows=42, bytes=4200, format="csv", config_version="v7",
            attempt_id="a2", supersedes=None, correction=0, window_start=SLOT - timedelta(days=1),
            window_end=SLOT, generated_at=t[5]))
        conn.execute(OLD_EVENTS.insert(), [
            dict(run_id=1, from_state=None, to_state="registered", attempt_id=None,
                 detail="registered by scheduled", at=t[0]),
            dict(run_id=1, from_state="registered", to_state="reading", attempt_id="a1",
                 detail=None, at=t[1]),
            dict(run_id=1, from_state="reading", to_state="failed", attempt_id="a1",
                 detail="source down", at=t[2]),
            dict(run_id=1, from_state="failed", to_state="reading", attempt_id="a2",
                 detail=None, at=t[3]),
            dict(run_id=1, from_state="reading", to_state="ready", attempt_id="a2",
                 detail="artifact v1", at=t[5]),
        ])


def test_upgrade_from_the_first_revision_keeps_every_row(new_database: NewDatabase) -> None:
    engine = new_database()
    upgrade(engine, "0001_ledger")
    assert current(engine) == "0001_ledger"
    _fill_previous_layout(engine)
    upgrade(engine)
    assert current(engine) == head()

    ledger = Ledger(engine)
    key = "acme/daily-spend/2026-03-01T05:00Z"
    run = ledger.get_run(key)
    assert run is not None
    assert (run.state, run.current_generation, run.config_version, run.slot, run.source_cutoff) \
        == ("ready", 2, "v7", SLOT, SLOT)
    assert run.config_snapshot == {"columns": ["day", "spend"]}
    assert run.slot.tzinfo is UTC and run.window_start == SLOT - timedelta(days=1)
    assert [(a.attempt_id, a.state, a.rows, a.error) for a in ledger.attempts(key)] == [
        ("a1", "failed", None, "source down"), ("a2", "published", 42, None)]
    (artifact,) = ledger.artifacts(key)
    assert (artifact.version, artifact.sha256, artifact.rows, artifact.generated_at) == (
        1, "b" * 64, 42, SLOT + timedelta(minutes=5))
    assert [(e["from_state"], e["to_state"]) for e in ledger.events(key)] == [
        (None, "registered"), ("registered", "reading"), ("reading", "failed"),
        ("failed", "reading"), ("reading", "ready")]
    assert ledger.staging_garbage()[0].attempt_id == "a1"

    # The upgraded ledger is fully usable: the old run regenerates, and deliveries record.
    attempt = ledger.claim_attempt(key, origin="t", now=NOW, regenerate=True,
                                   staging_uri=lambda a: f"file:///s/{a}")
    assert attempt.generation == 3 and ledger.get_run(key).state == RunState.READING
    deliveries.ensure_record(engine, _delivery(key), now=NOW)
    assert [d["state"] for d in deliveries.list_deliveries(engine, key)] == ["pending"]
    assert proposed_changes(engine) == []
