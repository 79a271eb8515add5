"""What ``pip install .`` brings is what export_lib and export_airflow import (issue 24 item 4):
every third-party module they import, at module level or inside a function, belongs to a
distribution that setup.cfg declares, in ``install_requires`` or, for one destination kind, in
that kind's extra. (httpx and numpy were missing, hidden by the lock's ``--no-deps`` install.)
Airflow itself is declared as the minor release we test (a range, ADR 0026) and each provider
our code imports by its own distribution; every declared distribution is pinned by the lock."""

from __future__ import annotations

import ast
import configparser
import functools
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tests.support.locks import RUNTIME, pins

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
    """Imported module (dotted, as written) → the files under ``root`` that import it (absolute
    imports only)."""
    found: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name, set()).add(path.relative_to(root.parent).as_posix())
    return found


def third_party(modules: dict[str, set[str]]) -> dict[str, set[str]]:
    local = {"export_lib", "export_airflow", "__future__"}
    return {m: files for m, files in modules.items()
            if m.split(".")[0] not in local and m.split(".")[0] not in sys.stdlib_module_names}


def owners(module: str) -> list[str]:
    """The distributions a module comes from. ``airflow`` is shared by Airflow core, the Task SDK
    and every provider: ``airflow.providers.<a>.<b>…`` belongs to the installed provider
    distribution with the longest matching name (``common.sql`` → ``apache-airflow-providers-
    common-sql``), anything else under ``airflow`` to ``apache-airflow`` (core and Task SDK are
    its exact-pinned dependencies)."""
    parts = module.split(".")
    if parts[0] != "airflow":
        return [_norm(d) for d in packages_distributions().get(parts[0], [])]
    if parts[1:2] != ["providers"]:
        return ["apache-airflow"]
    for end in range(len(parts), 2, -1):
        name = "apache-airflow-providers-" + "-".join(parts[2:end])
        if _installed(name):
            return [name]
    return []


@functools.cache
def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def undeclared(modules: dict[str, set[str]]) -> list[str]:
    declared = _declared()
    problems = []
    for module, files in sorted(third_party(modules).items()):
        found = owners(module)
        if not found:
            problems.append(f"{module} (imported by {sorted(files)[0]}) is not installed")
        elif not any(o in declared for o in found):
            problems.append(f"{module} (distribution {found[0]}, imported by "
                            f"{sorted(files)[0]}) is not in setup.cfg")
    return problems


def test_every_module_export_lib_imports_is_declared_in_setup_cfg():
    assert undeclared(imported_modules(REPO / "export_lib")) == []


def test_every_module_export_airflow_imports_is_declared_in_setup_cfg():
    """The plugin package too: Airflow by its meta-distribution, each provider by its own."""
    modules = imported_modules(REPO / "plugins" / "export_airflow")
    assert undeclared(modules) == []
    assert {o for m in third_party(modules) for o in owners(m)} >= {
        "apache-airflow", "apache-airflow-providers-postgres", "apache-airflow-providers-fab",
        "apache-airflow-providers-amazon"}


def _requirements() -> dict[str, str]:
    """Normalised name → the requirement line as setup.cfg writes it (install_requires)."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    lines = [line.strip() for line in cfg["options"]["install_requires"].splitlines()]
    return {_norm(re.split(r"[<>=!~\[; ]", line, maxsplit=1)[0]): line
            for line in lines if line and not line.startswith("#")}


def _lock() -> dict[str, str]:
    return pins(RUNTIME)


def test_airflow_is_required_as_the_tested_minor_release_not_an_exact_pin():
    """A wheel installed into an Airflow 3.3 deployment keeps that deployment's Airflow (an exact
    pin would make pip replace it); the lock pins the version we test, inside the range."""
    from packaging.requirements import Requirement

    requirement = Requirement(_requirements()["apache-airflow"])
    assert str(requirement.specifier) == "<3.4,>=3.3.2"
    assert _lock()["apache-airflow"] in requirement.specifier
    assert "3.4.0" not in requirement.specifier


def test_every_declared_distribution_is_pinned_by_the_lock():
    """Installing the wheel with the lock (``--no-deps``, then a check) needs every distribution
    setup.cfg declares, extras included, to be in requirements.txt."""
    assert sorted(set(_declared()) - set(_lock())) == []


@pytest.mark.parametrize(("module", "where"), [
    ("httpx", "install_requires"), ("numpy", "install_requires"),
    ("boto3", "extra:s3"), ("google", "extra:gcs"), ("paramiko", "extra:sftp")])
def test_the_heavy_destinations_are_extras_and_the_core_is_required(module, where):
    assert where in {_declared().get(d) for d in owners(module)}


@pytest.mark.parametrize(("module", "where"), [
    ("airflow.sdk", "install_requires"),
    ("airflow.providers.postgres.hooks.postgres", "install_requires"),
    ("airflow.providers.amazon.aws.hooks.s3", "extra:s3"),
    ("airflow.providers.sftp.hooks.sftp", "extra:sftp"),
    ("kubernetes.client", "extra:kubernetes")])
def test_the_airflow_edge_needs_its_providers_and_the_heavy_ones_are_extras(module, where):
    assert {_declared().get(d) for d in owners(module)} == {where}


def test_the_check_names_an_import_nobody_declared(tmp_path):
    """The check above can fail: a module importing an installed but undeclared distribution
    (Airflow's own rich) is named with its file."""
    (tmp_path / "export_lib").mkdir()
    (tmp_path / "export_lib" / "mod.py").write_text("def f():\n    import rich\n")
    modules = imported_modules(tmp_path / "export_lib")
    assert undeclared(modules) == [
        "rich (distribution rich, imported by export_lib/mod.py) is not in setup.cfg"]


def test_the_check_names_a_provider_nobody_declared(tmp_path):
    """A provider counts on its own: ``airflow`` being declared does not cover the SSH provider
    (installed by the lock, declared nowhere)."""
    (tmp_path / "export_airflow").mkdir()
    (tmp_path / "export_airflow" / "mod.py").write_text(
        "from airflow.sdk import DAG\nfrom airflow.providers.ssh.hooks.ssh import SSHHook\n")
    modules = imported_modules(tmp_path / "export_airflow")
    assert undeclared(modules) == [
        "airflow.providers.ssh.hooks.ssh (distribution apache-airflow-providers-ssh, imported by "
        "export_airflow/mod.py) is not in setup.cfg"]
