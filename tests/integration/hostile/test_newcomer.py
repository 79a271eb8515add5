"""Two companies writing into one location: the newcomer is refused, never silently the older
owner, and a one-company load (DAG loader, task, ``exportctl run``) gets the verdict a full
``exportctl validate`` gives (issue 23 item 2).

``oldco`` writes ``/srv/exports/oldco``; ``newco`` writes ``/srv/exports/oldco/newco/in`` (both
legal on their own: ``/srv/exports/oldco`` is also a mount). By name, newco comes first, so the
old name-order rule refused oldco, whose customers already receive its files.
"""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from export_lib.config.loader import load_catalog
from export_lib.ledger import Ledger, open_ledger
from export_lib.ledger.records import RunRegistration
from export_lib.ledger.seniority import first_seen, open_catalog
from tests.support.claims_index import COMPANY, MOUNTS, indexed
from tests.world import REPO, clean_env, exportctl

NEW_PATH = "/srv/exports/oldco/newco/in"
SEEN = datetime(2026, 11, 2, 9, 30, tzinfo=UTC)


def _lines(config: Path, mine: str, theirs: str, loc: str, why: str) -> tuple[str, ...]:
    """One line per export the channel's destination belongs to (primary and secondary)."""
    return tuple(f"{config / (mine + '.yaml')}: data_exports[channel=google-ads].{kind}"
                 f".destinations[0]: local {loc} is also written by company {theirs!r} "
                 f"({config / (theirs + '.yaml')}); destinations are never shared between "
                 f"companies, {why}" for kind in ("primary", "secondary"))


@pytest.fixture()
def pg_ledger(pg_ledger_database: str) -> Ledger:
    ledger = open_ledger(pg_ledger_database)
    ledger.upgrade()
    return ledger


@pytest.fixture()
def config(tmp_path: Path) -> Path:
    target = tmp_path / "config"
    target.mkdir()
    defaults = (REPO / "dags" / "config" / "defaults.yaml").read_text()
    assert "local_mounts: []\n" in defaults
    (target / "defaults.yaml").write_text(defaults.replace("local_mounts: []\n", MOUNTS, 1))
    (target / "oldco.yaml").write_text(COMPANY.format(id="oldco", path="/srv/exports/oldco"))
    (target / "newco.yaml").write_text(COMPANY.format(id="newco", path=NEW_PATH))
    return target


def _register(ledger: Ledger, company: str, at: datetime) -> None:
    slot = at.replace(minute=0, second=0)
    ledger.register(RunRegistration(
        run_key=f"{company}/google-ads/primary/{slot:%Y-%m-%dT%H:%MZ}", company=company,
        schedule_id=f"{company}/google-ads/primary", slot=slot,
        window_start=slot - timedelta(days=30), window_end=slot, timezone="UTC",
        window_kind="trailing_days", config_version="v1", config_snapshot={"version": "v1"},
        owner=f"o@{company}.example", source_cutoff=at, deadline=slot + timedelta(hours=4)),
        at)


def test_with_no_run_of_either_company_both_files_are_refused_by_every_load(config: Path):
    full = load_catalog(config)
    both = "and the ledger has no run of either company, so both files are refused until one " \
           "gives way: give this company its own directory or prefix"
    assert full.errors == {
        str(config / "newco.yaml"): _lines(config, "newco", "oldco", "srv/exports/oldco/newco/in",
                                           both),
        str(config / "oldco.yaml"): _lines(config, "oldco", "newco", "srv/exports/oldco", both)}
    assert not full.companies
    for company in ("newco", "oldco"):  # a DAG loader's or a task's load: the same verdict
        one = load_catalog(config, only=company)
        assert dict(one.errors) == {k: v for k, v in full.errors.items() if company in k}


def test_the_company_the_ledger_saw_first_keeps_the_location(config: Path, pg_ledger: Ledger,
                                                             monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("EXPORT_LEDGER_URL", pg_ledger.url)
    _register(pg_ledger, "oldco", SEEN)
    assert first_seen(["oldco", "newco"]) == {"oldco": SEEN}
    newcomer = _lines(config, "newco", "oldco", "srv/exports/oldco/newco/in",
                     "and 'oldco' has exported since 2026-11-02 09:30 UTC while 'newco' has no "
                     "run in the ledger: give this company its own directory or prefix")
    full = open_catalog(config)
    assert dict(full.errors) == {str(config / "newco.yaml"): newcomer}
    assert sorted(full.companies) == ["oldco"]
    assert open_catalog(config, only="oldco").ok
    assert open_catalog(config, only="newco").error_lines == list(newcomer)

    # Seniority, not name order and not who has runs now: newco's earlier run makes oldco the
    # newcomer (e.g. oldco's file was the one edited into newco's directory).
    _register(pg_ledger, "newco", SEEN - timedelta(days=30))
    loser = _lines(config, "oldco", "newco", "srv/exports/oldco",
                  "and 'newco' has exported since 2026-10-03 09:30 UTC, before 'oldco' "
                  "(2026-11-02 09:30 UTC): give this company its own directory or prefix")
    assert open_catalog(config).error_lines == list(loser)
    assert open_catalog(config, only="oldco").error_lines == list(loser)
    assert open_catalog(config, only="newco").ok


def test_exportctl_validate_names_the_newcomer(config: Path, pg_ledger: Ledger):
    _register(pg_ledger, "oldco", SEEN)
    result = exportctl("validate", str(config), cwd=config.parent,
                       env=clean_env(EXPORT_LEDGER_URL=pg_ledger.url))
    assert result.returncode == 1 and "Traceback" not in result.stdout + result.stderr
    assert tuple(result.stdout.splitlines()[:2]) == _lines(
        config, "newco", "oldco", "srv/exports/oldco/newco/in",
        "and 'oldco' has exported since 2026-11-02 09:30 UTC while 'newco' has no run in the "
        "ledger: give this company its own directory or prefix")
    assert "oldco.yaml:" not in result.stdout


def test_an_unreachable_ledger_refuses_both_and_says_why(config: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture):
    monkeypatch.setenv("EXPORT_LEDGER_URL", "postgresql://u:planted-secret@127.0.0.1:1/exports")
    catalog = open_catalog(config)
    assert sorted(Path(p).name for p in catalog.errors) == ["newco.yaml", "oldco.yaml"]
    (warning,) = [r.getMessage() for r in caplog.records if "which company" in r.getMessage()]
    assert warning.startswith("company=newco,oldco schedule=- period=-: cannot ask the ledger "
                              "postgresql://127.0.0.1:1 which company exported first (")
    assert "planted-secret" not in caplog.text


def test_a_one_company_load_sees_another_files_edit_through_the_claims_index(
        config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    index_base = tmp_path / "index"
    monkeypatch.setenv("EXPORT_DAG_INDEX_DIR", str(index_base))
    (config / "oldco.yaml").write_text(COMPANY.format(id="oldco", path="/srv/exports/oldco/old"))
    assert load_catalog(config, only="newco").ok
    (index,) = (index_base / "claims").glob("*.sqlite")
    label = "data_exports[channel=google-ads].{}.destinations[0]"
    assert indexed(index) == {
        "newco.yaml": [(label.format(kind), "local/srv/exports/oldco/newco/in")
                       for kind in ("primary", "secondary")],
        "oldco.yaml": [(label.format(kind), "local/srv/exports/oldco/old")
                       for kind in ("primary", "secondary")]}

    # An unchanged file is not parsed again: its claims come from the index (planted here).
    with closing(sqlite3.connect(index)) as db, db:
        db.execute("UPDATE claims SET label = 'planted', loc = 'local/srv/exports/oldco' "
                   "WHERE name = 'oldco.yaml'")
    assert not load_catalog(config, only="newco").ok
    with closing(sqlite3.connect(index)) as db, db:  # an unknown format is rebuilt
        db.execute("UPDATE meta SET v = 0 WHERE k = 'format'")
    assert load_catalog(config, only="newco").ok
    assert indexed(index)["oldco.yaml"][0][1] == "local/srv/exports/oldco/old"

    # oldco widens to its whole directory: newco's next load (its own file unchanged) sees it.
    (config / "oldco.yaml").write_text(COMPANY.format(id="oldco", path="/srv/exports/oldco"))
    oldco_first = {"oldco": SEEN}
    one = load_catalog(config, only="newco", seniority=lambda _: oldco_first)
    assert len(one.error_lines) == 2 and all(
        line.split(": ", 2)[2].startswith("local srv/exports/oldco/newco/in is also written by "
                                          "company 'oldco' (") for line in one.error_lines)
    assert load_catalog(config, only="oldco", seniority=lambda _: oldco_first).ok
    assert not load_catalog(config, only="oldco").ok  # order unknown: both refused

    # A broken other file claims nothing (its own loader reports it).
    (config / "oldco.yaml").write_text("company: [not, a, mapping\n")
    assert load_catalog(config, only="newco").ok
    with closing(sqlite3.connect(index)) as db:
        assert db.execute("SELECT company FROM files WHERE name = 'oldco.yaml'").fetchall() == [
            (None,)]
    assert "oldco.yaml" not in indexed(index)


def test_the_shipped_config_has_no_overlap_and_loads_each_company_alone(tmp_path: Path,
                                                                        monkeypatch):
    monkeypatch.setenv("EXPORT_DAG_INDEX_DIR", str(tmp_path / "index"))
    config = tmp_path / "config"
    shutil.copytree(REPO / "dags" / "config", config)
    full = load_catalog(config)
    assert full.ok
    for company in full.companies:
        assert load_catalog(config, only=company).ok
