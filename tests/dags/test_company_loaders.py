"""Adding a company is never silent: a company file without its DAG loader is a Broken DAG and
a failed ``exportctl validate``, each naming the fix; the fix makes its DAGs appear."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.dags.test_integrity import DAGS, _dag_bag


@pytest.fixture()
def dags_copy(tmp_path: Path) -> Path:
    target = tmp_path / "dags"
    shutil.copytree(DAGS, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def test_a_new_company_file_is_never_silent(dags_copy):
    """A company file without a loader is a Broken DAG naming the fix; the fix makes its DAGs
    appear."""
    text = ((dags_copy / "config" / "acme.yaml").read_text().replace("id: acme\n", "id: newco\n", 1)
            .replace("outbox/acme/", "outbox/newco/"))
    (dags_copy / "config" / "newco.yaml").write_text(text)

    bag = _dag_bag(dags_copy)
    check = str(dags_copy / "config_check.py")
    assert list(bag.import_errors) == [check]
    assert (f"{dags_copy}/config/newco.yaml: no DAG loader {dags_copy}/company_newco.py, so this "
            f"company's DAGs never appear in Airflow; create it with: exportctl loaders "
            f"{dags_copy}") in bag.import_errors[check]
    assert not any("__newco__" in i for i in bag.dags)

    validate = subprocess.run([sys.executable, "-m", "export_lib", "validate",
                               str(dags_copy / "config")], capture_output=True, text=True)
    assert validate.returncode == 1
    assert "newco.yaml: no DAG loader" in validate.stdout

    fix = subprocess.run([sys.executable, "-m", "export_lib", "loaders", str(dags_copy)],
                         capture_output=True, text=True, check=True)
    assert fix.stdout == f"wrote {dags_copy}/company_newco.py\n"
    bag = _dag_bag(dags_copy)
    assert bag.import_errors == {}
    assert {i for i in bag.dags if "__newco__" in i} == {
        "widget_export__newco__daily-spend", "widget_export__newco__hourly-clicks",
        "data_export__newco__google-ads__primary", "data_export__newco__google-ads__secondary"}


def test_a_worker_running_a_task_of_a_removed_company_gets_a_one_line_failure(
        dags_copy, tmp_path, monkeypatch):
    """The company file is gone, its loader stays: the worker's parse (parsing context set to
    the task) gets that task, which fails at once naming company and file; with no record of
    the company's DAGs, the dag-processor's parse reports the loader as a Broken DAG."""
    from airflow.sdk.exceptions import AirflowFailException

    monkeypatch.setenv("EXPORT_DAG_INDEX_DIR", str(tmp_path / "never-recorded"))
    (dags_copy / "config" / "acme.yaml").unlink()
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "widget_export__acme__daily-spend")
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_TASK_ID", "publish")

    bag = _dag_bag(dags_copy)
    dag = bag.dags["widget_export__acme__daily-spend"]
    (task,) = dag.tasks
    assert task.task_id == "publish"
    with pytest.raises(AirflowFailException) as exc:
        task.execute({})
    assert str(exc.value) == (
        "company 'acme' was removed from the config (dags/config/acme.yaml is gone): this run "
        "is not rendered, published or delivered; restore dags/config/acme.yaml to export it")

    monkeypatch.delenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID")
    monkeypatch.delenv("_AIRFLOW_PARSING_CONTEXT_TASK_ID")
    processor = _dag_bag(dags_copy)
    assert str(dags_copy / "company_acme.py") in processor.import_errors
    assert not any("__acme__" in i for i in processor.dags)


def test_the_dag_processor_keeps_a_removed_companys_dags_as_failing_stand_ins(
        dags_copy, tmp_path, monkeypatch):
    """Each full parse records the company's DAG shape; after its file is removed the
    dag-processor's parse rebuilds the same DAG ids, task ids and dependencies (so Airflow does
    not mark them stale and a cleared task runs), each task failing with the one removal line,
    no new run scheduled; the orphan loader is still a Broken DAG naming the fix."""
    from airflow.sdk.exceptions import AirflowFailException

    monkeypatch.setenv("EXPORT_DAG_INDEX_DIR", str(tmp_path / "index"))
    before = _dag_bag(dags_copy)
    shapes = {dag_id: {t.task_id: sorted(t.upstream_task_ids) for t in dag.tasks}
              for dag_id, dag in before.dags.items() if "__acme" in dag_id}
    assert "widget_export__acme__daily-spend" in shapes and "manual_export__acme" in shapes
    (record,) = (tmp_path / "index").glob("*/acme.json")  # one folder per dags folder

    (dags_copy / "config" / "acme.yaml").unlink()
    after = _dag_bag(dags_copy)
    assert str(dags_copy / "company_acme.py") not in after.import_errors
    assert "DAG loader without a company file" in after.import_errors[
        str(dags_copy / "config_check.py")]
    stand_ins = {dag_id: dag for dag_id, dag in after.dags.items() if "__acme" in dag_id}
    assert {dag_id: {t.task_id: sorted(t.upstream_task_ids) for t in dag.tasks}
            for dag_id, dag in stand_ins.items()} == shapes
    daily = stand_ins["widget_export__acme__daily-spend"]
    assert type(daily.timetable).__name__ == "NullTimetable"  # no new runs
    with pytest.raises(AirflowFailException, match=r"^company 'acme' was removed from the "
                       r"config \(dags/config/acme.yaml is gone\)"):
        daily.get_task("render").execute({})
    # Another company's DAGs are untouched.
    assert {i for i in after.dags if "__kiwi-outdoors" in i} == {
        i for i in before.dags if "__kiwi-outdoors" in i}


WORKER_PARSE = """
import runpy, sys
import export_airflow.plugin  # a task process loads the plugins before it parses the DAG file
before = set(sys.modules)
runpy.run_path(sys.argv[1])
print(" ".join(sorted(set(sys.modules) - before)))
print(" ".join(sorted(sys.modules)))
"""


@pytest.mark.parametrize(("dag_id", "absent"), [
    # recovery: latest, no restatement: neither the REST backfill client nor Airflow core's
    # trigger_dag (TriggerDagRunOperator's base) has any business in its task processes
    ("widget_export__acme__hourly-clicks",
     {"export_airflow.tasks.recovery", "export_airflow.building.restatement",
      "airflow.providers.standard.operators.trigger_dagrun", "airflow.api.common.trigger_dag"}),
    # recovery: each: its recover_missed task needs the client, still no restatement
    ("widget_export__acme__daily-spend",
     {"export_airflow.building.restatement", "airflow.providers.standard.operators.trigger_dagrun"}),
])
def test_a_workers_parse_imports_only_what_its_dag_uses(dag_id, absent):
    """Every task process parses its DAG file (issue 25: start-up is most of a task's cost);
    operators of policies the export does not use are imported only where they are used."""
    import os

    env = {**os.environ, "_AIRFLOW_PARSING_CONTEXT_DAG_ID": dag_id,
           "_AIRFLOW_PARSING_CONTEXT_TASK_ID": "publish",
           "PYTHONPATH": os.pathsep.join([str(DAGS.parent), str(DAGS.parent / "plugins")])}
    out = subprocess.run([sys.executable, "-c", WORKER_PARSE, str(DAGS / "company_acme.py")],
                         capture_output=True, text=True, env=env, check=True, timeout=120)
    parsed, everything = out.stdout.splitlines()[-2:]
    imported = set(parsed.split())
    assert "export_airflow.building.dag_factory" in imported  # the parse did run
    assert absent & imported == set()
    # No format's or destination's library before a task needs it, in the plugin or the
    # parse (issue 25 item 2: start-up per task): Parquet, object stores, SFTP, e-mail, the
    # source driver.
    heavy = {m for m in everything.split() if m.split(".")[0] in HEAVY}
    assert heavy == set(), sorted(heavy)[:5]


HEAVY = {"pyarrow", "pandas", "numpy", "boto3", "botocore", "s3transfer", "paramiko",
         "smtplib", "psycopg", "psycopg2"}


def test_a_newcomer_writing_into_an_existing_companys_directory_is_its_own_import_error(
        dags_copy, pg_ledger_database, monkeypatch):
    """newco writes inside acme's directory (both legal alone: /srv/exports/acme is a mount
    too). acme has exported (a run in the ledger), so only newco's loader is a Broken DAG, with
    the line exportctl validate prints; every acme DAG still loads."""
    from datetime import UTC, datetime, timedelta

    from export_lib.ledger import open_ledger
    from export_lib.ledger.records import RunRegistration

    config = dags_copy / "config"
    defaults = (config / "defaults.yaml").read_text()
    (config / "defaults.yaml").write_text(defaults.replace(
        "local_mounts: []\n", 'local_mounts: ["/srv/exports", "/srv/exports/acme"]\n', 1))
    acme = (config / "acme.yaml").read_text()
    own = "      - {id: acme-dir, type: local, path: outbox/acme/daily-spend}\n"
    assert own in acme
    (config / "acme.yaml").write_text(acme.replace(
        own, own + "      - {id: nas, type: local, path: /srv/exports/acme}\n", 1))
    (config / "newco.yaml").write_text(
        "company: {id: newco, name: Newco, timezone: UTC, owner: o@newco.example}\n"
        "data_exports:\n  - channel: ads\n    destinations:\n"
        "      - {id: nas, type: local, path: /srv/exports/acme/newco/in}\n")
    subprocess.run([sys.executable, "-m", "export_lib", "loaders", str(dags_copy)], check=True,
                   capture_output=True)
    ledger = open_ledger(pg_ledger_database)
    ledger.upgrade()
    seen = datetime(2026, 11, 2, 9, 30, tzinfo=UTC)
    ledger.register(RunRegistration(
        run_key="acme/daily-spend/2026-11-02T06:00Z", company="acme",
        schedule_id="acme/daily-spend", slot=seen, window_start=seen - timedelta(days=1),
        window_end=seen, timezone="Europe/Berlin", window_kind="calendar_day",
        config_version="v1", config_snapshot={"version": "v1"}, owner="o@acme.example",
        source_cutoff=seen, deadline=seen + timedelta(hours=2)), seen)
    monkeypatch.setenv("EXPORT_LEDGER_URL", pg_ledger_database)

    bag = _dag_bag(dags_copy)
    loader = str(dags_copy / "company_newco.py")
    assert sorted(bag.import_errors) == [loader]
    line = (f"{config}/newco.yaml: data_exports[channel=ads].primary.destinations[0]: local "
            f"srv/exports/acme/newco/in is also written by company 'acme' ({config}/acme.yaml); "
            "destinations are never shared between companies, and 'acme' has exported since "
            "2026-11-02 09:30 UTC while 'newco' has no run in the ledger: give this company its "
            "own directory or prefix")
    assert line in bag.import_errors[loader]
    assert {i for i in bag.dags if i.split("__")[1:2] == ["acme"]} == {
        "widget_export__acme__daily-spend", "widget_export__acme__hourly-clicks",
        "data_export__acme__google-ads__primary", "data_export__acme__google-ads__secondary",
        "manual_export__acme", "recovery_batch__acme"}
    validate = subprocess.run([sys.executable, "-m", "export_lib", "validate", str(config)],
                              capture_output=True, text=True)
    assert validate.returncode == 1 and line in validate.stdout.splitlines()
