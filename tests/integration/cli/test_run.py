"""``exportctl run`` / ``runs`` / ``ledger`` end to end, as subprocesses, on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from export_lib.checksums import sha256_file
from export_lib.ledger import open_ledger
from tests.world import (
    DAILY,
    DAILY_SLOT,
    REPO,
    World,
    build_world,
    clean_env,
    exportctl,
)

ARTIFACT = "exports/artifacts/acme/daily-spend/acme__daily-spend__2026-03-28__slot-20260329T0500Z__v1.csv"
OUTBOX = "exports/outbox/acme/daily-spend/acme__daily-spend__2026-03-28__slot-20260329T0500Z__v1.csv"


def test_running_the_same_slot_twice_makes_one_run_and_one_artifact(world: World):
    first = world.run()
    after_first = world.counts()
    files_first = world.visible_files()
    second = world.run()

    assert second == first
    assert first["run_key"] == f"{DAILY}/{DAILY_SLOT}"
    assert first["state"] == "ready"
    assert (first["window_start_utc"], first["window_end_utc"]) == (
        "2026-03-27T23:00:00Z", "2026-03-28T23:00:00Z")  # 28 March, Berlin (CET)
    art = first["artifact"]
    assert (art["version"], art["rows"]) == (1, 3 * 24)  # 3 widgets x 24 hours
    assert art["uri"] == (world.home / ARTIFACT).as_uri()
    assert first["deliveries"] == [{"destination": "acme-dir", "state": "acknowledged"}]
    # The second call changed nothing: no row in any ledger table, no file.
    assert after_first == world.counts() == {"runs": 1, "attempts": 1, "artifacts": 1,
                                             "events": 5, "deliveries": 1,
                                             "delivery_attempts": 1}
    assert files_first == world.visible_files()
    assert set(files_first) == {ARTIFACT, ARTIFACT + ".manifest.json", OUTBOX,
                                OUTBOX + ".sha256"}
    assert files_first[ARTIFACT] == files_first[OUTBOX] == art["sha256"]
    assert world.staging_files() == []

    manifest = json.loads((world.home / (ARTIFACT + ".manifest.json")).read_text())
    assert {k: manifest[k] for k in ("run_key", "sha256", "rows", "version", "supersedes",
                                     "timezone", "format", "period")} == {
        "run_key": first["run_key"], "sha256": art["sha256"], "rows": 72, "version": 1,
        "supersedes": None, "timezone": "Europe/Berlin", "format": "csv",
        "period": "2026-03-28"}

    (listed,) = world.runs()
    assert {k: listed[k] for k in ("run_key", "state", "window_start_utc", "window_end_utc")} \
        == {k: first[k] for k in ("run_key", "state", "window_start_utc", "window_end_utc")}
    assert [{k: a[k] for k in ("version", "sha256", "uri")} for a in listed["artifacts"]] == [
        {"version": 1, "sha256": art["sha256"], "uri": art["uri"]}]
    assert [(d["destination"], d["state"], d["version"]) for d in listed["deliveries"]] == [
        ("acme-dir", "acknowledged", 1)]


HOURLY = "acme__hourly-clicks__2026-03-28T1000--2026-03-28T1100__slot-20260328T1000Z__v1"


def test_runs_filters_by_company_and_schedule(sqlite_world: World):
    world = sqlite_world
    world.run()
    hourly = world.run("acme/hourly-clicks", "2026-03-28T10:00Z")["artifact"]
    assert hourly["uri"].startswith(world.artifacts.as_uri())  # "my%20world"
    assert "%20" in hourly["uri"]
    assert sha256_file(world.artifacts / "acme" / "hourly-clicks"
                       / f"{HOURLY}.parquet") \
        == hourly["sha256"]
    assert sorted(world.visible_files()) == sorted(
        [ARTIFACT, ARTIFACT + ".manifest.json", OUTBOX, OUTBOX + ".sha256"]
        + [f"{d}/acme/hourly-clicks/{HOURLY}.parquet{suffix}" for d, suffix in (("exports/artifacts", ""),
                                                 ("exports/artifacts", ".manifest.json"),
                                                 ("exports/outbox", ""),
                                                 ("exports/outbox", ".sha256"))])
    assert [r["run_key"] for r in world.runs()] == [
        "acme/daily-spend/2026-03-29T05:00Z", "acme/hourly-clicks/2026-03-28T10:00Z"]
    only = world.exportctl("runs", "--schedule", "acme/hourly-clicks", "--json")
    assert [r["run_key"] for r in json.loads(only.stdout)] == [
        "acme/hourly-clicks/2026-03-28T10:00Z"]
    none = world.exportctl("runs", "--company", "kiwi-outdoors", "--json")
    assert json.loads(none.stdout) == []


def test_with_nothing_set_the_embedded_defaults_work(tmp_path: Path):
    """Nothing set but the working directory: SQLite ledger and demo source under
    ./.airflow, artifacts under ./exports — the same defaults as ``make run``."""
    home = tmp_path / "checkout"
    shutil.copytree(REPO / "dags" / "config", home / "dags" / "config")
    env = clean_env()  # the working directory only
    for args in (("ledger", "upgrade"), ("demo", "seed", "--config", "dags/config")):
        result = exportctl(*args, cwd=home, env=env)
        assert result.returncode == 0, result.stderr
    yesterday = datetime.now(UTC).date() - timedelta(days=1)
    slot = datetime.combine(yesterday, datetime.min.time().replace(hour=7),
                            ZoneInfo("Europe/Berlin")).astimezone(UTC)
    result = exportctl("run", "dags/config", "--schedule", DAILY, "--slot", slot.isoformat(),
                       "--json", cwd=home, env=env)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    artifact = Path(out["artifact"]["uri"].removeprefix("file://"))
    assert artifact.parent == home / "exports" / "artifacts" / "acme" / "daily-spend"
    assert sha256_file(artifact) == out["artifact"]["sha256"]
    assert out["artifact"]["rows"] == 72
    assert (home / ".airflow" / "ledger.db").exists()
    assert (home / ".airflow" / "demo_source.db").exists()
    assert open_ledger(f"sqlite:///{home}/.airflow/ledger.db").count("artifacts") == 1


def test_unknown_schedule_id_exits_2_naming_the_nearest_ids(sqlite_world: World):
    world = sqlite_world
    result = world.exportctl("run", str(world.config), "--schedule", "acme/daily-spnd",
                             "--slot", DAILY_SLOT)
    assert result.returncode == 2
    assert "unknown schedule 'acme/daily-spnd'" in result.stderr
    assert "did you mean 'acme/daily-spend'" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    unknown_company = world.exportctl("run", str(world.config), "--schedule", "nope/daily",
                                      "--slot", DAILY_SLOT)
    assert unknown_company.returncode == 2, unknown_company.stderr
    assert unknown_company.stderr == (
        f"exportctl: unknown schedule 'nope/daily' in {world.config}; did you mean "
        "'acme/daily-spend'?\n")
    missing_dir = world.exportctl("run", "no-such-dir", "--schedule", DAILY, "--slot", DAILY_SLOT)
    assert missing_dir.returncode == 2
    assert "no-such-dir: config directory not found" in missing_dir.stderr
    assert world.counts()["runs"] == 0


def test_off_schedule_slot_exits_2_listing_the_nearest_slots(sqlite_world: World):
    world = sqlite_world
    result = world.exportctl("run", str(world.config), "--schedule", DAILY,
                             "--slot", "2026-03-29T05:30Z")
    assert result.returncode == 2
    assert result.stderr == (
        "exportctl: 2026-03-29T05:30:00Z is not a slot of acme/daily-spend (07:00 "
        "Europe/Berlin, every 24 h); the nearest valid slots are 2026-03-28T06:00:00Z, "
        "2026-03-29T05:00:00Z, 2026-03-30T05:00:00Z, 2026-03-31T05:00:00Z\n")
    assert world.counts()["runs"] == 0


@pytest.mark.parametrize("url", [
    "postgresql://exports:s3cr3t-pw@127.0.0.1:9/exports",
    "postgresql+psycopg://exports:s3cr3t-pw@127.0.0.1:9/exports?connect_timeout=2",
])
def test_unreachable_ledger_is_one_clear_line_with_the_password_masked(tmp_path: Path, url):
    home = tmp_path / "w"
    shutil.copytree(REPO / "dags" / "config", home / "config")  # valid: the ledger is what fails
    env = clean_env(EXPORT_HOME=str(home), EXPORT_LEDGER_URL=url)
    shown = "postgresql://127.0.0.1:9"  # scheme, host and port only
    for args in (("run", "config", "--schedule", DAILY, "--slot", DAILY_SLOT), ("runs",)):
        result = exportctl(*args, cwd=home, env=env)
        assert result.returncode == 1
        assert "Traceback" not in result.stderr
        assert "s3cr3t-pw" not in result.stderr + result.stdout
        assert result.stderr.startswith(
            f"exportctl: LedgerUnavailable: cannot reach the export ledger at {shown}")
        assert "Connection refused. Check EXPORT_LEDGER_URL" in result.stderr


def test_ledger_without_tables_on_a_server_asks_for_an_upgrade(pg_database: str, tmp_path: Path):
    home = tmp_path / "w"
    home.mkdir()
    result = exportctl("runs", cwd=home,
                       env=clean_env(EXPORT_HOME=str(home), EXPORT_LEDGER_URL=pg_database))
    assert result.returncode == 1
    assert "is at schema revision none" in result.stderr
    assert "run 'exportctl ledger upgrade'" in result.stderr


def test_two_concurrent_runs_of_the_same_slot_publish_one_artifact(pg_world: World):
    """A duplicate trigger racing the first one (PostgreSQL ledger): whatever the interleaving,
    one run, one artifact version, one delivery; a loser exits 0 reporting the winner's
    artifact, or 1 with a fencing error or one of the two delivery-race errors."""
    import subprocess
    import sys

    args = [sys.executable, "-m", "export_lib", "run", str(pg_world.config), "--schedule", DAILY,
            "--slot", DAILY_SLOT, "--json"]
    procs = [subprocess.Popen(args, env=pg_world.env, cwd=pg_world.home, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    results = [(p.wait(timeout=120), p.stdout.read(), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    assert 0 in [rc for rc, _, _ in results], results
    for rc, out, err in results:
        if rc == 0:
            assert json.loads(out)["artifact"]["version"] == 1
        else:
            # Lost the render race (fenced), or the delivery race: the winner is delivering,
            # or both claimed the attempt in the same instant and the ledger let one through.
            assert rc == 1, err
            assert ("FencingError" in err and "Nothing was made visible" in err) or (
                "DeliveryError" in err and ("is still in progress elsewhere" in err or
                                            "another worker started an attempt at the same "
                                            "moment; this one stands down" in err)), err
    counts = pg_world.counts()
    assert (counts["runs"], counts["artifacts"], counts["deliveries"]) == (1, 1, 1)
    assert sorted(pg_world.visible_files()) == sorted([ARTIFACT, ARTIFACT + ".manifest.json",
                                                       OUTBOX, OUTBOX + ".sha256"])
    (listed,) = pg_world.runs()
    assert [a["version"] for a in listed["artifacts"]] == [1]


def test_run_publishing_to_s3_and_delivering_from_it(tmp_path: Path, s3_server):
    """EXPORT_ARTIFACT_ROOT=s3://bucket/prefix with EXPORT_ARTIFACT_CONN: the artifact and its
    manifest land in the bucket, staging is gone, the local delivery gets the same bytes."""
    import uuid

    bucket = f"exports-{uuid.uuid4().hex[:10]}"
    s3 = s3_server.client()
    s3.create_bucket(Bucket=bucket)
    world = build_world(tmp_path / "world", f"sqlite:///{tmp_path / 'ledger.db'}",
                        EXPORT_ARTIFACT_ROOT=f"s3://{bucket}/exports",
                        EXPORT_ARTIFACT_CONN="artifacts",
                        AIRFLOW_CONN_ARTIFACTS=s3_server.connection_uri())
    first, second = world.run(), world.run()
    assert second == first
    key = "exports/acme/daily-spend/acme__daily-spend__2026-03-28__slot-20260329T0500Z__v1.csv"
    assert first["artifact"]["uri"] == f"s3://{bucket}/{key}"
    listed = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"])
    assert listed == [key, key + ".manifest.json"]
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert hashlib.sha256(body).hexdigest() == first["artifact"]["sha256"]
    assert sha256_file(world.home / OUTBOX) == first["artifact"]["sha256"]
    assert world.counts()["artifacts"] == 1 and world.counts()["deliveries"] == 1
