"""Our plugins are registered once, by the distribution's ``airflow.plugins`` entry points, in the
dev setup too (ADR 0026): ``make venv`` installs the project editable, and ``make run``, the test
stacks and this session point Airflow's plugins folder at ``plugins/``, so Airflow sees both
sources. The folder holds no plugin file; were one to register a plugin of the same name again,
Airflow would keep the first and report the second as a plugin import error (checked below, so
the checks above it can fail). tests/system/deploy/test_install.py checks the same in a wheel
install."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

SOURCE = ("airflow-scheduled-exports==0.1.0: EntryPoint(name='{name}', value='{value}', "
          "group='airflow.plugins')")
OURS = {"export_plugin": "export_airflow.plugin:ExportPlugin",
        "export_ui": "export_airflow.ui_plugin:ExportUiPlugin"}
PROVIDER_PLUGIN = "OpenLineageProviderPlugin"  # apache-airflow-providers-openlineage's
IMPORT_ERRORS = ("import json; from airflow import plugins_manager as m; "
                 "print(json.dumps(m.get_import_errors()))")
# Then which page modules loading every plugin imported, and the pages' app as the api-server
# asks for it (export_airflow.ui_plugin: only reading ``fastapi_apps`` imports them).
PAGES = ("import sys; pages = ('fastapi', 'export_airflow.pages.ui', 'export_airflow.pages.obligations_ui'); "
         "print(json.dumps([p for p in pages if p in sys.modules])); "
         "apps = m.get_fastapi_plugins()[0]; "
         "print(json.dumps([(a['name'], a['url_prefix'], type(a['app']).__name__) for a in apps]))")


def _airflow(*args: str, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*args], cwd=cwd, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=180, check=False)


def test_airflow_plugins_lists_each_of_ours_once_in_the_dev_setup():
    assert os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] == str(REPO / "plugins")  # as make run
    result = _airflow(str(Path(sys.executable).parent / "airflow"), "plugins", "-o", "json")
    assert result.returncode == 0, result.stderr[-3000:]
    listed = json.loads(result.stdout[result.stdout.index("[{"):])
    # Besides ours, only the OpenLineage provider's plugin (listed even while it is off).
    assert [(p["name"], p["source"]) for p in listed if p["name"] != PROVIDER_PLUGIN] == [
        (name, SOURCE.format(name=name, value=value)) for name, value in OURS.items()]
    assert [p["name"] for p in listed].count(PROVIDER_PLUGIN) == 1


def test_no_plugin_import_error_with_the_checkout_on_sys_path():
    """``python -m …`` from the root and pytest put the checkout first on ``sys.path``: a build's
    ``*.egg-info`` there would be a second copy of the distribution, its entry points loaded
    twice (setup.cfg's [egg_info] writes it to requirements/)."""
    result = _airflow(sys.executable, "-c", f"{IMPORT_ERRORS}; {PAGES}",
                      PYTHONPATH=f"{REPO}:{REPO}/plugins")
    assert result.returncode == 0, result.stderr[-3000:]
    errors, pages_imported, apps = (json.loads(line) for line in result.stdout.splitlines()[-3:])
    assert errors == {}
    # Loading the plugins (what the scheduler, workers, task processes and CLI commands do) left
    # FastAPI and the pages out; the api-server's read of ``fastapi_apps`` builds them.
    assert pages_imported == []
    assert apps == [["Export runs", "/exports", "FastAPI"]]
    assert sorted(p.name for p in REPO.glob("*.egg-info")) == []


def test_a_plugin_file_in_the_plugins_folder_is_refused_as_a_second_registration(tmp_path):
    """What the rule prevents: the pre-ADR-0026 plugin file, beside the entry points, wins (the
    folder loads first) and the entry point's plugin is refused with an import error."""
    (tmp_path / "export_plugin.py").write_text(
        "from export_airflow.plugin import ExportPlugin  # noqa: F401\n")
    result = _airflow(sys.executable, "-c", IMPORT_ERRORS,
                      AIRFLOW__CORE__PLUGINS_FOLDER=str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.splitlines()[-1]) == {
        SOURCE.format(name="export_plugin", value=OURS["export_plugin"]):
            "Plugin 'export_plugin' already registered, skipping"}
