"""deliver() end to end on the local destination: once-only, refusal, conflicts, takeovers."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from export_lib.config.destinations import LocalDestination, S3Destination
from export_lib.delivery import delivery_id, list_deliveries, requeue
from export_lib.errors import AuthorizationError, DeliveryError
from export_lib.ledger import deliveries as rec
from tests.fixtures.delivery import ArtifactFactory
from tests.support.delivery import NOW, OWNER, RUN_KEY, only_record, run

ARCHIVE = LocalDestination(id="archive", path="acme/daily")


def test_local_delivers_once_when_the_run_is_delivered_again(
    ledger_engine: sa.Engine, make_artifact: ArtifactFactory, tmp_path: Path
) -> None:
    artifact = make_artifact()
    root = tmp_path / "exports"
    first = run(ledger_engine, ARCHIVE, artifact, exports_root=root)
    final = root / "acme/daily" / artifact.name
    inode = final.stat().st_ino
    second = run(ledger_engine, ARCHIVE, artifact, exports_root=root, now=NOW + timedelta(hours=2))
    assert (first.state, first.attempts, first.already_delivered) == ("acknowledged", 1, False)
    assert (second.state, second.attempts, second.already_delivered) == ("acknowledged", 1, True)
    assert final.read_bytes() == artifact.local_path.read_bytes()
    assert final.stat().st_ino == inode  # not rewritten
    assert (root / "acme/daily" / f"{artifact.name}.sha256").read_text() == (
        f"{artifact.sha256}  {artifact.name}\n")
    assert sorted(p.name for p in final.parent.iterdir()) == [artifact.name,
                                                              f"{artifact.name}.sha256"]
    record = only_record(ledger_engine)
    assert record["delivery_id"] == delivery_id(RUN_KEY, 1, "archive")
    assert record["receipt"] == f"written size={artifact.bytes}"
    assert [(h["attempt"], h["outcome"]) for h in record["history"]] == [(1, "delivered")]


def test_content_already_at_destination_is_acknowledged_without_rewriting(
    sqlite_engine: sa.Engine, make_artifact: ArtifactFactory, tmp_path: Path
) -> None:
    artifact = make_artifact()
    target = tmp_path / "exports/acme/daily"
    target.mkdir(parents=True)
    (target / artifact.name).write_bytes(artifact.local_path.read_bytes())
    inode = (target / artifact.name).stat().st_ino
    outcome = run(sqlite_engine, ARCHIVE, artifact, exports_root=tmp_path / "exports")
    assert (outcome.state, outcome.already_present) == ("acknowledged", True)
    assert (target / artifact.name).stat().st_ino == inode
    assert only_record(sqlite_engine)["history"][0]["outcome"] == "already_present"


def test_different_file_under_the_final_name_is_never_overwritten(
    sqlite_engine: sa.Engine, make_artifact: ArtifactFactory, tmp_path: Path
) -> None:
    artifact = make_artifact()
    target = tmp_path / "exports/acme/daily"
    target.mkdir(parents=True)
    (target / artifact.name).write_bytes(b"someone else's file\n")
    with pytest.raises(DeliveryError, match=r"failed permanently on attempt 1 \(not retried\)"
                       r".*already exists with different content") as info:
        run(sqlite_engine, ARCHIVE, artifact, exports_root=tmp_path / "exports")
    assert info.value.retryable is False
    assert (target / artifact.name).read_bytes() == b"someone else's file\n"
    record = only_record(sqlite_engine)
    assert (record["state"], record["attempts"]) == ("exhausted", 1)
    with pytest.raises(DeliveryError, match="is exhausted after 1 attempt.*requeue"):
        run(sqlite_engine, ARCHIVE, artifact, exports_root=tmp_path / "exports")


def test_unauthorised_owner_is_recorded_as_refused_and_can_resume_later(
    ledger_engine: sa.Engine, make_artifact: ArtifactFactory, tmp_path: Path
) -> None:
    artifact = make_artifact()
    root = tmp_path / "exports"
    with pytest.raises(AuthorizationError,
                       match=r"refused: owner 'alice@acme\.example' is no longer authorised"):
        run(ledger_engine, ARCHIVE, artifact, exports_root=root, authorized={"bob@acme.example"})
    record = only_record(ledger_engine)
    assert (record["state"], record["attempts"], record["history"]) == ("refused", 0, [])
    assert "no longer authorised" in record["last_error"]
    assert not (root / "acme/daily" / artifact.name).exists()
    outcome = run(ledger_engine, ARCHIVE, artifact, exports_root=root, authorized={OWNER})
    assert outcome.state == "acknowledged"


def test_a_run_keeps_the_destination_config_it_captured(
    sqlite_engine: sa.Engine, make_artifact: ArtifactFactory, tmp_path: Path
) -> None:
    artifact = make_artifact()
    run(sqlite_engine, ARCHIVE, artifact, exports_root=tmp_path)
    moved = LocalDestination(id="archive", path="acme/elsewhere")
    with pytest.raises(DeliveryError, match="changed since delivery .* the change applies "
                       "from the next slot"):
        run(sqlite_engine, moved, artifact, exports_root=tmp_path)
    assert not (tmp_path / "acme/elsewhere").exists()


def test_missing_published_file_fails_permanently(
    sqlite_engine: sa.Engine, make_artifact: ArtifactFactory, tmp_path: Path
) -> None:
    artifact = make_artifact()
    artifact.local_path.unlink()
    with pytest.raises(DeliveryError, match="published artifact .* is missing; re-publish"):
        run(sqlite_engine, ARCHIVE, artifact, exports_root=tmp_path)
    assert only_record(sqlite_engine)["state"] == "exhausted"


def test_undefined_connection_fails_permanently_naming_the_variable(
    sqlite_engine: sa.Engine, make_artifact: ArtifactFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_ACME_S3", raising=False)
    destination = S3Destination(id="bucket", conn_id="acme_s3", bucket="acme-in")
    with pytest.raises(DeliveryError, match="connection 'acme_s3' is not defined: set "
                       "AIRFLOW_CONN_ACME_S3") as info:
        run(sqlite_engine, destination, make_artifact())
    assert info.value.retryable is False


def _dead_worker_attempt(engine: sa.Engine, artifact, tmp_path: Path) -> rec.DeliveryRecord:
    """The delivery recorded (refused: nothing sent), requeued, then attempt 1 won by a worker
    that dies at once."""
    with pytest.raises(AuthorizationError):
        run(engine, ARCHIVE, artifact, exports_root=tmp_path, authorized=set())
    record = requeue(engine, delivery_id(RUN_KEY, 1, "archive"), now=NOW)
    with engine.begin() as conn:
        assert rec.start_attempt(conn, record, now=NOW) == 1
    return record


def _heartbeat_back(engine: sa.Engine, record: rec.DeliveryRecord, seconds: float | None) -> None:
    """Move attempt 1's last heartbeat ``seconds`` into the database's past (None: an attempt
    of an earlier release, which has none)."""
    from export_lib.ledger.clock import database_now

    with engine.begin() as conn:
        moment = None if seconds is None else database_now(conn) - timedelta(seconds=seconds)
        conn.execute(rec.delivery_attempts.update()
                     .where(rec.delivery_attempts.c.delivery_id == record.delivery_id)
                     .values(heartbeat_at=moment))


def _taken_over(engine: sa.Engine) -> None:
    history = list_deliveries(engine)[0]["history"]
    assert [(h["attempt"], h["outcome"]) for h in history] == [(1, "abandoned"),
                                                                (2, "delivered")]


def test_an_attempt_whose_heartbeat_went_silent_for_four_beats_is_taken_over(
    ledger_engine: sa.Engine, make_artifact: ArtifactFactory, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXPORT_DELIVERY_HEARTBEAT_SECONDS", "10")  # silent after 40 s
    artifact = make_artifact()
    record = _dead_worker_attempt(ledger_engine, artifact, tmp_path)
    _heartbeat_back(ledger_engine, record, 35)
    # The caller's clock is not asked: hours later by it, the database heard the worker 35 s ago.
    with pytest.raises(DeliveryError, match=r"attempt 1 started at .* is still in progress "
                       r"elsewhere \(its worker's last heartbeat was 3[56] s ago\); it is taken "
                       r"over once silent for 40 s") as info:
        run(ledger_engine, ARCHIVE, artifact, exports_root=tmp_path, now=NOW + timedelta(hours=2))
    assert info.value.retryable is True
    _heartbeat_back(ledger_engine, record, 41)
    outcome = run(ledger_engine, ARCHIVE, artifact, exports_root=tmp_path,
                  now=NOW + timedelta(minutes=1))
    assert (outcome.state, outcome.attempts) == ("acknowledged", 2)
    _taken_over(ledger_engine)


def test_an_earlier_releases_attempt_without_a_heartbeat_is_taken_over_after_stale_after(
    ledger_engine: sa.Engine, make_artifact: ArtifactFactory, tmp_path: Path
) -> None:
    artifact = make_artifact()
    record = _dead_worker_attempt(ledger_engine, artifact, tmp_path)
    _heartbeat_back(ledger_engine, record, None)
    with pytest.raises(DeliveryError, match="attempt 1 started at .* is still in progress "
                       "elsewhere; it is taken over after 0:30:00") as info:
        run(ledger_engine, ARCHIVE, artifact, exports_root=tmp_path, now=NOW + timedelta(minutes=5))
    assert info.value.retryable is True
    outcome = run(ledger_engine, ARCHIVE, artifact, exports_root=tmp_path,
                  now=NOW + timedelta(minutes=31))
    assert (outcome.state, outcome.attempts) == ("acknowledged", 2)
    _taken_over(ledger_engine)


def test_a_new_version_is_a_new_delivery_and_old_versions_stay_put(
    sqlite_engine: sa.Engine, make_artifact: ArtifactFactory, tmp_path: Path
) -> None:
    first = run(sqlite_engine, ARCHIVE, make_artifact(version=1), exports_root=tmp_path)
    second = run(sqlite_engine, ARCHIVE, make_artifact(version=2, seed="b"),
                 exports_root=tmp_path)
    assert first.delivery_id != second.delivery_id
    assert sorted(p.name for p in (tmp_path / "acme/daily").glob("*.csv")) == [
        "acme_daily-spend_2026-03-28_v1.csv", "acme_daily-spend_2026-03-28_v2.csv"]


def test_changed_content_under_the_same_version_is_refused(
    sqlite_engine: sa.Engine, make_artifact: ArtifactFactory, tmp_path: Path
) -> None:
    run(sqlite_engine, ARCHIVE, make_artifact(seed="a"), exports_root=tmp_path)
    with pytest.raises(DeliveryError, match=r"version 1\) had sha256 .* versions are immutable"):
        run(sqlite_engine, ARCHIVE, make_artifact(seed="b"), exports_root=tmp_path)


def test_unreachable_ledger_is_a_retryable_ledger_error(
    make_artifact: ArtifactFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from export_lib.errors import LedgerUnavailable
    from tests.services.ports import free_port

    monkeypatch.setenv("EXPORT_LEDGER_RECONNECT_SECONDS", "0")  # no waiting for it here
    engine = sa.create_engine(f"postgresql+psycopg://x:y@127.0.0.1:{free_port()}/none")
    with pytest.raises(LedgerUnavailable, match=r"^the export ledger at postgresql://127\.0\.0"
                       r"\.1:\d+ is unavailable: connection failed: .*; delivery record gave "
                       r"up after 0 s of reconnecting") as info:
        run(engine, ARCHIVE, make_artifact(), exports_root=tmp_path)
    assert info.value.retryable is True
    assert not (tmp_path / "acme").exists()


def test_retry_until_must_be_aware(sqlite_engine: sa.Engine,
                                   make_artifact: ArtifactFactory) -> None:
    from datetime import datetime

    from export_lib.errors import ConfigError

    with pytest.raises(ConfigError, match=r"retry_until 2026-04-03T06:00:00 is naive"):
        run(sqlite_engine, ARCHIVE, make_artifact(), retry_until=datetime(2026, 4, 3, 6))


def test_a_record_from_before_the_retry_window_keeps_delivering(
    ledger_engine: sa.Engine, make_artifact: ArtifactFactory, tmp_path: Path
) -> None:
    """Revision 0003: a record written before ``retry_window`` existed (its stored config lacks
    the field, ``retry_until`` is NULL) is the same delivery, with the default window from its
    creation — not a "destination changed" error."""
    from export_lib.delivery.engine import window_of

    artifact = make_artifact()
    with pytest.raises(AuthorizationError):  # records the delivery, sends nothing
        run(ledger_engine, ARCHIVE, artifact, exports_root=tmp_path, authorized=set())
    old_config = '{"id":"archive","type":"local","path":"acme/daily"}'  # as 0002-era code wrote
    with ledger_engine.begin() as conn:
        conn.execute(rec.deliveries.update().values(destination_config=old_config,
                                                    retry_until=None))
    (record,) = [rec.get_record(ledger_engine, delivery_id(RUN_KEY, 1, "archive"))]
    assert window_of(record) == NOW + timedelta(days=5)
    outcome = run(ledger_engine, ARCHIVE, artifact, exports_root=tmp_path)
    assert (outcome.state, outcome.attempts) == ("acknowledged", 1)
    moved = LocalDestination(id="archive", path="acme/elsewhere")  # identity still guarded
    with pytest.raises(DeliveryError, match="changed since delivery"):
        run(ledger_engine, moved, artifact, exports_root=tmp_path)
