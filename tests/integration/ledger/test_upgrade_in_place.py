"""``exportctl ledger upgrade`` over a ledger an earlier release filled (real PostgreSQL).

The fixture (tests/support/ledger_fixture.py) is made at test time at the schema of the last
tagged release and at the revision before the newest two, with ``LEDGER_FIXTURE_RUNS`` runs
(2,000 in make test, 20,000 in make acceptance) in every state, their artifacts and deliveries
in every state. The upgrade keeps every row of every table exactly (a full dump before and
after, compared on the columns that existed before), is idempotent, and a process using the
ledger keeps working while it runs. A ledger a newer release migrated is refused with both
versions and the fix.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from export_lib.errors import LedgerError
from export_lib.ledger import RunState, open_ledger
from export_lib.ledger.migrations import VERSION_TABLE, head
from tests.fixtures.ledger import registration
from tests.support import ledger_fixture
from tests.support.cli import exportctl
from tests.world import REPO, clean_env

RUNS = int(os.environ.get("LEDGER_FIXTURE_RUNS", "2000"))


def _upgrade(url: str, *, own_process: bool = False) -> subprocess.CompletedProcess[str]:
    env = clean_env(EXPORT_LEDGER_URL=url)
    if own_process:  # as an operator runs it beside the running stack
        return subprocess.run([sys.executable, "-m", "export_lib", "ledger", "upgrade"],
                              capture_output=True, text=True, env=env, cwd=REPO, timeout=300,
                              check=False)
    return exportctl("ledger", "upgrade", env=env, cwd=REPO, timeout=300)


def _same_rows(before: dict, after: dict) -> None:
    """Every table and row of ``before`` is in ``after``, unchanged on ``before``'s columns;
    no row appeared in an old table."""
    assert set(before) <= set(after)
    for table, rows in before.items():
        columns = set(rows[0]) if rows else set()
        kept = [{k: v for k, v in row.items() if k in columns} for row in after[table]]
        assert len(kept) == len(rows), table
        assert kept == rows, table


@pytest.mark.parametrize("revision", [ledger_fixture.PREVIOUS_RELEASE,
                                      ledger_fixture.BEFORE_NEWEST])
def test_upgrade_keeps_every_row_and_is_idempotent(pg_database, revision):
    engine = sa.create_engine(pg_database)
    counts = ledger_fixture.build(engine, revision, RUNS)
    assert counts["export_runs"] == RUNS and counts["deliveries"] > RUNS // 4
    before = ledger_fixture.dump(engine)
    states = {r["state"] for r in before["export_runs"]}
    assert states == {s.value for s in RunState}  # every state is there
    assert {r["state"] for r in before["deliveries"]} == {
        "pending", "attempting", "acknowledged", "exhausted", "refused", "cancelled"}
    first = _upgrade(pg_database)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == (
        f"ledger postgresql://127.0.0.1:{engine.url.port} is at schema revision {head()} "
        + ("(it was already)" if revision == head() else f"(was {revision})"))
    after = ledger_fixture.dump(engine)
    _same_rows(before, after)
    second = _upgrade(pg_database)
    assert (second.returncode, second.stdout.strip().endswith("(it was already)")) == (0, True)
    assert ledger_fixture.dump(engine) == after
    # What the new code reads back of an old run is what the old code wrote.
    ledger = open_ledger(pg_database)
    ready = next(r for r in before["export_runs"] if r["state"] == "ready")
    run = ledger.get_run(ready["run_key"])
    assert (run.state, run.config_snapshot, run.slot) == (
        "ready", ready["config_snapshot"], ready["slot"])
    assert [a.version for a in ledger.artifacts(ready["run_key"])] == [
        a["version"] for a in before["export_artifacts"] if a["run_id"] == ready["id"]]
    ledger.engine.dispose()
    engine.dispose()


def test_a_process_keeps_working_while_the_ledger_is_upgraded(pg_database):
    engine = sa.create_engine(pg_database)
    ledger_fixture.build(engine, ledger_fixture.PREVIOUS_RELEASE, RUNS)
    done, errors, work = threading.Event(), [], []

    def keep_working() -> None:
        """Register, claim and fail runs, as a scheduler and workers do, all along."""
        ledger, i = open_ledger(pg_database), 0
        while not done.is_set():
            i += 1
            key = f"acme/live/{i}"
            try:
                reg = registration(key)
                ledger.register(reg, datetime.now(UTC))
                attempt = ledger.claim_attempt(key, origin="live", now=datetime.now(UTC),
                                               staging_uri=lambda a: f"file:///s/{a}",
                                               lease=timedelta(seconds=30))
                ledger.fail(key, attempt.attempt_id, "done", datetime.now(UTC))
                work.append(time.monotonic())
            except Exception as exc:  # noqa: BLE001 - asserted below
                errors.append(exc)
        ledger.engine.dispose()

    worker = threading.Thread(target=keep_working)
    worker.start()
    time.sleep(1)
    started = time.monotonic()
    result = _upgrade(pg_database, own_process=True)
    ended = time.monotonic()
    time.sleep(1)
    done.set()
    worker.join(timeout=60)
    assert result.returncode == 0, result.stderr
    assert errors == []
    assert any(t < started for t in work) and any(t > ended for t in work)
    with engine.connect() as conn:
        live = conn.execute(sa.text(
            "SELECT count(*) FROM export_runs WHERE run_key LIKE 'acme/live/%' "
            "AND state = 'failed'")).scalar_one()
    assert live == len(work)
    engine.dispose()


def test_a_ledger_a_newer_release_migrated_is_refused(pg_database):
    engine = sa.create_engine(pg_database)
    ledger_fixture.build(engine, ledger_fixture.PREVIOUS_RELEASE, 30)
    with engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = '0099_from_the_future'"))
    before = ledger_fixture.dump(engine)
    refused = _upgrade(pg_database)
    message = (f"the export ledger at postgresql://127.0.0.1:{engine.url.port} is at schema "
               "revision 0099_from_the_future, newer than this package "
               r"\(airflow-scheduled-exports \S+\) knows: its newest is " + head() + ". A newer "
               "release upgraded it, and a ledger is never downgraded: install that release "
               r"\(or a newer one\) of airflow-scheduled-exports on this machine, with the same "
               "lock, and run the command again")
    assert refused.returncode == 1
    assert re.fullmatch("exportctl: LedgerError: " + message, refused.stderr.strip()), \
        refused.stderr
    assert ledger_fixture.dump(engine) == before  # nothing touched
    with pytest.raises(LedgerError, match="^" + message + "$"):
        open_ledger(pg_database).ensure_schema()
    engine.dispose()
