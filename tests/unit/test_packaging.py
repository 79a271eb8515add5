"""What ``pip install .`` brings is what export_lib imports (issue 24 item 4): every third-party
module export_lib imports, at module level or inside a function, belongs to a distribution that
setup.cfg declares, in ``install_requires`` or, for one destination kind, in that kind's extra.
(httpx and numpy were missing, hidden by the lock's ``--no-deps`` install.)"""

from __future__ import annotations

import ast
import configparser
import functools
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@functools.cache
def packages_distributions() -> dict[str, list[str]]:
    return metadata.packages_distributions()  # scans every installed distribution: once


def _declared() -> dict[str, str]:
    """Normalised distribution name → where setup.cfg declares it ("install_requires" or
    "extra:<name>")."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    found = {}

    def names(text: str) -> list[str]:
        return [re.split(r"[<>=!~\[; ]", line.strip(), maxsplit=1)[0]
                for line in text.splitlines() if line.strip()]

    for name in names(cfg["options"]["install_requires"]):
        found[_norm(name)] = "install_requires"
    for extra, text in cfg["options.extras_require"].items():
        for name in names(text):
            found.setdefault(_norm(name), f"extra:{extra}")
    return found


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_modules(root: Path) -> dict[str, set[str]]:
    """Top-level module → the files under ``root`` that import it (absolute imports only)."""
    found: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                found.setdefault(top, set()).add(path.relative_to(root.parent).as_posix())
    return found


def third_party(modules: dict[str, set[str]]) -> dict[str, set[str]]:
    local = {"export_lib", "__future__"}
    return {m: files for m, files in modules.items()
            if m not in local and m not in sys.stdlib_module_names}


def undeclared(modules: dict[str, set[str]]) -> list[str]:
    dists = packages_distributions()
    declared = _declared()
    problems = []
    for module, files in sorted(third_party(modules).items()):
        owners = [_norm(d) for d in dists.get(module, [])]
        if not owners:
            problems.append(f"{module} (imported by {sorted(files)[0]}) is not installed")
        elif not any(o in declared for o in owners):
            problems.append(f"{module} (distribution {owners[0]}, imported by "
                            f"{sorted(files)[0]}) is not in setup.cfg")
    return problems


def test_every_module_export_lib_imports_is_declared_in_setup_cfg():
    assert undeclared(imported_modules(REPO / "export_lib")) == []


@pytest.mark.parametrize(("module", "where"), [
    ("httpx", "install_requires"), ("numpy", "install_requires"),
    ("boto3", "extra:s3"), ("google", "extra:gcs"), ("paramiko", "extra:sftp")])
def test_the_heavy_destinations_are_extras_and_the_core_is_required(module, where):
    dists = [_norm(d) for d in packages_distributions()[module]]
    assert where in {_declared().get(d) for d in dists}


def test_the_check_names_an_import_nobody_declared(tmp_path):
    """The check above can fail: a module importing an installed but undeclared distribution
    (Airflow's own pendulum) is named with its file."""
    (tmp_path / "export_lib").mkdir()
    (tmp_path / "export_lib" / "mod.py").write_text("def f():\n    import pendulum\n")
    modules = imported_modules(tmp_path / "export_lib")
    assert undeclared(modules) == [
        "pendulum (distribution pendulum, imported by export_lib/mod.py) is not in setup.cfg"]
