"""Run identity, state machine, fencing and publication against real PostgreSQL (and SQLite)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from export_lib.errors import FencingError, IllegalTransitionError, LedgerError, PublishError
from export_lib.ledger import RUN_STATES, RunState, check_transition, open_ledger
from tests.fixtures.ledger import NOW, registration
from tests.support import children


def test_a_ledger_database_is_a_copy_at_the_newest_revision_and_pg_database_is_empty(
        pg_ledger_database, pg_database):
    """The fixtures' contract (tests/conftest.py): ``pg_ledger_database`` is a copy of the
    template the migrations built (its tables, no rows), ``pg_database`` has no table."""
    from export_lib.ledger.migrations import current, head

    ledger, empty = open_ledger(pg_ledger_database), open_ledger(pg_database)
    assert current(ledger.engine) == head() is not None
    assert ledger.count("runs") == 0  # the template holds tables, no rows
    ledger.register(registration(), NOW)
    assert ledger.count("runs") == 1
    assert current(empty.engine) is None
    for each in (ledger, empty):
        each.engine.dispose()


def _staged(ledger, run_key, sha, *, now=NOW):
    # A lease that has lapsed by the database's clock as soon as it is written (leases are the
    # database's clock, not ``now``): the next _staged takes the run over.
    attempt = ledger.claim_attempt(run_key, origin="test", now=now,
                                   staging_uri=lambda a: f"file:///tmp/staging/{a}.csv",
                                   regenerate=True, lease=timedelta(0))
    ledger.advance(run_key, attempt.attempt_id, RunState.RENDERING, now)
    ledger.record_staged(run_key, attempt.attempt_id, rows=10, nbytes=100, sha256=sha, now=now)
    ledger.advance(run_key, attempt.attempt_id, RunState.VALIDATING, now)
    return attempt


def _register_in_process(url: str, run_key: str, barrier, out) -> None:
    ledger = open_ledger(url)
    barrier.wait()
    run, created = ledger.register(registration(run_key), NOW)
    out.put((run.id, created))


def test_two_processes_registering_the_same_slot_make_one_run(pg_ledger, pg_ledger_database):
    ctx = children.context()
    barrier, out = ctx.Barrier(4), ctx.Queue()
    procs = [children.process(ctx, _register_in_process,
                              (pg_ledger_database, "acme/daily-spend/2026-03-29T05:00Z", barrier, out))
             for _ in range(4)]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert pg_ledger.count("runs") == 1
    assert len({run_id for run_id, _ in results}) == 1
    assert sorted(created for _, created in results) == [False, False, False, True]


def test_registration_never_rewrites_the_captured_config(pg_ledger):
    first, created = pg_ledger.register(registration(version="v1"), NOW)
    again, created_again = pg_ledger.register(
        registration(version="v2", snapshot={"columns": ["changed"]}), NOW + timedelta(hours=1))
    assert (created, created_again) == (True, False)
    assert again.config_version == "v1"
    assert again.config_snapshot == {"columns": ["a", "b"], "version": "v1"}
    assert again.window_start == first.window_start


def test_stale_attempt_cannot_publish_after_a_newer_one(pg_ledger):
    key = pg_ledger.register(registration(), NOW)[0].run_key
    old = _staged(pg_ledger, key, "a" * 64)
    new = _staged(pg_ledger, key, "b" * 64, now=NOW + timedelta(minutes=5))
    promoted = []
    with pytest.raises(FencingError, match=r"generation 1\) is stale; generation 2 owns the run"):
        pg_ledger.publish(key, old.attempt_id, now=NOW, fmt="csv",
                          promote=lambda v: promoted.append(v) or ("u", "m"))
    assert promoted == [] and pg_ledger.count("artifacts") == 0
    artifact, created = pg_ledger.publish(key, new.attempt_id, now=NOW, fmt="csv",
                                          promote=lambda v: (f"file:///a_v{v}.csv", "m"))
    assert (artifact.version, artifact.sha256, created) == (1, "b" * 64, True)
    assert [a.state for a in pg_ledger.attempts(key)] == ["abandoned", "published"]
    assert [a.attempt_id for a in pg_ledger.staging_garbage()] == [old.attempt_id]


def test_identical_content_is_a_no_op_and_new_content_is_version_two(pg_ledger):
    key = pg_ledger.register(registration(), NOW)[0].run_key
    first = _staged(pg_ledger, key, "a" * 64)
    v1, _ = pg_ledger.publish(key, first.attempt_id, now=NOW, fmt="csv",
                              promote=lambda v: (f"u{v}", f"m{v}"))
    same = _staged(pg_ledger, key, "a" * 64)
    again, created = pg_ledger.publish(key, same.attempt_id, now=NOW, fmt="csv",
                                       promote=lambda v: pytest.fail("must not promote"))
    assert (created, again.version) == (False, 1)
    changed = _staged(pg_ledger, key, "c" * 64)
    v2, created = pg_ledger.publish(key, changed.attempt_id, now=NOW, fmt="csv",
                                    promote=lambda v: (f"u{v}", f"m{v}"), correction=True)
    assert (created, v2.version, v2.supersedes, v2.correction) == (True, 2, 1, 1)
    assert [a.version for a in pg_ledger.artifacts(key)] == [1, 2]
    assert pg_ledger.get_run(key).state == "ready"


def test_ready_run_is_not_reopened_without_regenerate(pg_ledger):
    key = pg_ledger.register(registration(), NOW)[0].run_key
    att = _staged(pg_ledger, key, "a" * 64)
    pg_ledger.publish(key, att.attempt_id, now=NOW, fmt="csv", promote=lambda v: ("u", "m"))
    with pytest.raises(PublishError, match="already ready; pass regenerate"):
        pg_ledger.claim_attempt(key, origin="t", now=NOW, staging_uri=lambda a: "file:///x")


def test_every_transition_is_logged_as_an_event(sqlite_ledger):
    key = sqlite_ledger.register(registration(), NOW)[0].run_key
    att = _staged(sqlite_ledger, key, "a" * 64)
    sqlite_ledger.publish(key, att.attempt_id, now=NOW, fmt="csv", promote=lambda v: ("u", "m"))
    moves = [(e["from_state"], e["to_state"]) for e in sqlite_ledger.events(key)]
    assert moves == [(None, "registered"), ("registered", "reading"), ("reading", "rendering"),
                     ("rendering", "validating"), ("validating", "ready")]


def test_each_committed_move_becomes_the_status_of_the_runs_log_lines(pg_ledger, caplog):
    """The log field ``status`` (export_lib.logfmt) follows the ledger: the registered record,
    then each move once its transaction committed; a move rolled back never shows."""
    import logging

    from export_lib.logfmt import bind, get_logger, scope

    log = get_logger("export_lib.tests.ledger")

    @scope
    def task() -> None:
        run = pg_ledger.register(registration(), NOW)[0]
        bind(**run.log_context())
        log.info("registered")
        att = _staged(pg_ledger, run.run_key, "a" * 64)
        log.info("staged")
        with pytest.raises(RuntimeError, match="^rolled back$"), pg_ledger._tx() as conn:
            pg_ledger._move(conn, pg_ledger._lock_run(conn, run.run_key), RunState.FAILED, NOW)
            raise RuntimeError("rolled back")
        log.info("after the rollback")
        pg_ledger.publish(run.run_key, att.attempt_id, now=NOW, fmt="csv",
                          promote=lambda v: ("u", "m"))
        log.info("published")

    with caplog.at_level(logging.INFO, logger="export_lib.tests"):
        task()
    assert [(r.getMessage().split(": ")[-1], r.status) for r in caplog.records] == [
        ("registered", "registered"), ("staged", "validating"),
        ("after the rollback", "validating"), ("published", "ready")]


@pytest.mark.parametrize(("current", "target"), [
    ("registered", "ready"), ("ready", "failed"), ("cancelled", "reading"), ("validating", "skipped"),
])
def test_illegal_transitions_raise(current, target):
    with pytest.raises(IllegalTransitionError,
                       match=f"^run acme/x/2026-01-01T00:00Z: cannot go from {current} to {target}; "
                             f"allowed from {current}: "):
        check_transition(RUN_STATES, "acme/x/2026-01-01T00:00Z", current, target)


def test_failed_attempt_marks_the_run_failed(sqlite_ledger):
    key = sqlite_ledger.register(registration(), NOW)[0].run_key
    att = sqlite_ledger.claim_attempt(key, origin="t", now=NOW, staging_uri=lambda a: "file:///x")
    sqlite_ledger.fail(key, att.attempt_id, "source down", NOW)
    run = sqlite_ledger.get_run(key)
    assert (run.state, run.reason) == ("failed", "source down")


def test_unreachable_ledger_names_the_url_with_the_password_masked(postgres_server):
    url = f"postgresql://exports:s3cret-pw@127.0.0.1:{postgres_server.port}/no_such_db"
    with pytest.raises(LedgerError, match=r"cannot reach the export ledger at "
                       r"postgresql://127\.0\.0\.1:\d+: ") as info:
        open_ledger(url)
    assert "s3cret-pw" not in str(info.value)


def test_attempt_superseded_while_rendering_cannot_record_its_object(pg_ledger):
    key = pg_ledger.register(registration(), NOW)[0].run_key
    old = pg_ledger.claim_attempt(key, origin="stalled", now=NOW, lease=timedelta(0),
                                  staging_uri=lambda a: f"file:///tmp/staging/{a}.csv")
    # The stalled attempt's lease lapsed (by the database's clock): the retry takes over.
    pg_ledger.claim_attempt(key, origin="retry", now=NOW + timedelta(seconds=1),
                            staging_uri=lambda a: f"file:///tmp/staging/{a}.csv")
    with pytest.raises(FencingError, match=r"\(generation 1\) is stale; generation 2 owns"):
        pg_ledger.record_staged(key, old.attempt_id, rows=1, nbytes=1, sha256="c" * 64, now=NOW)
    stale = pg_ledger.get_attempt(old.attempt_id)
    assert (stale.state, stale.sha256) == ("abandoned", None)
    assert [a.attempt_id for a in pg_ledger.staging_garbage()] == [old.attempt_id]
