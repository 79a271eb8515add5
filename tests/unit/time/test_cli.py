"""``exportctl`` as a user runs it: exit codes, stdout/stderr (``main`` in-process, as a
subprocess would see it, and real ``python -m export_lib`` processes where that is the point)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.cli import exportctl as run_cli

REPO = Path(__file__).resolve().parents[3]
SHIPPED = REPO / "dags" / "config"


def exportctl(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def process(*args: str) -> subprocess.CompletedProcess[str]:
    """A real ``python -m export_lib`` process (the other tests call ``main`` in-process)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "export_lib", *args], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=60, check=False)


def test_validate_shipped_configs():
    result = process("validate", "dags/config", "--no-source")  # no demo source here
    assert (result.returncode, result.stdout, result.stderr) == (
        0, "OK: 3 companies, 10 schedules in dags/config\n", "")


def test_a_usage_error_exits_2_from_a_real_process():
    result = process("preview", "--timezone", "UTC", "--interval-hours", "0")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("exportctl: error: --interval-hours: interval_hours 0 is "
                                    "out of range"), result.stderr


def test_validate_prints_every_error_and_exits_1(tmp_path):
    (tmp_path / "defaults.yaml").write_text((SHIPPED / "defaults.yaml").read_text())
    (tmp_path / "acme.yaml").write_text(
        "company: {id: acme, name: A, timezone: Qqqq/Zzzz, owner: a@b.example, x: 1}\n")
    (tmp_path / "zed.yaml").write_text("company: [")
    result = exportctl("validate", str(tmp_path))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{tmp_path}/acme.yaml: company.timezone: unknown timezone 'Qqqq/Zzzz'; use an IANA "
        "name such as 'Europe/Berlin' or 'UTC'",
        f"{tmp_path}/acme.yaml: company.x: unknown key 'x'; allowed keys: authorized, holidays, "
        "id, name, owner, status, timezone",
        f"{tmp_path}/zed.yaml: line 1 column 11: not valid YAML: expected the node content, "
        "but found '<stream end>'",
    ]
    assert result.stderr == "3 error(s) in 2 file(s)\n"


def test_adhoc_preview_json():
    result = exportctl("preview", "--timezone", "Europe/Berlin", "--export-hour", "2",
                       "--interval-hours", "24", "--window", "calendar_day", "--dst-gap", "shift",
                       "--dst-fold", "first", "--from", "2026-03-29", "--count", "2", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        {"slot_utc": "2026-03-29T01:00:00Z", "slot_local": "2026-03-29T03:00:00+02:00",
         "window_start_utc": "2026-03-27T23:00:00Z", "window_end_utc": "2026-03-28T23:00:00Z",
         "window_start_local": "2026-03-28T00:00:00+01:00",
         "window_end_local": "2026-03-29T00:00:00+01:00", "window_kind": "calendar_day",
         "timezone": "Europe/Berlin", "window_timezone": "Europe/Berlin",
         "run_key": "adhoc/2026-03-29T01:00Z"},
        {"slot_utc": "2026-03-30T00:00:00Z", "slot_local": "2026-03-30T02:00:00+02:00",
         "window_start_utc": "2026-03-28T23:00:00Z", "window_end_utc": "2026-03-29T22:00:00Z",
         "window_start_local": "2026-03-29T00:00:00+01:00",
         "window_end_local": "2026-03-30T00:00:00+02:00", "window_kind": "calendar_day",
         "timezone": "Europe/Berlin", "window_timezone": "Europe/Berlin",
         "run_key": "adhoc/2026-03-30T00:00Z"},
    ]


def test_configured_preview_has_company_schedule_and_deadline():
    result = exportctl("preview", "dags/config", "--schedule", "dentsu-happiness/tiktok/primary",
                       "--from", "2026-06-01T00:00:00+02:00", "--count", "1", "--json")
    assert result.returncode == 0, result.stderr
    [row] = json.loads(result.stdout)
    assert {k: row[k] for k in ("company", "schedule", "slot_utc", "deadline_utc", "run_key",
                                "window_start_utc", "window_end_utc")} == {
        "company": "dentsu-happiness", "schedule": "dentsu-happiness/tiktok/primary",
        "slot_utc": "2026-06-01T09:30:00Z", "deadline_utc": "2026-06-01T13:30:00Z",
        "run_key": "dentsu-happiness/tiktok/primary/2026-06-01T09:30Z",
        "window_start_utc": "2026-05-01T15:00:00Z", "window_end_utc": "2026-05-31T15:00:00Z"}


def test_preview_table():
    result = exportctl("preview", "dags/config", "--company", "acme", "--from", "2026-01-01",
                       "--count", "1")
    assert result.returncode == 0
    assert result.stdout.splitlines()[0].split() == [
        "slot", "(local)", "slot", "(UTC)", "window", "start", "window", "end", "deadline",
        "(UTC)", "run", "key"]
    assert "acme/daily-spend/2026-01-01T06:00Z" in result.stdout


def test_bad_cli_input_exits_2_without_traceback():
    cases = [
        (("preview", "--timezone", "Europe/Berln"), "did you mean 'Europe/Berlin'"),
        (("preview", "--timezone", "UTC", "--interval-hours", "0"),
         "--interval-hours: interval_hours 0 is out of range; use a whole number of hours from 1 to 24"),
        (("preview", "--timezone", "UTC", "--window", "trailing_days"),
         "--window: window kind 'trailing_days' needs 'days'"),
        (("preview", "--timezone", "UTC", "--from", "soon"), "is not an ISO 8601 date/time"),
        (("preview", "dags/config", "--company", "nobody"), "unknown company 'nobody'"),
        (("preview",), "give CONFIG_DIR, or --timezone"),
        (("validate", "no/such/dir"), "config directory not found"),
    ]
    for args, message in cases:
        result = exportctl(*args)
        assert result.returncode == 2, args
        assert message in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_cli_does_not_import_airflow():
    code = ("import sys; from export_lib.cli.main import main; "
            "main(['validate', 'dags/config']); assert 'airflow' not in sys.modules")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    assert result.returncode == 0, result.stderr


def test_preview_reports_a_broken_selected_company_and_exits_1(tmp_path):
    (tmp_path / "defaults.yaml").write_text((SHIPPED / "defaults.yaml").read_text())
    (tmp_path / "acme.yaml").write_text(
        "company: {id: acme, name: A, timezone: Europe/Berln, owner: a@b.example}\n")
    result = exportctl("preview", str(tmp_path), "--company", "acme", "--json")
    assert (result.returncode, json.loads(result.stdout)) == (1, [])
    assert result.stderr == (
        f"config error: {tmp_path}/acme.yaml: company.timezone: unknown timezone "
        "'Europe/Berln'; did you mean 'Europe/Berlin', 'Europe/Dublin', 'Europe/Belfast'?\n")


def test_adhoc_preview_reports_every_bad_option_at_once():
    result = exportctl("preview", "--timezone", "UTC", "--interval-hours", "25",
                       "--window", "trailing_hours")
    assert result.returncode == 2
    assert result.stderr == (
        "exportctl: error: --interval-hours: interval_hours 25 is out of range; use a whole "
        "number of hours from 1 to 24; --window: "
        "window kind 'trailing_hours' needs 'hours' (a positive integer), e.g. {kind: "
        "trailing_hours, hours: 3}\n")
