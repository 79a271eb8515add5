"""The tiers keep their promises: unit and integration tests never load Airflow (that is what
tests/dags is for), no test module loads it when collected (tests/dags's load it in their
tests, so only the workers that run them pay for it: tests/support/workload.py), every test
lives in a tier folder, and a unit test that asks for a server is refused at collection."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@functools.cache
def _airflow_modules_loaded_by_tier() -> dict[str, list[str]]:
    """Import every test module of tests/unit, then of tests/integration, then of tests/dags
    (as pytest's collection would, conftests first) in one fresh interpreter, and return for
    each tier the Airflow modules its own imports loaded (one interpreter for the three: each
    costs ~2 CPU-s to start and import the shared libraries); then, as ``canary``, what a
    module importing ``airflow.secrets`` at its top loads (the check can see it)."""
    script = ["import sys, importlib",
              "def loaded(): return {m for m in sys.modules "
              "if m.split('.')[0] in ('airflow', 'export_airflow')}",
              "importlib.import_module('tests.conftest')", "before, out = loaded(), {}"]
    for tier in ("unit", "integration", "dags"):
        files = sorted((REPO / "tests" / tier).rglob("*.py"))
        modules = [p.relative_to(REPO).with_suffix("").as_posix().replace("/", ".")
                   .removesuffix(".__init__") for p in files]
        script += [f"for m in {modules!r}: importlib.import_module(m)",
                   f"out[{tier!r}] = sorted(loaded() - before)", "before = loaded()"]
    script += ["import airflow.secrets", "out['canary'] = sorted(loaded() - before)",
               "import json; print(json.dumps(out))"]
    out = subprocess.run([sys.executable, "-c", "\n".join(script)], cwd=REPO,
                         capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": f"{REPO}:{REPO / 'plugins'}",
                              "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("tier", ["unit", "integration", "dags"])
def test_collecting_a_tier_never_loads_airflow(tier: str):
    """Every worker collects every test module: one Airflow import at the top of a tests/dags
    module (~1.7 CPU-s) was paid by the workers that never run one too. Import Airflow inside
    the test (or from a tests/support module the test loads). tests/dags may load our plugin's
    light modules (export_airflow.deploy.preload imports the standard library only)."""
    loaded = _airflow_modules_loaded_by_tier()[tier]
    if tier == "dags":
        loaded = [m for m in loaded if m.split(".")[0] == "airflow"]
    assert loaded == []


def test_the_check_sees_airflow_where_it_is_loaded():
    """The check above can fail: a module importing Airflow at its top is seen."""
    assert "airflow" in _airflow_modules_loaded_by_tier()["canary"]


def _collect(tmp_path: Path, relative: str, body: str) -> subprocess.CompletedProcess[str]:
    """``pytest --collect-only`` on a copy of the root conftest with one test file."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text(
        (REPO / "tests" / "conftest.py").read_text())
    path = tmp_path / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(body))
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", "-c", str(REPO / "setup.cfg"),
                           "--rootdir", str(tmp_path), relative],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"})


def test_a_test_outside_the_tier_folders_is_refused(tmp_path: Path):
    result = _collect(tmp_path, "tests/loose/test_x.py", "def test_x():\n    pass\n")
    assert result.returncode != 0
    assert "tests/loose/test_x.py::test_x: every test lives in a tier folder, " \
           "tests/{unit,integration,dags,system}/; move it into one" in result.stdout + result.stderr


def test_a_unit_test_asking_for_a_server_is_refused(tmp_path: Path):
    result = _collect(tmp_path, "tests/unit/test_x.py",
                      "def test_x(postgres_server):\n    pass\n")
    assert result.returncode != 0
    assert "tests/unit/test_x.py::test_x uses postgres_server: a test that needs a server " \
           "belongs in tests/integration" in result.stdout + result.stderr


def test_the_folder_gives_the_marker(tmp_path: Path):
    result = _collect(tmp_path, "tests/system/soak/test_x.py", "def test_x():\n    pass\n")
    assert result.returncode == 0, result.stdout + result.stderr
    again = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m",
                            "system and soak", "-p", "no:cacheprovider", "-c",
                            str(REPO / "setup.cfg"), "--rootdir", str(tmp_path),
                            "tests/system/soak/test_x.py"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120,
                           env={"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"})
    assert "1 test collected" in again.stdout, again.stdout + again.stderr
