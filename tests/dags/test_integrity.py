"""DAG integrity: the shipped dags/ parse cleanly into exactly the DAGs the config describes.

Parsed the way the dag-processor does (``DagBag`` over a folder of loaders). Expectations are
computed from the config catalog's raw fields (company, export, channel, kind), never from the
factory's own output, plus a few literal values of the shipped files so a wrong catalog cannot
hide a wrong DAG. Just over 400 lines on purpose: one DagBag parse (the slow part) is shared by
every check of the shipped folder.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import AIRFLOW_ENV, REPO

TASKS = ("resolve_window", "render", "publish", "deliver")
DAGS = REPO / "dags"


def _dag_bag(folder: Path):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(folder))


def _catalog(config_dir: Path = DAGS / "config"):
    from export_lib.config.loader import load_catalog

    catalog = load_catalog(config_dir)
    catalog.raise_for_errors()
    return catalog


def _expected_id(schedule) -> str:
    if schedule.kind == "widget":
        return f"widget_export__{schedule.company.id}__{schedule.export_id}"
    return f"data_export__{schedule.company.id}__{schedule.channel}__{schedule.kind}"


def _expected_ids(folder: Path = DAGS) -> set[str]:
    """Every export of the catalog, each company's ``manual_export__<company>`` (and
    ``recovery_batch__<company>`` when one of its exports has ``recovery: each``), plus one DAG
    per other DAG file (``demo_feed.py`` → ``demo_feed``) when those files exist."""
    catalog = _catalog(folder / "config")
    ids = {_expected_id(s) for s in catalog.schedules}
    ids |= {f"manual_export__{company}" for company in catalog.companies}
    ids |= {f"recovery_batch__{s.company.id}" for s in catalog.schedules
            if s.policies.recovery == "each"}
    return ids | {p.stem for p in folder.glob("*.py")
                  if not p.name.startswith("company_") and p.name != "config_check.py"}


@pytest.fixture(scope="module")
def shipped_bag():
    return _dag_bag(DAGS)


@pytest.fixture()
def dags_copy(tmp_path: Path) -> Path:
    target = tmp_path / "dags"
    shutil.copytree(DAGS, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def test_shipped_dags_parse_without_import_errors(shipped_bag):
    assert shipped_bag.import_errors == {}


def test_shipped_dag_ids_are_exactly_the_configured_exports(shipped_bag):
    expected = _expected_ids()
    assert set(shipped_bag.dags) == expected
    # Literal ids of the shipped config: a catalog that lost an export cannot pass silently.
    assert {"widget_export__acme__daily-spend", "widget_export__acme__hourly-clicks",
            "widget_export__kiwi-outdoors__six-hourly-orders",
            "data_export__acme__google-ads__primary", "data_export__acme__google-ads__secondary",
            "data_export__dentsu-happiness__tiktok__secondary", "manual_export__acme",
            "manual_export__kiwi-outdoors", "recovery_batch__acme"} <= expected


@pytest.fixture(scope="module")
def shipped_exports(shipped_bag) -> Iterator[tuple]:
    """(schedule, dag) for every scheduled export of the shipped config."""
    return [(s, shipped_bag.dags[_expected_id(s)]) for s in _catalog().schedules]


# The late-data policies add tasks around the core chain once the factory supports them
# (export_airflow.tasks.sensors): a sensor between resolve and render, a restatement after deliver.
LATE_DATA_TASKS = importlib.util.find_spec("export_airflow.tasks.sensors") is not None
# restate: the export run ends by triggering its restatement run (restatement__<company> DAG).
RESTATE = ("restate_later",)


def _expected_chain(schedule) -> tuple[str, ...]:
    policy = schedule.policies.late_data.policy if LATE_DATA_TASKS else "none"
    if policy == "wait_for_watermark":
        return ("resolve_window", "wait_for_watermark", *TASKS[1:])
    return TASKS + RESTATE if policy == "restate" else TASKS


def test_every_export_dag_runs_resolve_render_publish_then_mapped_deliver(shipped_exports):
    from airflow.sdk.definitions.mappedoperator import MappedOperator

    for schedule, dag in shipped_exports:
        tasks = dag.task_dict
        chain = _expected_chain(schedule)
        # recovery: each adds recover_missed, on its own (ADR 0006)
        recover = {"recover_missed"} if schedule.policies.recovery == "each" else set()
        assert set(tasks) == set(chain) | recover, dag.dag_id
        if recover:
            assert tasks["recover_missed"].upstream_task_ids == set(), dag.dag_id
            assert tasks["recover_missed"].downstream_task_ids == set(), dag.dag_id
        assert dag.catchup is False, dag.dag_id
        for upstream, downstream in zip(chain, chain[1:], strict=False):
            assert downstream in tasks[upstream].downstream_task_ids, (dag.dag_id, upstream)
        assert tasks["resolve_window"].upstream_task_ids == set()
        # render also depends on resolve_window through its XComArg input
        assert tasks["render"].upstream_task_ids == {"resolve_window",
                                                     chain[chain.index("render") - 1]}
        assert tasks["publish"].upstream_task_ids == {"render"}
        assert tasks["deliver"].upstream_task_ids == {"publish"}
        assert tasks[chain[-1]].downstream_task_ids == set()
        deliver = tasks["deliver"]
        assert isinstance(deliver, MappedOperator), dag.dag_id
        # mapped over the run's captured destinations (publish returns them), never over
        # today's config: a destination added later must not fail earlier runs (ADR 0005); no
        # task process of their own (issue 25)
        (arg,) = deliver.expand_input.value.values()
        assert (arg.operator.task_id, arg.key) == ("publish", "return_value")
        assert deliver.partial_kwargs["published"].key == "summary"
        assert type(deliver.retry_policy).__name__ == "DeliveryWindowPolicy"
        assert deliver.partial_kwargs["retries"] >= 20  # 10 min doubling, 6 h cap, over 5 days
        assert not any(isinstance(tasks[t], MappedOperator) for t in TASKS[:3])


def test_every_export_dag_uses_the_export_timetable_of_its_config(shipped_exports):
    from export_airflow.timetable import ExportTimetable

    for schedule, dag in shipped_exports:
        assert isinstance(dag.timetable, ExportTimetable), dag.dag_id
        assert dag.timetable.timing == schedule.timing, dag.dag_id
        expected_zone = (schedule.company.timezone if schedule.kind == "widget"
                         else schedule.timing.timezone)
        assert dag.timetable.timing.timezone == expected_zone
    by_id = {dag.dag_id: dag.timetable.timing for _, dag in shipped_exports}
    # Literal values of dags/config: acme.yaml (07:00 Berlin daily, hourly with fold=both),
    # kiwi-outdoors.yaml (02:00 Auckland every 6 h, gap=skip), defaults.yaml (crons in UTC).
    daily = by_id["widget_export__acme__daily-spend"]
    assert (daily.timezone, daily.export_hour, daily.interval_hours, daily.cron) == (
        "Europe/Berlin", 7, 24, None)
    hourly = by_id["widget_export__acme__hourly-clicks"]
    assert (hourly.interval_hours, hourly.dst_fold) == (1, "both")
    orders = by_id["widget_export__kiwi-outdoors__six-hourly-orders"]
    assert (orders.timezone, orders.export_hour, orders.interval_hours, orders.dst_gap) == (
        "Pacific/Auckland", 2, 6, "skip")
    primary = by_id["data_export__acme__google-ads__primary"]
    assert (primary.cron, primary.timezone) == ("0 14 * * *", "UTC")
    assert by_id["data_export__acme__google-ads__secondary"].cron == "0 0 * * *"


def test_every_export_dag_has_tags_owner_and_a_doc_stating_its_schedule(shipped_exports):
    for schedule, dag in shipped_exports:
        tags = set(dag.tags)
        assert {f"company:{schedule.company.id}", f"kind:{schedule.kind}"} <= tags, dag.dag_id
        channel_tags = {t for t in tags if t.startswith("channel:")}
        assert channel_tags == ({f"channel:{schedule.channel}"} if schedule.channel else set())
        assert dag.default_args["owner"] == schedule.owner
        assert {t.owner for t in dag.tasks} == {schedule.owner}, dag.dag_id
        timing = schedule.timing
        when = timing.cron if timing.cron is not None else f"{timing.export_hour:02d}:00"
        assert when in dag.doc_md and timing.timezone in dag.doc_md, dag.dag_id
        assert "deadline" in dag.doc_md.lower(), dag.dag_id
    owners = {dag.dag_id: schedule.owner for schedule, dag in shipped_exports}
    assert owners["widget_export__acme__daily-spend"] == "data-team@acme.example"


BROKEN_ACME = {
    "unknown_key": (
        lambda text: text.replace("  status: active\n", "  status: active\n  colour: red\n"),
        ["company.colour", "unknown key"]),
    "bad_timezone": (
        lambda text: text.replace("timezone: Europe/Berlin", "timezone: Europe/Berln"),
        ["company.timezone", "unknown timezone 'Europe/Berln'", "Europe/Berlin"]),
    "not_yaml": (
        lambda text: text.replace("  name: ACME Corp\n", "  name: [ACME Corp\n"),
        # No field exists in a file that is not YAML: the position stands in for it.
        ["not valid YAML", "line 6 column 11", "expected ',' or ']'"]),
}


def _of_acme(dag_id: str) -> bool:
    return "__acme__" in dag_id or dag_id in ("manual_export__acme", "recovery_batch__acme")


@pytest.mark.parametrize("breakage", sorted(BROKEN_ACME))
def test_a_broken_company_file_is_one_import_error_and_the_rest_load(dags_copy, breakage):
    edit, expected_text = BROKEN_ACME[breakage]
    yaml_file = dags_copy / "config" / "acme.yaml"
    original = yaml_file.read_text(encoding="utf-8")
    yaml_file.write_text(edit(original), encoding="utf-8")
    assert yaml_file.read_text(encoding="utf-8") != original  # the edit applied

    bag = _dag_bag(dags_copy)

    assert list(bag.import_errors) == [str(dags_copy / "company_acme.py")]
    error = bag.import_errors[str(dags_copy / "company_acme.py")]
    assert str(yaml_file) in error
    for text in expected_text:
        assert text in error, (text, error[-1500:])
    others = {i for i in _expected_ids(DAGS) if not _of_acme(i)}
    assert set(bag.dags) == others
    assert others and not any(_of_acme(i) for i in bag.dags)


def test_a_loader_whose_yaml_was_deleted_is_one_import_error_naming_the_file(dags_copy):
    (dags_copy / "config" / "kiwi-outdoors.yaml").unlink()

    bag = _dag_bag(dags_copy)

    loader = str(dags_copy / "company_kiwi-outdoors.py")
    check = str(dags_copy / "config_check.py")
    assert sorted(bag.import_errors) == [loader, check]
    assert str(dags_copy / "config" / "kiwi-outdoors.yaml") in bag.import_errors[loader]
    assert "no config file for company 'kiwi-outdoors'" in bag.import_errors[loader]
    assert (f"{loader}: DAG loader without a company file {dags_copy}/config/kiwi-outdoors.yaml; "
            f"remove it with: exportctl loaders {dags_copy}") in bag.import_errors[check]
    assert set(bag.dags) == {i for i in _expected_ids(DAGS) if "__kiwi-outdoors__" not in i
                             and not i.endswith("__kiwi-outdoors")}



PARSE_PROBE = r"""
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
print("RESULT " + json.dumps({"dags": sorted(bag.dags), "errors": bag.import_errors}))
"""


def test_parsing_touches_no_database_or_network(dags_copy, tmp_path):
    """Ledger, demo source and even Airflow's metadata DB point at loopback listeners that
    record any connection: a parse must finish with none (nor create the SQLite files)."""
    listeners = [socket.create_server(("127.0.0.1", 0)) for _ in range(3)]
    ledger, source, metadata = (s.getsockname()[1] for s in listeners)
    env = {**os.environ, **AIRFLOW_ENV,
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "plugins")]),
           "AIRFLOW__CORE__DAGS_FOLDER": str(dags_copy),
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN":
               f"postgresql+psycopg://u:p@127.0.0.1:{metadata}/airflow",
           "EXPORT_LEDGER_URL": f"postgresql+psycopg://u:p@127.0.0.1:{ledger}/ledger",
           "AIRFLOW_CONN_DEMO_SOURCE": f"postgresql://u:p@127.0.0.1:{source}/source",
           "EXPORT_HOME": str(tmp_path / "home")}
    try:
        result = subprocess.run([sys.executable, "-c", PARSE_PROBE, str(dags_copy)], env=env,
                                capture_output=True, text=True, timeout=120, check=False)
        for server in listeners:
            server.setblocking(False)
            with pytest.raises(BlockingIOError):  # nobody connected
                server.accept()
    finally:
        for server in listeners:
            server.close()
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stderr[-3000:]
    parsed = json.loads(lines[-1].removeprefix("RESULT "))
    assert parsed["errors"] == {}
    assert set(parsed["dags"]) == _expected_ids(DAGS)
    assert not (tmp_path / "home").exists()


def test_a_worker_parse_builds_only_the_dag_it_runs(dags_copy, monkeypatch):
    """With the task runner's parsing context set, the company loader builds one DAG."""
    from airflow.sdk.definitions.context import (
        _AIRFLOW_PARSING_CONTEXT_DAG_ID,
        _AIRFLOW_PARSING_CONTEXT_TASK_ID,
    )

    wanted = "data_export__dentsu-happiness__tiktok__secondary"
    monkeypatch.setenv(_AIRFLOW_PARSING_CONTEXT_DAG_ID, wanted)
    monkeypatch.setenv(_AIRFLOW_PARSING_CONTEXT_TASK_ID, "render")

    bag = _dag_bag(dags_copy / "company_dentsu-happiness.py")  # a worker parses one file

    assert bag.import_errors == {}
    assert set(bag.dags) == {wanted}
    assert set(bag.dags[wanted].task_dict) == {*TASKS, "recover_missed"}  # recovery: each


def test_each_company_has_a_manual_dag_whose_form_lists_only_its_own_exports(shipped_bag):
    catalog = _catalog()
    for company in catalog.companies:
        dag = shipped_bag.dags[f"manual_export__{company}"]
        params = dag.params.dump()
        schedules = catalog.for_company(company)
        assert params["company"] == company
        assert dag.params.get_param("company").schema["enum"] == [company]
        assert dag.params.get_param("base_export").schema["enum"] == sorted(
            s.schedule_id for s in schedules)
        assert dag.params.get_param("destinations").schema["items"]["enum"] == sorted(
            {d.id for s in schedules for d in s.destinations})
        assert f"company:{company}" in dag.tags


def test_a_worker_parse_still_reports_a_broken_company_file(dags_copy, monkeypatch):
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "widget_export__acme__daily-spend")
    yaml_file = dags_copy / "config" / "acme.yaml"
    yaml_file.write_text(yaml_file.read_text(encoding="utf-8").replace(
        "export_hour: 7", "export_hour: 25"), encoding="utf-8")

    bag = _dag_bag(dags_copy / "company_acme.py")

    error = bag.import_errors[str(dags_copy / "company_acme.py")]
    assert "widget_exports[0].export_hour" in error and "out of range" in error
    assert bag.dags == {}


def test_a_paused_company_still_loads_its_dags_paused_on_creation(dags_copy):
    yaml_file = dags_copy / "config" / "kiwi-outdoors.yaml"
    yaml_file.write_text(yaml_file.read_text(encoding="utf-8").replace(
        "status: active", "status: paused"), encoding="utf-8")

    bag = _dag_bag(dags_copy)

    assert bag.import_errors == {}
    assert set(bag.dags) == _expected_ids(DAGS)
    paused = {i for i, dag in bag.dags.items() if dag.is_paused_upon_creation}
    assert paused == {i for i in _expected_ids(DAGS) if "__kiwi-outdoors__" in i}


def test_operators_render_their_template_fields_from_a_plain_context():
    """What the task runner does before execute(): ``task.render_template_fields(context)``.
    Constructors keep templates verbatim (Airflow's rule: no work on template fields in
    ``__init__``), rendering fills them, nested structures included."""
    from airflow.sdk import DAG
    from export_airflow.tasks.operators import DeliverOperator, PublishOperator, ResolveWindowOperator

    with DAG("template_probe", schedule=None):
        resolve = ResolveWindowOperator(task_id="resolve_window",
                                        schedule_id="{{ params.company }}/{{ params.export }}",
                                        config_dir="{{ params.root }}/config")
        publish = PublishOperator(task_id="publish",
                                  rendered={"run_key": "{{ params.company }}/{{ ds }}"})
        deliver = DeliverOperator(task_id="deliver", published={"run_key": "k"},
                                  destination_id="{{ params.destination }}")
    assert resolve.schedule_id == "{{ params.company }}/{{ params.export }}"
    context = {"params": {"company": "acme", "export": "daily-spend", "root": "/srv/dags",
                          "destination": "acme-dir"}, "ds": "2026-03-29"}

    for task in (resolve, publish, deliver):
        task.render_template_fields(context)

    assert (resolve.schedule_id, resolve.config_dir) == ("acme/daily-spend", "/srv/dags/config")
    assert publish.rendered == {"run_key": "acme/2026-03-29"}
    assert deliver.destination_id == "acme-dir"


def test_factory_tasks_render_to_their_configured_values():
    from export_airflow.building.dag_factory import company_dags

    dag = next(d for d in company_dags(DAGS / "config", "acme")
               if d.dag_id == "widget_export__acme__daily-spend")
    resolve = dag.task_dict["resolve_window"]
    resolve.render_template_fields({"params": {"regenerate": False}})
    assert (resolve.schedule_id, resolve.config_dir) == ("acme/daily-spend",
                                                         str(DAGS / "config"))


def test_the_regenerate_param_reaches_the_render_task():
    """The factory passes ``regenerate="{{ params.regenerate }}"``: it must be a template
    field, or the task sees the literal text and never regenerates."""
    from export_airflow.building.dag_factory import company_dags

    dag = next(d for d in company_dags(DAGS / "config", "acme")
               if d.dag_id == "widget_export__acme__daily-spend")
    render = dag.task_dict["render"]
    assert render.regenerate == "{{ params.regenerate }}"
    assert "regenerate" in render.template_fields
    assert render.render_template(render.regenerate, {"params": {"regenerate": True}}) == "True"


def test_an_edited_defaults_file_is_never_served_stale_by_the_parse_cache(dags_copy):
    """defaults.yaml is parsed once per process per *content*: an edit of the same size and
    with the old mtime restored (what an mtime/size cache would miss) is still picked up."""
    defaults = dags_copy / "config" / "defaults.yaml"
    dag_id = "data_export__acme__google-ads__primary"
    assert _dag_bag(dags_copy).dags[dag_id].timetable.timing.cron == "0 14 * * *"
    before = defaults.stat()
    text = defaults.read_text(encoding="utf-8")
    defaults.write_text(text.replace('cron: "0 14 * * *"', 'cron: "0 15 * * *"'),
                        encoding="utf-8")
    os.utime(defaults, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert defaults.stat().st_size == before.st_size

    assert _dag_bag(dags_copy).dags[dag_id].timetable.timing.cron == "0 15 * * *"


def test_doc_md_states_a_local_schedule_in_utc_too(shipped_exports):
    local = [(s, dag) for s, dag in shipped_exports if s.timing.timezone != "UTC"]
    assert local  # the shipped config has Berlin and Auckland schedules
    for _schedule, dag in local:
        assert "UTC" in dag.doc_md, dag.dag_id
    berlin = next(dag for s, dag in local if s.schedule_id == "acme/daily-spend")
    assert "= 06:00 UTC in standard time (+01:00), 05:00 UTC in daylight time (+02:00)" in berlin.doc_md


def test_every_task_alerts_on_final_failure_and_no_task_copies_the_form(shipped_bag):
    """The failure notifier is given to each task (not default_args, ADR 0028): every task of
    every export and manual DAG carries it, except recover_missed (its failure is not the
    export's); the trigger form is the DAG's only, and the manual lane's retry policy is on
    each of its tasks."""
    from export_airflow.alerts import ExportAlertNotifier
    from export_airflow.building.retry_policy import MANUAL_RETRY

    dags = [d for d in shipped_bag.dags.values()
            if d.dag_id.startswith(("widget_export__", "data_export__", "manual_export__"))]
    assert dags
    for dag in dags:
        assert "on_failure_callback" not in dag.default_args, dag.dag_id
        assert "regenerate" in dag.params, dag.dag_id
        for task in dag.tasks:
            callbacks = task.partial_kwargs.get("on_failure_callback") if hasattr(
                task, "partial_kwargs") else task.on_failure_callback
            if task.task_id == "recover_missed":
                assert not callbacks, dag.dag_id
                continue
            callbacks = callbacks if isinstance(callbacks, list) else [callbacks]
            assert any(isinstance(c, ExportAlertNotifier) for c in callbacks), (
                dag.dag_id, task.task_id)
            assert not task.params, (dag.dag_id, task.task_id)
            if dag.dag_id.startswith("manual_export__"):
                policy = (task.partial_kwargs.get("retry_policy")
                          if hasattr(task, "partial_kwargs") else task.retry_policy)
                assert policy is MANUAL_RETRY, (dag.dag_id, task.task_id)
