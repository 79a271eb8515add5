"""Issue 23's acceptance, from the command line: a source connection written without its scheme,
password included, fails the run with one line that describes the value — and the password is
in no output of ``exportctl`` (run, runs, explain) and in no row of the ledger (which the
obligations page and the alert mail read)."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.world import DAILY, DAILY_SLOT, World, build_world

PLANTED = "Pl4nted-source-pw-5519"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    built = build_world(tmp_path_factory.mktemp("planted"))
    built.extra_env["AIRFLOW_CONN_DEMO_SOURCE"] = f"reader:{PLANTED}@db.internal:5432/reporting"
    return built


def test_the_run_fails_in_one_line_that_never_shows_the_password(world: World) -> None:
    result = world.exportctl("run", str(world.config), "--schedule", DAILY, "--slot",
                             DAILY_SLOT, "--json")
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in output
    assert PLANTED not in output and "db.internal" not in output
    value = f"reader:{PLANTED}@db.internal:5432/reporting"
    assert (f"connection 'demo_source' (AIRFLOW_CONN_DEMO_SOURCE): the value ({len(value)} "
            "characters, not shown) is not a connection URI (no scheme://)") in output

    for args in (("runs", "--json"), ("explain", "--schedule", DAILY, "--date", "2026-03-29",
                                      "--no-airflow")):
        shown = world.exportctl(*args)
        assert PLANTED not in shown.stdout + shown.stderr, args

    engine = sa.create_engine(world.ledger_url)
    with engine.connect() as conn:
        rows = [str(tuple(row)) for table in sa.inspect(engine).get_table_names()
                for row in conn.execute(sa.text(f"SELECT * FROM {table}"))]  # noqa: S608
    engine.dispose()
    assert rows and not [row for row in rows if PLANTED in row]
    assert not [p for p in Path(world.home).rglob("*") if p.is_file()
                and p.suffix in (".log", ".json") and PLANTED in p.read_text(errors="replace")]


@pytest.mark.parametrize(("url", "shown"), [
    (f"reader:{PLANTED}@db.internal:5432/exports", "'***' is not a usable database URL (Could "
                                                   "not parse SQLAlchemy URL"),
    (f"postgresql://u:{PLANTED}@db.internal:{PLANTED}/exports",
     "'postgresql://***' is not a usable database URL (its port is not a number)"),
])
def test_a_malformed_ledger_url_is_one_line_without_the_password(url: str, shown: str) -> None:
    from export_lib.errors import LedgerError
    from export_lib.ledger import open_ledger

    with pytest.raises(LedgerError, match=r"^EXPORT_LEDGER_URL ") as info:
        open_ledger(url)
    assert shown in str(info.value) and PLANTED not in str(info.value)
    assert info.value.__cause__ is None
