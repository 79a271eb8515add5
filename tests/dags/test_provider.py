"""The package as Airflow sees it through its entry points (dev venv, editable install):

- ``apache_airflow_provider``: ``get_provider_info()`` passes Airflow's own provider schema;
  ``airflow providers list`` lists the package and ``airflow config list --section exports``
  shows our settings; airflow.cfg ``[exports]`` reaches export_lib's settings through the edge;
- ``airflow.policy``: Airflow's policy plugin manager holds our hooks with no
  ``airflow_local_settings.py``, the scheduler's mutation hook is switched on, and an old copy of
  that file beside the entry point does not apply the policy twice.

Airflow runs in subprocesses (~2 CPU-s each), with an AIRFLOW_HOME of their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from export_lib import settings

BIN = Path(sys.executable).parent


def _run(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("AIRFLOW__EXPORTS__", "EXPORT_"))}
    result = subprocess.run(list(args), cwd=home, capture_output=True, text=True, timeout=180,
                            check=False, env={**environ, "AIRFLOW_HOME": str(home),
                                              "AIRFLOW__CORE__LOAD_EXAMPLES": "False", **env})
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _schema() -> dict:
    return json.loads(resources.files("airflow").joinpath("provider_info.schema.json")
                      .read_text())


def test_the_provider_info_passes_airflows_schema_and_lists_every_setting():
    from export_airflow.provider import get_provider_info

    info = get_provider_info()
    jsonschema.validate(info, _schema())
    assert (info["package-name"], info["versions"]) == ("airflow-scheduled-exports", ["0.1.0"])
    assert info["notifications"] == ["export_airflow.alerts.ExportAlertNotifier"]
    options = info["config"]["exports"]["options"]
    expected = {settings.exports_option(v.name) for v in settings.VARIABLES} - {None} | {
        f"timeout_{kind}" for kind in settings.TASK_TIMEOUTS}
    assert set(options) == expected
    assert {name: options[name]["type"] for name in (
        "retries", "retry_delay_seconds", "ui_allow_unscoped_auth", "ledger_url")} == {
        "retries": "integer", "retry_delay_seconds": "float",
        "ui_allow_unscoped_auth": "boolean", "ledger_url": "string"}
    assert options["retries"]["example"] == "11"
    assert [name for name, option in options.items() if option.get("sensitive")] == []
    assert {o["default"] for o in options.values()} == {None}  # export_lib's defaults apply
    # the schema is a real check: a type Airflow does not know is refused
    options["retries"]["type"] = "int"
    with pytest.raises(jsonschema.ValidationError, match=r"'int' is not one of"):
        jsonschema.validate(info, _schema())


def test_airflow_lists_the_provider_and_the_exports_section(tmp_path):
    listed = _run(tmp_path, str(BIN / "airflow"), "providers", "list", "-o", "json").stdout
    providers = json.loads(listed[listed.index("[{"):])
    assert [p["version"] for p in providers
            if p["package_name"] == "airflow-scheduled-exports"] == ["0.1.0"]
    section = _run(tmp_path, str(BIN / "airflow"), "config", "list", "--section", "exports",
                   "--show-values", AIRFLOW__EXPORTS__RETRIES="3").stdout
    assert "[exports]" in section
    assert "retries = 3" in section.splitlines()
    assert "# ledger_url = " in section.splitlines()


def test_airflow_cfg_reaches_the_settings_through_the_edge(tmp_path):
    (tmp_path / "airflow.cfg").write_text("[exports]\nretries = 4\nrender_budget = 6\n"
                                          "ui_token_minutes = 7\n")
    # an Airflow process: Airflow loaded first (a process that has not loaded it reads only the
    # environment, export_airflow never imports Airflow for a setting)
    code = ("import json, sys, export_airflow; from export_lib import settings; "
            "before = settings.task_retries(); import airflow; "
            "print(json.dumps([before, settings.task_retries(), settings.render_budget()[0], "
            "settings.ui_token_ttl().total_seconds(), 'airflow.sdk' in sys.modules]))")
    result = _run(tmp_path, sys.executable, "-c", code, AIRFLOW__EXPORTS__RENDER_BUDGET="5",
                  EXPORT_UI_TOKEN_MINUTES="9")
    # airflow.cfg's retries; the environment wins over airflow.cfg, EXPORT_ over both
    assert json.loads(result.stdout.splitlines()[-1]) == [settings.TASK_RETRIES, 4, 5, 540.0,
                                                          True]


POLICY = """
import json, sys
from types import SimpleNamespace
from airflow import settings
pm = settings.get_policy_plugin_manager()
ti = SimpleNamespace(dag_id="widget_export__acme__daily", task_id="render", priority_weight=1,
                     pool="export_render", pool_slots=1, state=None)
settings.task_instance_mutation_hook(ti, SimpleNamespace(run_type="backfill"))
print(json.dumps({
    "mutation": sorted(i.plugin_name for i in pm.hook.task_instance_mutation_hook.get_hookimpls()),
    "is_noop": settings.task_instance_mutation_hook.is_noop,
    "local_settings": "airflow_local_settings" in sys.modules,
    "ti": [ti.priority_weight, ti.pool]}))
"""


def test_the_policy_comes_from_the_entry_point_once_even_beside_an_old_local_settings(tmp_path):
    alone = _run(tmp_path, sys.executable, "-c", POLICY)
    assert json.loads(alone.stdout.splitlines()[-1]) == {
        "mutation": ["exports"], "is_noop": False, "local_settings": False,
        "ti": [-99, "export_catchup"]}
    # A copy of deploy/airflow_local_settings.py as `make setup` and the image wrote it before:
    # Airflow registers its hooks too; the entry point's stand aside (priority lowered once).
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "airflow_local_settings.py").write_text(
        "from export_airflow.cluster_policy import task_instance_mutation_hook, task_policy\n"
        "from export_airflow.preload import install\ninstall()\n")
    beside = _run(tmp_path, sys.executable, "-c", POLICY)
    assert json.loads(beside.stdout.splitlines()[-1]) == {
        "mutation": ["AirflowLocalSettingsPolicy", "exports"], "is_noop": False,
        "local_settings": True, "ti": [-99, "export_catchup"]}
