"""``exportctl ledger upgrade`` over a ledger an earlier release filled (real PostgreSQL).

The fixture (tests/support/ledger_fixture.py) is made at test time at the schema of the last
tagged release and at the revision before the newest two, with ``LEDGER_FIXTURE_RUNS`` runs
(1,000 in make test, 20,000 in make acceptance) in every state, their artifacts and deliveries
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
from pathlib import Path

import pytest
import sqlalchemy as sa

from export_lib.errors import LedgerError
from export_lib.ledger import RunState, open_ledger
from export_lib.ledger.migrations import VERSION_TABLE, head
from tests.support import ledger_fixture
from tests.support.cli import exportctl
from tests.world import REPO, clean_env

RUNS = int(os.environ.get("LEDGER_FIXTURE_RUNS", "1000"))
NEXT_AFTER_BEFORE_NEWEST = "0008_schema_contracts"


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


@pytest.fixture(scope="module")
def release_before_newest(tmp_path_factory) -> Path:
    """The source tree of the release whose newest ledger revision is BEFORE_NEWEST: the
    parent of the commit that added the next revision (``git archive``)."""
    if not (REPO / ".git").exists():
        pytest.skip("needs the project's git history (a checkout, not an export)")
    added = subprocess.run(
        ["git", "-C", str(REPO), "log", "--format=%H", "--diff-filter=A", "--",
         f"export_lib/ledger/migrations/versions/{NEXT_AFTER_BEFORE_NEWEST}.py"],
        capture_output=True, text=True, check=True).stdout.split()[-1]
    tree = tmp_path_factory.mktemp("old-release")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", f"{added}^", "export_lib"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def test_a_process_of_the_previous_release_keeps_working_while_the_ledger_is_upgraded(
        pg_database, release_before_newest, tmp_path):
    """That release's code registers, claims and fails runs all along while this package
    migrates the ledger under it (the revisions add columns and tables: old code reads and
    writes on)."""
    engine = sa.create_engine(pg_database)
    ledger_fixture.build(engine, ledger_fixture.BEFORE_NEWEST, RUNS)
    stop = tmp_path / "stop"
    worker = subprocess.Popen(
        [sys.executable, str(REPO / "tests/support/old_release_worker.py"), pg_database,
         str(stop)], cwd=tmp_path, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=clean_env(PYTHONPATH=str(release_before_newest)))
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(target=lambda: lines.extend(
        (time.monotonic(), line.strip()) for line in worker.stdout))
    reader.start()
    deadline = time.monotonic() + 60
    while len([x for x in lines if x[1].startswith("ok")]) < 3:
        assert time.monotonic() < deadline and worker.poll() is None, (lines, worker.stderr)
        time.sleep(0.1)
    started = time.monotonic()
    result = _upgrade(pg_database, own_process=True)
    ended = time.monotonic()
    time.sleep(1.5)
    stop.touch()
    assert worker.wait(timeout=60) == 0, worker.stderr.read()
    reader.join(timeout=10)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith(f"(was {ledger_fixture.BEFORE_NEWEST})")
    assert lines[0][1] == f"code {release_before_newest / 'export_lib'}"  # the old code ran
    assert [line for _, line in lines if not line.startswith(("ok", "code"))] == []
    done = [t for t, line in lines if line.startswith("ok")]
    assert any(t > ended for t in done) and any(t < started for t in done)
    with engine.connect() as conn:
        made = conn.execute(sa.text(
            "SELECT count(*) FROM export_runs WHERE run_key LIKE 'acme/old-release/%' "
            "AND state = 'failed'")).scalar_one()
    assert made == len(done)
    # This package reads what the old code wrote before and after the upgrade.
    assert open_ledger(pg_database).get_run("acme/old-release/1").state == "failed"
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
