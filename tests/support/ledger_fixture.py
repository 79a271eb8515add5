"""A ledger as an earlier release left it, made at test time: the schema at an older Alembic
revision (the frozen revisions of export_lib/ledger/migrations, run up to it) filled with
thousands of runs in every state, their attempts, events, artifacts (versions and corrections)
and deliveries in every state with their attempts, plus whatever else that revision has
(notices, operator actions, pauses, holds, schema contracts, spent form tokens).

Rows are written through the tables as the database reflects them at that revision, so a
column a later revision added is simply not there. Deterministic: the same ``runs`` make the
same rows. :func:`dump` reads every table back, ordered, for before/after comparisons.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from export_lib.ledger.deliveries import delivery_id
from export_lib.ledger.migrations import VERSION_TABLE, upgrade
from export_lib.ledger.states import AttemptOutcome, DeliveryState, RunState

# The ledger schema of the last tagged release (git tag green-before-49): its newest revision.
PREVIOUS_RELEASE = "0009_form_tokens"
# An older revision, before 0008 (it adds columns to runs, attempts and artifacts).
BEFORE_NEWEST = "0007_period_index"

BASE = datetime(2026, 1, 5, 6, 0, tzinfo=UTC)
RUN_STATES = list(RunState)
DELIVERY_STATES = list(DeliveryState)
# The attempt a run in each state holds (its newest; an older abandoned one every 7th run).
ATTEMPT_OF = {"reading": "running", "rendering": "running", "validating": "staged",
              "ready": "published", "failed": "failed", "cancelled": "abandoned"}
DESTINATIONS = ("acme-dir", "acme-sftp")


def _sha(*parts: object) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()


def rows(runs: int) -> dict[str, list[dict[str, Any]]]:
    """Every table's rows (a superset of any revision's columns), ids given."""
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in (
        "export_runs", "export_attempts", "export_artifacts", "export_run_events",
        "deliveries", "delivery_attempts", "export_notices", "operator_actions",
        "export_pauses", "export_holds", "export_schemas", "export_form_tokens")}
    for i in range(1, runs + 1):
        company = ("acme", "globex", "kiwi")[i % 3]
        schedule = f"{company}/daily-{i % 5}"
        slot = BASE + timedelta(hours=i)
        state = RUN_STATES[i % len(RUN_STATES)].value
        key = f"{schedule}/{slot:%Y-%m-%dT%H:%MZ}"
        snapshot = {"company": company, "schedule": schedule, "columns": ["a", "b"],
                    "destinations": list(DESTINATIONS), "i": i}
        out["export_runs"].append(dict(
            id=i, run_key=key, company=company, schedule_id=schedule, slot=slot,
            window_start=slot - timedelta(days=1), window_end=slot, timezone="Europe/Berlin",
            window_kind="calendar_day", config_version=_sha("config", i % 11)[:12],
            config_snapshot=snapshot, source_cutoff=slot + timedelta(minutes=1),
            deadline=slot + timedelta(hours=2), state=state,
            reason=None if state in ("ready", "registered") else f"{state} because of {i}",
            owner=f"data@{company}.example", trigger=("scheduled", "manual", "backfill")[i % 3],
            current_generation=0 if state in ("registered", "skipped") else 1 + (i % 7 == 0),
            created_at=slot + timedelta(seconds=30), updated_at=slot + timedelta(minutes=9),
            schema_baseline=None if i % 2 else 1))
        out["export_run_events"].append(dict(
            run_id=i, at=slot + timedelta(seconds=30), from_state=None, to_state="registered",
            attempt_id=None, detail="registered by scheduled"))
        if state in ("registered", "skipped"):
            if state == "skipped":
                out["export_run_events"].append(dict(
                    run_id=i, at=slot + timedelta(minutes=1), from_state="registered",
                    to_state="skipped", attempt_id=None, detail="paused"))
            continue
        _attempts(out, i, key, schedule, slot, state)
        if state != "ready":
            continue
        _artifacts(out, i, key, schedule, slot)
        if i % 4 == 0:
            out["export_notices"].append(dict(
                notice_key=f"alert:{key}:late", kind="alert", run_key=key, reason="late",
                recipients=f"ops@{company}.example", state=("sent", "failed", "claimed")[i % 3],
                claims=1 + i % 3, error=None, created_at=slot, updated_at=slot,
                sent_at=slot if i % 3 == 0 else None))
        if i % 10 == 0:
            out["operator_actions"].append(dict(
                at=slot + timedelta(days=1), who="ops", action="hold", target_kind="run",
                target_id=key, company=company, schedule_id=schedule, why="audit", changed=1,
                outcome="held"))
            out["export_holds"].append(dict(
                run_id=i, artifact_id=None, held_by="ops", held_at=slot + timedelta(days=1),
                why="audit", released_by=None, released_at=None))
    for n, company in enumerate(("acme", "globex", "kiwi"), start=1):
        out["export_pauses"].append(dict(
            company=company, schedule_id=None if n == 1 else f"{company}/daily-1",
            paused_by="ops", paused_at=BASE, why="maintenance",
            resumed_by="ops" if n != 3 else None, resumed_at=BASE + timedelta(hours=2)
            if n != 3 else None))
        out["export_schemas"].append(dict(
            schedule_id=f"{company}/daily-0", company=company, seq=1, major=1,
            fingerprint=_sha("schema", company), columns=[{"name": "a", "type": "string"}],
            change="initial", previous_fingerprint=None, diff=None,
            run_key=f"{company}/daily-0/x", period="2026-01-05", slot=BASE, recorded_at=BASE))
        out["export_form_tokens"].append(dict(
            mac=_sha("token", company)[:64], who="sam", spent_at=BASE,
            expires_at=BASE + timedelta(hours=1)))
    return out


def _attempts(out: dict, i: int, key: str, schedule: str, slot: datetime, state: str
              ) -> None:
    """The run's attempts (an abandoned first one every 7th run) and their events."""
    generations = [1, 2] if i % 7 == 0 else [1]
    for generation in generations:
        newest = generation == generations[-1]
        attempt = _sha("attempt", i, generation)[:32]
        staged = newest and ATTEMPT_OF[state] in ("staged", "published")
        out["export_attempts"].append(dict(
            attempt_id=attempt, run_id=i, generation=generation,
            origin=f"airflow:{schedule}/render/try{generation}",
            state=ATTEMPT_OF[state] if newest else "abandoned",
            lease_expires_at=slot + timedelta(minutes=5 * generation),
            staging_uri=f"file:///exports/artifacts/.staging/{attempt}.csv",
            staging_cleaned=int(not newest and i % 2 == 0),
            rows=100 + i if staged else None, bytes=4096 + i if staged else None,
            sha256=_sha("content", i) if staged else None,
            error=f"worker lost {i}" if not newest or state == "failed" else None,
            started_at=slot + timedelta(minutes=generation),
            finished_at=slot + timedelta(minutes=3 + generation) if newest else None,
            file_schema=[{"name": "a", "type": "string"}] if staged and i % 2 else None))
        out["export_run_events"].append(dict(
            run_id=i, at=slot + timedelta(minutes=generation), from_state="registered",
            to_state="reading", attempt_id=attempt, detail=f"attempt generation {generation}"))


def _artifacts(out: dict, i: int, key: str, schedule: str, slot: datetime) -> None:
    """A ready run's artifact (a correction v2 every 5th run) and its deliveries, each
    destination in a different state, with their attempts."""
    versions = [1, 2] if i % 5 == 0 else [1]
    for version in versions:
        out["export_artifacts"].append(dict(
            run_id=i, version=version,
            uri=f"file:///exports/artifacts/{schedule}/{i}_v{version}.csv",
            manifest_uri=f"file:///exports/artifacts/{schedule}/{i}_v{version}.csv.manifest.json",
            sha256=_sha("content", i, version), rows=100 + i, bytes=4096 + i, format="csv",
            window_start=slot - timedelta(days=1), window_end=slot,
            config_version=_sha("config", i % 11)[:12], attempt_id=_sha("attempt", i, 1)[:32],
            generated_at=slot + timedelta(minutes=4 + version),
            supersedes=version - 1 if version > 1 else None, correction=int(version > 1),
            revoked_at=slot + timedelta(days=2) if i % 13 == 0 else None,
            revoked_reason="wrong numbers" if i % 13 == 0 else None,
            deleted_at=None, deleted_reason=None,
            schema_fingerprint=_sha("schema", i) if i % 2 else None,
            schema_major=1 if i % 2 else None, schema_change=None, schema_diff=None))
        for d, destination in enumerate(DESTINATIONS):
            dstate = DELIVERY_STATES[(i + d + version) % len(DELIVERY_STATES)].value
            the_id = delivery_id(key, version, destination)
            tries = (i + d) % 4 + (dstate != "pending")
            out["deliveries"].append(dict(
                delivery_id=the_id, run_key=key, artifact_version=version,
                destination_id=destination, destination_type=("local", "sftp")[d],
                destination_config=json.dumps({"id": destination, "type": ("local", "sftp")[d],
                                               "path": f"outbox/{schedule}"}),
                target=f"/outbox/{schedule}/{i}_v{version}.csv",
                artifact_name=f"{i}_v{version}.csv", artifact_sha256=_sha("content", i, version),
                artifact_bytes=4096 + i, state=dstate, attempts=tries, budget_base=i % 2,
                last_error=None if dstate == "acknowledged" else f"timeout {i}",
                receipt="written" if dstate == "acknowledged" else None,
                created_at=slot + timedelta(minutes=10),
                updated_at=slot + timedelta(minutes=11 + tries),
                attempt_started_at=slot + timedelta(minutes=11) if tries else None,
                acknowledged_at=slot + timedelta(minutes=12) if dstate == "acknowledged"
                else None,
                retry_until=slot + timedelta(days=5) if i % 3 else None))
            for n in range(1, tries + 1):
                last = n == tries
                outcome = (AttemptOutcome.DELIVERED if last and dstate == "acknowledged"
                           else AttemptOutcome.IN_PROGRESS if last and dstate == "attempting"
                           else AttemptOutcome.RETRYABLE_FAILURE).value
                out["delivery_attempts"].append(dict(
                    delivery_id=the_id, attempt=n, started_at=slot + timedelta(minutes=10 + n),
                    duration_ms=None if outcome == "in_progress" else 100 * n,
                    outcome=outcome, error=None if outcome == "delivered" else "timeout",
                    receipt="written" if outcome == "delivered" else None))

def build(engine: sa.Engine, revision: str, runs: int) -> dict[str, int]:
    """Migrate an empty database to ``revision`` and fill it; rows per table."""
    upgrade(engine, revision)
    meta = sa.MetaData()
    meta.reflect(engine)
    counts = {}
    with engine.begin() as conn:
        for name, items in rows(runs).items():
            table = meta.tables.get(name)
            if table is None:  # a later revision's table
                continue
            columns = set(table.c.keys())
            conn.execute(table.insert(), [{k: v for k, v in item.items() if k in columns}
                                          for item in items])
            counts[name] = len(items)
            if "id" in columns and conn.dialect.name == "postgresql":  # ids were given
                conn.execute(sa.text(f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), "
                                     f"(SELECT max(id) FROM {name}))"))
    return counts


def dump(engine: sa.Engine) -> dict[str, list[dict[str, Any]]]:
    """Every ledger table's rows (but the version table), ordered by primary key."""
    meta = sa.MetaData()
    meta.reflect(engine)
    out = {}
    with engine.connect() as conn:
        for name, table in sorted(meta.tables.items()):
            if name == VERSION_TABLE:
                continue
            order = list(table.primary_key.columns) or list(table.c)
            out[name] = [dict(r._mapping) for r in conn.execute(
                sa.select(table).order_by(*order))]
    return out
