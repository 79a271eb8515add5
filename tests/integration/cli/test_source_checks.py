"""What ``exportctl validate`` and ``preview`` check against a reachable source (a real
PostgreSQL database): ``csv: {timestamps: local}`` over a column without time zone is an error
naming the file, the export, the column and the fix; a company without rows is a warning; the
demo seeder converts an older demo database's columns so the shipped demo is valid again. And
a render of a window without rows says so in the task log."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from export_lib.source.connections import parse_connection
from export_lib.source.demo import SCHEMA, channel_rows, seed_source, widget_rows
from tests.world import COMPANIES, SEEDED_AT, build_world

FIX = ("a wall time with no zone, so the file would show it unchanged, not in local time; make "
       "the column timestamp with time zone (timestamptz) in the source, or set csv: "
       "{timestamps: utc}")


@pytest.fixture()
def source_dsn(postgres_server, pg_database) -> str:
    """An empty PostgreSQL database for the demo source (libpq URI)."""
    return postgres_server.dsn.rsplit("/", 1)[0] + "/" + pg_database.rsplit("/", 1)[1]


def _old_demo(dsn: str) -> None:
    """The demo tables as they were before their times had a zone, with every company's rows."""
    start, end = SEEDED_AT - timedelta(days=3), SEEDED_AT
    with psycopg.connect(dsn, autocommit=True) as conn:
        for ddl in SCHEMA:
            conn.execute(ddl.replace("TIMESTAMPTZ", "TIMESTAMP"))
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO widget_metrics VALUES (%s, %s, %s, %s, %s)",
                            list(widget_rows(COMPANIES, start, end)))
            cur.executemany("INSERT INTO channel_metrics VALUES (%s, %s, %s, %s, %s, %s, %s)",
                            list(channel_rows(COMPANIES, start, end)))


def _column_types(dsn: str) -> list[tuple[str, str]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = "
            "'widget_metrics' AND column_name IN ('event_time', 'ingested_at') ORDER BY 1"
        ).fetchall()


def test_local_timestamps_over_a_column_without_zone_are_refused_until_the_demo_is_reseeded(
        tmp_path, source_dsn):
    _old_demo(source_dsn)
    world = build_world(tmp_path, days=1, AIRFLOW_CONN_DEMO_SOURCE=source_dsn)

    result = world.exportctl("validate", str(world.config))

    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{world.config / 'acme.yaml'}: widget_exports[id=daily-spend].csv.timestamps: 'local' "
        f"cannot apply to column 'event_time' of widget_metrics: it is timestamp without time "
        f"zone, {FIX}",
        f"{world.config / 'kiwi-outdoors.yaml'}: widget_exports[id=business-day-revenue]"
        f".csv.timestamps: 'local' cannot apply to column 'event_time' of widget_metrics: it is "
        f"timestamp without time zone, {FIX}"]
    assert result.stderr == "2 error(s) in 2 file(s)\n"
    # The demo seeder converts the columns (their values were UTC), and the demo is valid.
    with psycopg.connect(source_dsn) as conn:
        before = conn.execute("SELECT min(event_time) FROM widget_metrics").fetchone()[0]
    seed_source(parse_connection("demo_source", source_dsn), COMPANIES, now=SEEDED_AT, days=3)
    assert _column_types(source_dsn) == [("event_time", "timestamp with time zone"),
                                         ("ingested_at", "timestamp with time zone")]
    with psycopg.connect(source_dsn) as conn:
        conn.execute("SET TIME ZONE 'Pacific/Auckland'")
        after = conn.execute("SELECT min(event_time) FROM widget_metrics").fetchone()[0]
    assert after.utcoffset() == timedelta(hours=13)  # shown in Auckland: it has a zone now
    assert after.astimezone(UTC).replace(tzinfo=None) == before  # the same UTC instant
    result = world.exportctl("validate", str(world.config))
    assert (result.returncode, result.stdout, result.stderr) == (
        0, f"OK: 3 companies, 10 schedules in {world.config}\n", "")


def test_a_company_without_rows_is_a_warning_of_validate_and_preview(tmp_path, source_dsn):
    seed_source(parse_connection("demo_source", source_dsn), ["acme", "kiwi-outdoors"],
                now=SEEDED_AT, days=3)
    world = build_world(tmp_path, days=1, AIRFLOW_CONN_DEMO_SOURCE=source_dsn)
    warning = ("warning: dentsu-happiness: the source 'demo_source' has no rows of company "
               "'dentsu-happiness' in channel_metrics (company_id = 'dentsu-happiness'): its "
               "exports of channel_metrics will be files with only their header until rows "
               "arrive; check that company_id holds the company id")

    result = world.exportctl("validate", str(world.config))

    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        warning, f"OK: 3 companies, 10 schedules in {world.config} (1 warning(s))"]
    preview = world.exportctl("preview", str(world.config), "--company", "dentsu-happiness",
                              "--from", "2026-03-30", "--count", "1", "--json")
    assert (preview.returncode, preview.stderr) == (0, warning + "\n")
    assert len(preview.stdout) > 2 and preview.stdout.lstrip().startswith("[")
    quiet = world.exportctl("preview", str(world.config), "--company", "acme", "--from",
                            "2026-03-30", "--count", "1", "--json")
    assert (quiet.returncode, quiet.stderr) == (0, "")
    skipped = world.exportctl("validate", str(world.config), "--no-source")
    assert skipped.stdout == f"OK: 3 companies, 10 schedules in {world.config}\n"


def test_an_unreachable_source_is_a_warning_saying_what_was_not_checked(tmp_path):
    missing = tmp_path / "nowhere.db"
    world = build_world(tmp_path / "w", days=1, AIRFLOW_CONN_DEMO_SOURCE=f"sqlite:///{missing}")

    result = world.exportctl("validate", str(world.config))

    assert (result.returncode, result.stderr) == (0, "")
    first, last = result.stdout.splitlines()
    assert first.startswith(f"warning: source 'demo_source' could not be checked (source "
                            f"'demo_source' (sqlite:///{missing}): SQLite file '{missing}' does "
                            "not exist")
    assert first.endswith("); csv timestamps and companies without rows were not checked "
                          "against it (--no-source skips this check)")
    assert last == f"OK: 3 companies, 10 schedules in {world.config} (1 warning(s))"


def test_a_render_without_rows_says_so_in_the_task_log(tmp_path, monkeypatch, caplog):
    from export_lib.pipeline import register_run, render_run

    world = build_world(tmp_path, days=1).use(monkeypatch)
    ledger = world.ledger()
    slot = datetime.fromisoformat("2026-03-20T06:00:00+00:00")  # long before the seeded rows
    key = register_run(ledger, world.schedule("acme/daily-spend"), slot,
                       now=SEEDED_AT).run_key
    with caplog.at_level(logging.WARNING, logger="export_lib"):
        rendered = render_run(ledger, world.store, key, now=SEEDED_AT)
    assert rendered.rows == 0
    assert ("company=acme schedule=acme/daily-spend period=2026-03-19: 0 rows in "
            "[2026-03-18T23:00:00+00:00, 2026-03-19T23:00:00+00:00) from widget_metrics; the "
            "file has only its header") in caplog.text
