"""The schema contract against a real PostgreSQL source (issue 24 item 3, ADR 0025): a column's
type changes between two runs (ALTER TABLE) and each ``schema_policy`` does exactly what it says
— ``fail`` fails with the diff, ``warn`` publishes and leaves one alert to send, ``new_major``
publishes under the next major version of the file name — and the consumer sees which in the
manifest and the asset event's extra."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
import yaml

from export_lib.errors import ArtifactValidationError, SchemaContractError
from export_lib.ledger import RunState
from export_lib.ledger.contracts import history, schema_notice_key
from export_lib.ledger.notices import claim_notice, confirm_notice
from export_lib.pipeline import publish_run, register_run, render_run
from export_lib.pipeline.asset_events import check_announced, published_event
from export_lib.pipeline.schema_contract import pending_schema_alerts
from export_lib.source.demo import seed_source
from tests.world import COMPANIES, SEEDED_AT, build_world

DAILY = "acme/daily-spend"
# Three daily slots (07:00 Berlin): the periods 2026-03-28, 2026-03-29 and 2026-03-30.
SLOTS = [datetime(2026, 3, day, 5, 0, tzinfo=UTC) for day in (29, 30, 31)]
KEYS = [f"{DAILY}/{slot:%Y-%m-%dT%H:%MZ}" for slot in SLOTS]
BEFORE = [{"name": "company_id", "type": "string", "nullable": False},
          {"name": "widget_id", "type": "string", "nullable": False},
          {"name": "event_time", "type": "timestamptz", "nullable": False},
          {"name": "value", "type": "decimal(14,2)", "nullable": False}]
AFTER = [*BEFORE[:3], {"name": "value", "type": "float64", "nullable": False}]
RETYPED = "column value: type decimal(14,2) → float64"
RETYPED_RE = re.escape(RETYPED)


def fingerprint(columns: list[dict]) -> str:
    """The contract's fingerprint, spelled out: sha256 of the canonical JSON of the columns."""
    canonical = json.dumps(columns, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@pytest.fixture()
def pg_world(tmp_path, monkeypatch, postgres_server, pg_ledger_database):
    """A world whose demo source and ledger are one PostgreSQL database, and its DSN."""
    from export_lib.source.connections import parse_connection

    dsn = postgres_server.dsn.rsplit("/", 1)[0] + "/" + pg_ledger_database.rsplit("/", 1)[1]
    world = build_world(tmp_path, pg_ledger_database, days=3, AIRFLOW_CONN_DEMO_SOURCE=dsn)
    seed_source(parse_connection("demo_source", dsn), COMPANIES, now=SEEDED_AT + timedelta(
        days=1), days=4)
    monkeypatch.setenv("EXPORT_ARTIFACT_ROOT", str(world.artifacts))
    return world.use(monkeypatch), dsn


def set_policy(world, policy: str | None, **extra) -> None:
    """Give acme/daily-spend ``schema_policy: policy`` (None: leave it out) and ``extra``."""
    path = world.config / "acme.yaml"
    data = yaml.safe_load(path.read_text())
    export = data["widget_exports"][0]
    assert export["id"] == "daily-spend"
    if policy is not None:
        export["schema_policy"] = policy
    export.update(extra)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def alter(dsn: str, statement: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement)


def export(world, index: int, *, regenerate: bool = False, correction: bool = False):
    """Register (or find) slot ``index``, render and publish it; the PublishResult."""
    ledger = world.ledger()
    now = SLOTS[index] + timedelta(minutes=5 + (60 if regenerate else 0))
    key = register_run(ledger, world.schedule(DAILY), SLOTS[index], now=now).run_key
    rendered = render_run(ledger, world.store, key, now=now, regenerate=regenerate)
    return publish_run(ledger, world.store, key, rendered.attempt_id, now=now,
                       correction=correction)


def manifest(ledger, key: str, version: int = 1) -> dict:
    artifact = next(a for a in ledger.artifacts(key) if a.version == version)
    return json.loads(Path(artifact.manifest_uri.removeprefix("file://")).read_text())


def test_the_first_file_sets_the_contract_and_the_manifest_carries_it(pg_world):
    world, _ = pg_world
    published = export(world, 0)
    ledger = world.ledger()
    got = manifest(ledger, KEYS[0])
    assert (got["schema"], got["schema_fingerprint"], got["schema_major"], got["schema_change"],
            got["schema_diff"]) == (BEFORE, fingerprint(BEFORE), 1, None, [])
    # Major 1 keeps the file name every artifact had before the contract existed.
    assert published.uri.endswith("/acme__daily-spend__2026-03-28__slot-20260329T0500Z__v1.csv")
    (entry,) = history(ledger.engine, DAILY)
    assert (entry.seq, entry.major, entry.change, entry.fingerprint, entry.run_key,
            entry.period) == (1, 1, "initial", fingerprint(BEFORE), KEYS[0], "2026-03-28")
    event = published_event(ledger, published)
    assert {k: event.extra[k] for k in ("schema", "schema_fingerprint", "schema_major",
                                        "schema_change", "schema_diff")} == {
        k: got[k] for k in ("schema", "schema_fingerprint", "schema_major", "schema_change",
                            "schema_diff")}


def test_the_fingerprint_is_the_same_for_csv_and_parquet(pg_world):
    """acme/hourly-clicks reads the same columns of the same table into Parquet."""
    world, _ = pg_world
    export(world, 0)
    ledger = world.ledger()
    hourly = world.schedule("acme/hourly-clicks")
    slot = datetime(2026, 3, 29, 10, 0, tzinfo=UTC)
    key = register_run(ledger, hourly, slot, now=slot).run_key
    rendered = render_run(ledger, world.store, key, now=slot)
    published = publish_run(ledger, world.store, key, rendered.attempt_id, now=slot)
    assert published.uri.endswith(".parquet")
    got = manifest(ledger, key)
    assert (got["format"], got["schema"], got["schema_fingerprint"]) == (
        "parquet", BEFORE, manifest(ledger, KEYS[0])["schema_fingerprint"])


def test_fail_is_the_default_and_fails_with_the_diff_before_reading_a_row(pg_world):
    world, dsn = pg_world
    set_policy(world, None)  # the shipped config: no schema_policy
    export(world, 0)
    alter(dsn, "ALTER TABLE widget_metrics ALTER COLUMN value TYPE double precision")
    ledger = world.ledger()
    expected = (
        rf"^schedule '{DAILY}': the file's schema differs from its published contract "
        r"\(schema_policy: fail\), so nothing is published:\n"
        rf"  {RETYPED_RE}\n"
        rf"contract {fingerprint(BEFORE)[:12]} \(major 1, first published for 2026-03-28 by "
        rf"{KEYS[0]}\) → this file {fingerprint(AFTER)[:12]}\. Restore the source's columns, "
        r"or give the export schema_policy: warn .* or new_major .*\(effective_from\)$")
    with pytest.raises(SchemaContractError, match=expected) as failed:
        export(world, 1)
    assert failed.value.diff == (RETYPED,) and failed.value.retryable is False
    run = ledger.get_run(KEYS[1])
    (attempt,) = ledger.attempts(KEYS[1])
    assert (run.state, attempt.state, attempt.rows, ledger.artifacts(KEYS[1])) == (
        RunState.FAILED, "failed", None, [])  # no row was read, nothing staged or published
    assert attempt.error == str(failed.value)
    # A retry meets the same contract and fails the same way; the contract did not move.
    with pytest.raises(SchemaContractError, match=expected):
        export(world, 1)
    assert [e.fingerprint for e in history(ledger.engine, DAILY)] == [fingerprint(BEFORE)]


def test_nullability_is_part_of_the_contract(pg_world):
    world, dsn = pg_world
    export(world, 0)
    alter(dsn, "ALTER TABLE widget_metrics ALTER COLUMN value DROP NOT NULL")
    with pytest.raises(SchemaContractError,
                       match=r":\n  column value: not null → nullable\ncontract "):
        export(world, 1)


def test_warn_publishes_the_change_once_and_later_runs_are_plain(pg_world):
    world, dsn = pg_world
    set_policy(world, "warn")
    export(world, 0)
    alter(dsn, "ALTER TABLE widget_metrics ALTER COLUMN value TYPE double precision")
    ledger = world.ledger()
    changed = export(world, 1)
    got = manifest(ledger, KEYS[1])
    assert (got["schema"], got["schema_fingerprint"], got["schema_major"], got["schema_change"],
            got["schema_diff"]) == (AFTER, fingerprint(AFTER), 1, "warn", [RETYPED])
    assert changed.uri.endswith("__2026-03-29__slot-20260330T0500Z__v1.csv")  # same major
    event = published_event(ledger, changed)
    assert (event.extra["schema_change"], event.extra["schema_major"],
            event.extra["schema_fingerprint"], event.extra["schema_diff"]) == (
        "warn", 1, fingerprint(AFTER), [RETYPED])
    first, second = history(ledger.engine, DAILY)
    assert (second.seq, second.major, second.change, second.previous_fingerprint,
            second.diff, second.run_key) == (2, 1, "warn", fingerprint(BEFORE), (RETYPED,),
                                             KEYS[1])
    # The one alert of this change waits to be sent; once sent it is never asked for again.
    assert [e.seq for e in pending_schema_alerts(ledger, DAILY)] == [2]
    key = schema_notice_key(DAILY, 2)
    claim = claim_notice(ledger.engine, key=key, kind="alert", run_key=KEYS[1],
                         reason="schema_change", now=SLOTS[1])
    assert claim.granted
    confirm_notice(ledger.engine, key, SLOTS[1])
    assert pending_schema_alerts(ledger, DAILY) == []
    # The new schema is the contract now: the next run publishes it without a marker.
    later = export(world, 2)
    assert (manifest(ledger, KEYS[2])["schema_change"], manifest(ledger, KEYS[2])["schema_major"],
            published_event(ledger, later).extra["schema_change"]) == (None, 1, None)
    assert len(history(ledger.engine, DAILY)) == 2 and first.change == "initial"
    assert pending_schema_alerts(ledger, DAILY) == []


def test_new_major_publishes_under_the_next_major_and_a_correction_stays_a_version(pg_world):
    world, dsn = pg_world
    set_policy(world, "new_major")
    export(world, 0)
    alter(dsn, "ALTER TABLE widget_metrics ALTER COLUMN value TYPE double precision")
    ledger = world.ledger()
    major = export(world, 1)
    assert major.uri.endswith(
        "/acme/daily-spend/acme__daily-spend__2026-03-29__slot-20260330T0500Z__schema-2__v1.csv")
    got = manifest(ledger, KEYS[1])
    assert (got["schema"], got["schema_major"], got["schema_change"], got["schema_diff"],
            got["version"], got["correction"]) == (AFTER, 2, "new_major", [RETYPED], 1, False)
    extra = published_event(ledger, major).extra
    assert (extra["schema_major"], extra["schema_change"]) == (2, "new_major")
    # A consumer written for major 1 refuses the file before reading it; one for 2 loads it.
    with pytest.raises(ArtifactValidationError,
                       match=r"published under schema major 2 \(column value: type "
                             r"decimal\(14,2\) → float64\), this consumer reads major 1"):
        check_announced(world.store, extra, schema_major=1)
    assert check_announced(world.store, extra, schema_major=2)["schema_major"] == 2
    # The next run stays on major 2, unmarked.
    export(world, 2)
    assert [(e.seq, e.major, e.change) for e in history(ledger.engine, DAILY)] == [
        (1, 1, "initial"), (2, 2, "new_major")]
    later = manifest(ledger, KEYS[2])
    assert (later["schema_major"], later["schema_change"]) == (2, None)
    # A correction of the first period (v2, regenerated after the change) is a new version
    # of that period; its file has the new schema, so it is under major 2 — the same change,
    # not a third contract.
    corrected = export(world, 0, regenerate=True, correction=True)
    assert corrected.uri.endswith("__2026-03-28__slot-20260329T0500Z__schema-2__v2.csv")
    got = manifest(ledger, KEYS[0], version=2)
    assert (got["version"], got["supersedes"], got["correction"], got["schema_major"],
            got["schema_change"]) == (2, 1, True, 2, "new_major")
    assert len(history(ledger.engine, DAILY)) == 2
    # One artifact per run and version, every name different (ADR 0002).
    uris = [a.uri for k in KEYS for a in ledger.artifacts(k)]
    assert len(uris) == len(set(uris)) == 4


def test_a_retry_compares_with_the_contract_its_run_started_with(pg_world):
    """Slot 2 fails under ``fail``; slot 3 is in force under ``warn`` and makes the new schema
    the contract. Slot 2 run again still fails: its contract is the one it first checked."""
    world, dsn = pg_world
    set_policy(world, "warn", effective_from=SLOTS[2].isoformat(),
               history=[{"schema_policy": "fail"}])
    export(world, 0)
    alter(dsn, "ALTER TABLE widget_metrics ALTER COLUMN value TYPE double precision")
    with pytest.raises(SchemaContractError, match=RETYPED_RE):
        export(world, 1)
    export(world, 2)
    ledger = world.ledger()
    assert [e.change for e in history(ledger.engine, DAILY)] == ["initial", "warn"]
    assert ledger.get_run(KEYS[1]).schema_baseline == 1
    with pytest.raises(SchemaContractError, match=rf"contract {fingerprint(BEFORE)[:12]} "):
        export(world, 1)
    assert ledger.artifacts(KEYS[1]) == []


def test_exportctl_schema_shows_the_contract_and_its_history(pg_world):
    world, dsn = pg_world
    set_policy(world, "new_major")
    empty = world.exportctl("schema", DAILY)
    assert (empty.returncode, empty.stdout.strip()) == (
        0, f"{DAILY}: no schema published yet (schema_policy new_major); its first published "
           "file's schema becomes the contract")
    export(world, 0)
    alter(dsn, "ALTER TABLE widget_metrics ALTER COLUMN value TYPE double precision")
    export(world, 1)
    shown = world.exportctl("schema", DAILY)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        f"{DAILY}: schema contract {fingerprint(AFTER)[:12]}, major 2 "
        "(schema_policy new_major)",
        f"  since 2026-03-29 (run {KEYS[1]}, recorded 2026-03-30T05:05Z)",
        "  company_id  string           not null",
        "  widget_id   string           not null",
        "  event_time  timestamptz      not null",
        "  value       float64          not null",
        "",
        "history (oldest first):",
        f"  #1 major 1  {fingerprint(BEFORE)[:12]}  initial    first period 2026-03-28  "
        f"recorded 2026-03-29T05:05Z  run {KEYS[0]}",
        f"  #2 major 2  {fingerprint(AFTER)[:12]}  new_major  first period 2026-03-29  "
        f"recorded 2026-03-30T05:05Z  run {KEYS[1]}",
        f"      {RETYPED}"]
    as_json = json.loads(world.exportctl("schema", DAILY, "--json").stdout)
    assert (as_json["schedule"], as_json["schema_policy"], as_json["current"]["major"],
            as_json["current"]["columns"], [h["fingerprint"] for h in as_json["history"]]) == (
        DAILY, "new_major", 2, AFTER, [fingerprint(BEFORE), fingerprint(AFTER)])
    assert as_json["history"][1] == {
        "seq": 2, "major": 2, "fingerprint": fingerprint(AFTER), "change": "new_major",
        "previous_fingerprint": fingerprint(BEFORE), "diff": [RETYPED],
        "first_run": KEYS[1], "first_period": "2026-03-29",
        "first_slot_utc": "2026-03-30T05:00:00Z", "recorded_at_utc": "2026-03-30T05:05:00Z",
        "columns": AFTER}


def test_exportctl_schema_refuses_an_unknown_schedule(pg_world):
    world, _ = pg_world
    result = world.exportctl("schema", "acme/daily-spned")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("exportctl: unknown schedule 'acme/daily-spned'")
    assert "did you mean" in result.stderr and "'acme/daily-spend'" in result.stderr
    assert result.stderr.rstrip().endswith("(and the ledger has no schema contract for it)")


def test_exportctl_run_warns_of_a_published_change_and_fails_with_the_diff(pg_world):
    world, dsn = pg_world
    set_policy(world, "warn")
    assert "warnings" not in world.run(DAILY, "2026-03-29T05:00Z")
    alter(dsn, "ALTER TABLE widget_metrics ALTER COLUMN value TYPE double precision")
    warned = world.exportctl("run", str(world.config), "--schedule", DAILY, "--slot",
                             "2026-03-30T05:00Z", "--json")
    warning = f"published v1 under a changed schema (schema_policy warn, schema major 1): {RETYPED}"
    assert (warned.returncode, warned.stderr) == (0, f"exportctl: warning: {warning}\n")
    assert json.loads(warned.stdout)["warnings"] == [warning]
    # Under the shipped default (fail), the next change fails the run with the diff.
    set_policy(world, "fail")
    alter(dsn, "ALTER TABLE widget_metrics ALTER COLUMN value DROP NOT NULL")
    failed = world.exportctl("run", str(world.config), "--schedule", DAILY, "--slot",
                             "2026-03-31T05:00Z")
    assert failed.returncode == 1 and failed.stdout == ""
    assert failed.stderr.startswith(
        f"exportctl: SchemaContractError: schedule '{DAILY}': the file's schema differs from its "
        "published contract (schema_policy: fail), so nothing is published:\n"
        "  column value: not null → nullable\n"
        f"contract {fingerprint(AFTER)[:12]} (major 1, first published for 2026-03-29 by "
        f"{KEYS[1]})")


def test_two_runs_publishing_one_change_at_once_record_it_once(pg_world):
    """Both runs checked against contract 1 and publish the same new schema together: the
    first holds the schedule's lock while it promotes (slowly here), the second waits and
    publishes under the entry the first recorded — one entry, one alert to send."""
    import threading
    import time

    from export_lib.storage.stores import LocalStore

    world, dsn = pg_world
    set_policy(world, "warn")
    export(world, 0)
    alter(dsn, "ALTER TABLE widget_metrics ALTER COLUMN value TYPE double precision")
    ledger = world.ledger()
    promoting = threading.Event()

    class SlowStore(LocalStore):
        def promote(self, staging_uri, key, manifest):
            if not promoting.is_set():  # the first promotion holds its transaction open
                promoting.set()
                time.sleep(1.5)
            return super().promote(staging_uri, key, manifest)

    store = SlowStore(world.artifacts)
    staged = []
    for index in (1, 2):
        now = SLOTS[index] + timedelta(minutes=5)
        key = register_run(ledger, world.schedule(DAILY), SLOTS[index], now=now).run_key
        staged.append((key, render_run(ledger, store, key, now=now).attempt_id, now))
    outcomes: dict[str, object] = {}

    def publish(key: str, attempt_id: str, now: datetime) -> None:
        try:
            outcomes[key] = publish_run(ledger, store, key, attempt_id, now=now)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            outcomes[key] = exc

    first = threading.Thread(target=publish, args=staged[0])
    first.start()
    assert promoting.wait(30)
    second = threading.Thread(target=publish, args=staged[1])
    second.start()
    first.join(60)
    second.join(60)
    assert all(not isinstance(o, Exception) for o in outcomes.values()), outcomes
    assert [(e.seq, e.change, e.run_key) for e in history(ledger.engine, DAILY)] == [
        (1, "initial", KEYS[0]), (2, "warn", KEYS[1])]
    assert [manifest(ledger, k)["schema_change"] for k in KEYS[1:]] == ["warn", "warn"]
    assert [e.seq for e in pending_schema_alerts(ledger, DAILY)] == [2]


def test_a_manual_export_has_no_contract_but_its_manifest_has_the_schema(pg_world):
    from export_lib.pipeline import RunContext, start_manual

    world, dsn = pg_world
    export(world, 0)  # the schedule's contract: value decimal(14,2)
    alter(dsn, "ALTER TABLE widget_metrics ALTER COLUMN value TYPE double precision")
    ledger, now = world.ledger(), SLOTS[1]
    params = {"company": "acme", "base_export": DAILY, "reason": "audit request 42",
              "columns": ["widget_id", "value"], "window_start": "2026-03-28T00:00:00Z",
              "window_end": "2026-03-29T00:00:00Z"}
    key = start_manual(ledger, str(world.config), params, run_id="manual__audit",
                       requested_at=now, now=now, ctx=RunContext()).run_key
    rendered = render_run(ledger, world.store, key, now=now)  # fail does not apply
    publish_run(ledger, world.store, key, rendered.attempt_id, now=now)
    columns = [AFTER[1], AFTER[3]]
    got = manifest(ledger, key)
    assert (got["schema"], got["schema_fingerprint"], got["schema_major"],
            got["schema_change"]) == (columns, fingerprint(columns), None, None)
    assert [e.fingerprint for e in history(ledger.engine, DAILY)] == [fingerprint(BEFORE)]
