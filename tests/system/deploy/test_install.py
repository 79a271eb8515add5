"""The wheel and the image's install steps, for real (issue 24 item 4, ADR 0026).

The module builds the wheel from a copy of the checkout's files (what a fresh clone has) with
``scripts/install.sh wheel`` and installs it into a fresh venv with ``scripts/install.sh lock
requirements.txt <wheel>``: the two RUN steps of the Dockerfile, in a plain ``python -m venv``
as the stock image's Python has pip. There is no Docker engine here; the rest of the Dockerfile
only copies files (its RUN lines are checked in tests/unit/test_foundation.py).

The lock is the runtime lock (requirements.txt), never the dev lock: no test tool, no uv, no
Google provider is in that venv. Then, in that venv only (no checkout on ``sys.path``, an empty
plugins folder, no ``airflow_local_settings.py``): ``pip install`` of the wheel over the lock
would add nothing else; both packages import; ``airflow plugins`` lists each of our plugins
once, from the entry points; Airflow loads the cluster policy from the ``airflow.policy`` entry
point; a DAG folder holding only the loaders and the company files parses; ``exportctl``
migrates a ledger with the shipped migrations and runs one export end to end. Airflow runs in
subprocesses only (the worker running this module never loads it).

Cost (2 cores, warm uv cache): ~43 s of CPU for the module (the runtime lock synced from the
cache, a pip dry run, three Airflow processes, one DAG folder parse, one export), 191 s wall
measured on a machine shared at a load of ~13 (81 s wall and ~44 CPU-s for the module before the
policy and export checks, alone); a cold cache downloads the lock once.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from export_lib.checksums import sha256_file
from export_lib.ledger.migrations import VERSION_TABLE
from tests.support.locks import norm, pins
from tests.world import DAILY, REPO

WHEEL = "airflow_scheduled_exports-0.1.0-py3-none-any.whl"
DISTRIBUTION = "airflow-scheduled-exports==0.1.0"
ENTRY_POINTS = {
    "export_plugin": "export_airflow.plugin:ExportPlugin",
    "export_ui": "export_airflow.ui_plugin:ExportUiPlugin",
}
OTHER_ENTRY_POINTS = {
    "airflow.policy": {"exports": "export_airflow.deploy.policy"},
    "apache_airflow_provider": {"provider_info": "export_airflow.provider:get_provider_info"},
    "console_scripts": {"exportctl": "export_lib.cli.main:main"},
    "export_lib.formats": {"csv": "export_lib.render.formats.csv_writer:CsvFormat",
                           "jsonl": "export_lib.render.formats.jsonl_writer:JsonLinesFormat",
                           "parquet": "export_lib.render.formats.parquet_writer:ParquetFormat"},
}


def _machine_env(path: str, **extra: str) -> dict[str, str]:
    """The machine's environment (its package index and TLS settings) without what points at
    this checkout or the session's Airflow: no PYTHONPATH, no venv, no AIRFLOW_*/EXPORT_*."""
    kept = {k: v for k, v in os.environ.items()
            if not k.startswith(("AIRFLOW", "EXPORT_", "PYTHON", "VIRTUAL_ENV", "PATH"))}
    return {**kept, "PATH": f"{path}:/usr/bin:/bin", **extra}


@dataclass(frozen=True)
class Installed:
    wheel: Path
    python: Path
    root: Path  # tmp: dags/ (loaders + config), plugins/ (empty), home/, work/

    def env(self, **extra: str) -> dict[str, str]:
        """Only what a deployment sets: no PYTHONPATH, no checkout anywhere."""
        return _machine_env(
            str(self.python.parent), AIRFLOW_HOME=str(self.root / "home"),
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            AIRFLOW__CORE__DAGS_FOLDER=str(self.root / "dags"),
            AIRFLOW__CORE__PLUGINS_FOLDER=str(self.root / "plugins"),
            EXPORT_HOME=str(self.root / "home"), **extra)

    def run(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), cwd=self.root / "work", env=self.env(**extra),
                              capture_output=True, text=True, timeout=300, check=False)


def _checkout_copy(target: Path) -> None:
    """The files a clone of this checkout has (tracked and new, not ignored)."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, names):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def _share_compiled_bytecode(venv: Path) -> None:
    """Hard-link the running venv's compiled bytecode into ``venv``'s site-packages (where the
    same directory exists), so the module's Airflow processes do not first compile Airflow
    (the `airflow plugins` test: 10.2 → 6.3 CPU-s, 4 Dec). Bytecode is a cache: Python uses a
    ``.pyc`` only when the mtime and size it records match its source's (uv installs both
    venvs' files as hard links of one cache entry, so an unchanged package matches) and
    otherwise compiles the source and replaces the link, never the file it linked to. What this
    module checks, the install, is the same either way."""
    here = Path(sysconfig.get_paths()["purelib"])
    there = venv / "lib" / here.parent.name / "site-packages"
    for cache in here.rglob("__pycache__"):
        target = there / cache.relative_to(here)
        if not target.parent.is_dir() or target.exists():
            continue
        target.mkdir()
        for pyc in cache.glob("*.pyc"):
            os.link(pyc, target / pyc.name)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    root = tmp_path_factory.mktemp("install")
    src, dist, venv = root / "src", root / "dist", root / "venv"
    _checkout_copy(src)
    # The Dockerfile's wheel stage (this venv already has the lock's uv: nothing to fetch).
    subprocess.run(["bash", str(src / "scripts" / "install.sh"), "wheel", str(src), str(dist)],
                   env=_machine_env("/usr/bin", PYTHON=sys.executable), check=True,
                   timeout=300)
    # Its runtime stage, in a fresh venv with pip (as the stock image's Python): the script
    # installs the lock's uv with that pip, syncs the lock, adds the wheel, checks.
    subprocess.run(["python3.11", "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    env = _machine_env(str(venv / "bin"), PYTHON=str(python))

    def install(*wheel: str) -> None:
        result = subprocess.run(["bash", str(src / "scripts" / "install.sh"), "lock",
                                 str(src / "requirements.txt"), *wheel], env=env,
                                capture_output=True, text=True, timeout=600, check=False)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
        assert "All installed packages are compatible" in result.stdout + result.stderr

    install()  # the lock alone first: what pip would do with the wheel over it, then the wheel
    subprocess.run([str(python), "-m", "pip", "install", "--dry-run", "--quiet",
                    "--disable-pip-version-check", "--report", str(root / "pip-report.json"),
                    str(dist / WHEEL)], env=env, check=True, timeout=300)
    install(str(dist / WHEEL))
    _share_compiled_bytecode(venv)
    shutil.copytree(REPO / "dags", root / "dags",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("plugins", "home", "work"):
        (root / name).mkdir()
    yield Installed(wheel=dist / WHEEL, python=python, root=root)
    # The venv is ~70,000 files (1.9 GB): left in pytest's temporary directory, a later session
    # deleted it while rotating old directories out, ~7 s on the controller after the last
    # test (py-spy, 4 Dec), and three kept sessions held 5.7 GB of /tmp. Deleted here, on the
    # worker, while the others still run.
    shutil.rmtree(venv, ignore_errors=True)


def test_the_wheel_holds_both_packages_the_migrations_and_the_plugin_entry_points(installed):
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
        entry_points = wheel.read("airflow_scheduled_exports-0.1.0.dist-info/entry_points.txt")
    assert {"export_lib/__init__.py", "export_airflow/__init__.py", "export_airflow/plugin.py",
            "export_airflow/ui_plugin.py", "export_airflow/building/dag_factory.py",
            "export_lib/ledger/migrations/script.py.mako"} <= names
    # every module of the Airflow edge, its subpackages' too (setup.cfg lists them from plugins/)
    edge = REPO / "plugins" / "export_airflow"
    assert {f"export_airflow/{p.relative_to(edge).as_posix()}" for p in edge.rglob("*.py")} \
        - names == set()
    # the pages' templates (package_data: templates/ is not a package)
    templates = edge / "pages" / "templates"
    assert {f"export_airflow/pages/templates/{p.name}" for p in templates.iterdir()} \
        - names == set()
    shipped = {n.rsplit("/", 1)[1] for n in names
               if n.startswith("export_lib/ledger/migrations/versions/")}
    assert shipped == {p.name for p in
                       (REPO / "export_lib/ledger/migrations/versions").glob("*.py")}
    assert not [n for n in names if n.startswith(("tests/", "dags/", "plugins/", "scripts/"))]
    groups = configparser.ConfigParser(delimiters=("=",))
    groups.optionxform = str  # entry point names keep their case
    groups.read_string(entry_points.decode())
    assert {group: dict(groups[group]) for group in groups.sections()} == {
        "airflow.plugins": ENTRY_POINTS, **OTHER_ENTRY_POINTS}


def test_the_environment_is_exactly_the_runtime_lock_and_the_wheel(installed):
    """Every distribution is the runtime lock's version or the wheel; only the venv's own pip
    (which uv pip sync leaves alone) is not pinned. No test tool, no installer."""
    listed = installed.run(str(installed.python), "-c",
                           "import json, importlib.metadata as m; print(json.dumps("
                           "[[d.metadata['Name'], d.version] for d in m.distributions()]))")
    found = {norm(name): version for name, version in json.loads(listed.stdout)}
    runtime = pins(REPO / "requirements.txt")
    assert set(found) - set(runtime) == {"airflow-scheduled-exports", "pip"}
    assert {name: found.get(name) for name in runtime} == runtime
    assert found["airflow-scheduled-exports"] == "0.1.0"
    assert {"pytest", "moto", "ruff", "selenium", "uv", "ray",
            "apache-airflow-providers-google"} & set(found) == set()
    assert not (installed.python.parent / "uv").exists()


def test_pip_install_of_the_wheel_over_the_lock_would_install_nothing_else(installed):
    """``pip install dist/*.whl`` with dependency resolution on, in the lock's environment (a
    dry run before the fixture installs it): every requirement the wheel declares is met by the
    lock, nothing up- or downgraded or added."""
    report = json.loads((installed.root / "pip-report.json").read_text())
    assert [(i["metadata"]["name"], i["metadata"]["version"]) for i in report["install"]] == [
        ("airflow-scheduled-exports", "0.1.0")]


def test_both_packages_import_from_the_installed_wheel(installed):
    result = installed.run(str(installed.python), "-c",
                           "import export_lib, export_airflow; "
                           "print(export_lib.__file__); print(export_airflow.__file__)")
    assert result.returncode == 0, result.stderr[-3000:]
    site = installed.python.parent.parent / "lib" / "python3.11" / "site-packages"
    assert result.stdout.split() == [str(site / "export_lib" / "__init__.py"),
                                     str(site / "export_airflow" / "__init__.py")]


def test_airflow_plugins_lists_each_of_ours_once_from_the_entry_points(installed):
    result = installed.run(str(installed.python.parent / "airflow"), "plugins", "-o", "json")
    assert result.returncode == 0, result.stderr[-3000:]
    # The CLI may print log lines before the JSON (airflow-3.3-notes.md).
    listed = json.loads(result.stdout[result.stdout.index("[{"):])
    # Besides ours, only the OpenLineage provider's plugin (listed even while it is off).
    assert sorted(p["name"] for p in listed if p["name"] not in ENTRY_POINTS) == [
        "OpenLineageProviderPlugin"]
    listed = [p for p in listed if p["name"] != "OpenLineageProviderPlugin"]
    assert [(p["name"], p["source"]) for p in listed] == [
        (name, f"{DISTRIBUTION}: EntryPoint(name='{name}', value='{target}', "
               "group='airflow.plugins')") for name, target in ENTRY_POINTS.items()]
    (export_plugin, export_ui) = listed
    assert export_plugin["timetables"] == ["export_airflow.timetable.ExportTimetable"]
    assert [v["href"] for v in export_ui["external_views"]] == [
        "/exports/obligations", "/exports/", "/exports/companies",
        "/exports/companies/for-dag/{DAG_ID}", "/exports/companies/for-dag/{DAG_ID}"]
    errors = installed.run(str(installed.python), "-c",
                           "import json; from airflow import plugins_manager as m; "
                           "print(json.dumps(m.get_import_errors()))")
    assert errors.returncode == 0, errors.stderr[-3000:]
    assert json.loads(errors.stdout.splitlines()[-1]) == {}


def test_a_dag_folder_of_loaders_and_company_files_parses(installed):
    """The DAG factory comes from the wheel: the folder holds only dags/ (loaders, config)."""
    code = ("import json, sys; from airflow.dag_processing.dagbag import DagBag; "
            "bag = DagBag(dag_folder=sys.argv[1]); "
            "print(json.dumps({'dags': sorted(bag.dags), 'errors': bag.import_errors}))")
    result = installed.run(str(installed.python), "-c", code, str(installed.root / "dags"))
    assert result.returncode == 0, result.stderr[-3000:]
    parsed = json.loads(result.stdout.splitlines()[-1])
    assert parsed["errors"] == {}
    assert {"widget_export__acme__daily-spend", "manual_export__acme", "demo_feed",
            "export_retention", "export_gap_audit"} <= set(parsed["dags"])


def _migration_head() -> str:
    revisions, parents = set(), set()
    for path in (REPO / "export_lib/ledger/migrations/versions").glob("*.py"):
        text = path.read_text()
        revisions.add(re.search(r'^revision = "([^"]+)"', text, re.M).group(1))
        parent = re.search(r'^down_revision = "([^"]+)"', text, re.M)
        if parent:
            parents.add(parent.group(1))
    (head,) = revisions - parents
    return head


def test_exportctl_migrates_a_ledger_with_the_shipped_migrations(installed):
    ledger = installed.root / "home" / "ledger-upgrade.db"
    result = installed.run(str(installed.python.parent / "exportctl"), "ledger", "upgrade",
                           EXPORT_LEDGER_URL=f"sqlite:///{ledger}")
    assert result.returncode == 0, result.stderr[-3000:]
    with sqlite3.connect(ledger) as db:
        assert db.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchall() == [
            (_migration_head(),)]


def test_airflow_loads_the_cluster_policy_from_the_entry_point(installed):
    """No airflow_local_settings.py anywhere: the policy's hooks are registered from the wheel's
    ``airflow.policy`` entry point, and the scheduler will call the mutation hook."""
    code = ("import json, sys; from airflow import settings; "
            "pm = settings.get_policy_plugin_manager(); hooks = pm.hook; print(json.dumps({"
            "'task_policy': [i.plugin_name for i in hooks.task_policy.get_hookimpls()], "
            "'mutation': [i.plugin_name for i in "
            "hooks.task_instance_mutation_hook.get_hookimpls()], "
            "'is_noop': settings.task_instance_mutation_hook.is_noop, "
            "'local_settings': 'airflow_local_settings' in sys.modules}))")
    result = installed.run(str(installed.python), "-c", code)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "task_policy": ["exports"], "mutation": ["exports"], "is_noop": False,
        "local_settings": False}


def test_exportctl_runs_one_export_end_to_end(installed):
    """The installed ``exportctl`` alone: a ledger, the demo source and one export of the shipped
    DAG folder's config, its artifact on disk with the sha256 the ledger recorded."""
    config = str(installed.root / "dags" / "config")
    home = installed.root / "home"
    for args in (("ledger", "upgrade"), ("demo", "seed", "--config", config)):
        result = installed.run(str(installed.python.parent / "exportctl"), *args)
        assert result.returncode == 0, result.stderr[-3000:]
    yesterday = datetime.now(UTC).date() - timedelta(days=1)
    slot = datetime.combine(yesterday, time(7), ZoneInfo("Europe/Berlin")).astimezone(UTC)
    result = installed.run(str(installed.python.parent / "exportctl"), "run", config,
                           "--schedule", DAILY, "--slot", slot.isoformat(), "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout)
    assert (out["state"], out["artifact"]["rows"]) == ("ready", 72)
    artifact = Path(out["artifact"]["uri"].removeprefix("file://"))
    assert artifact.parent == home / "exports" / "artifacts" / "acme" / "daily-spend"
    assert sha256_file(artifact) == out["artifact"]["sha256"]
