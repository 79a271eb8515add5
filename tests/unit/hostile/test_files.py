"""What a config directory may hold besides regular files (issue 23): a broken symlink, a symlink
out of the directory, a FIFO, a directory named like a company file. Each is one error naming
the file, nothing outside the directory is read or shown, the other companies still load, and
``exportctl validate`` neither hangs nor prints a traceback."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from export_lib.config.loader import load_catalog
from tests.unit.hostile.test_configs import SHIPPED, validate
from tests.world import REPO

SECRET_KEY = "planted_secret_key_x9"
SECRET_VALUE = "hunter2-planted-value"


@pytest.fixture()
def config(tmp_path: Path) -> Path:
    target = tmp_path / "config"
    shutil.copytree(REPO / "dags" / "config", target)
    return target


@pytest.fixture()
def outside(tmp_path: Path) -> Path:
    """A YAML file outside the config directory whose keys and values must never be shown."""
    path = tmp_path / "elsewhere" / "secrets.yaml"
    path.parent.mkdir()
    path.write_text(f"{SECRET_KEY}: {SECRET_VALUE}\ncompany: {{id: {SECRET_VALUE}}}\n")
    return path


def only_error(config: Path, name: str) -> str:
    catalog = load_catalog(config)
    assert sorted(catalog.companies) == list(SHIPPED)  # the others still load
    (line,) = catalog.errors[str(config / name)]
    assert load_catalog(config, only=Path(name).stem).errors[str(config / name)] == (line,)
    return line


def test_a_broken_symlink_is_one_error(config: Path) -> None:
    (config / "ghost.yaml").symlink_to(config / "nowhere.yaml")
    assert only_error(config, "ghost.yaml") == (
        f"{config / 'ghost.yaml'}: (file): a symbolic link whose target does not exist (or "
        "loops); remove the link or restore the file it names")


def test_a_symlink_loop_is_one_error(config: Path) -> None:
    (config / "loop.yaml").symlink_to(config / "loop.yaml")
    assert "a symbolic link whose target does not exist (or loops)" in only_error(
        config, "loop.yaml")


def test_a_symlink_out_of_the_directory_is_refused_unread(config: Path, outside: Path) -> None:
    (config / "leak.yaml").symlink_to(outside)
    line = only_error(config, "leak.yaml")
    assert line == (f"{config / 'leak.yaml'}: (file): a symbolic link to a file outside {config}; "
                    "nothing of it was read. Copy the file into the config directory instead of "
                    "linking it")
    assert SECRET_KEY not in line and SECRET_VALUE not in line and str(outside) not in line


def test_a_symlinked_defaults_file_out_of_the_directory_is_refused(config: Path,
                                                                   outside: Path) -> None:
    (config / "defaults.yaml").unlink()
    (config / "defaults.yaml").symlink_to(outside)
    catalog = load_catalog(config)
    assert catalog.errors[str(config / "defaults.yaml")] == (
        f"{config / 'defaults.yaml'}: (file): a symbolic link to a file outside {config}; "
        "nothing of it was read. Copy the file into the config directory instead of linking it",)
    assert SECRET_KEY not in "\n".join(catalog.error_lines)


def test_a_symlink_inside_the_directory_is_followed_like_a_configmap(config: Path) -> None:
    """Kubernetes mounts a ConfigMap as ``acme.yaml -> ..data/acme.yaml``: that stays inside."""
    data = config / "..2026_12_02" / "acme.yaml"
    data.parent.mkdir()
    (config / "acme.yaml").rename(data)
    (config / "..data").symlink_to(data.parent.name)
    (config / "acme.yaml").symlink_to("..data/acme.yaml")
    catalog = load_catalog(config)
    assert catalog.ok and sorted(catalog.companies) == list(SHIPPED)


def test_a_fifo_is_one_error_and_never_blocks(config: Path) -> None:
    os.mkfifo(config / "pipe.yaml")
    assert only_error(config, "pipe.yaml") == (
        f"{config / 'pipe.yaml'}: (file): a named pipe (FIFO), not a regular file; nothing was "
        "read. A config file is a plain <company id>.yaml file; move this one elsewhere")


def test_a_directory_named_like_a_company_file_is_one_error(config: Path) -> None:
    (config / "folder.yaml").mkdir()
    assert only_error(config, "folder.yaml").startswith(
        f"{config / 'folder.yaml'}: (file): a directory, not a regular file; nothing was read")


def test_exportctl_validate_on_every_kind_at_once(config: Path, outside: Path) -> None:
    (config / "ghost.yaml").symlink_to(config / "nowhere.yaml")
    (config / "leak.yaml").symlink_to(outside)
    os.mkfifo(config / "pipe.yaml")
    (config / "unhashable.yaml").write_text("company: {id: unhashable}\n? [a, b]\n: x\n")
    result, seconds, rss = validate(config)
    assert result.returncode == 1 and "Traceback" not in result.stdout + result.stderr
    for name in ("ghost", "leak", "pipe", "unhashable"):
        assert result.stdout.count(f"{config / name}.yaml: ") == 1, result.stdout
    assert f"{config / 'unhashable.yaml'}: line 2 column 3: not valid YAML: the mapping key " \
           "['a', 'b'] is a list, not a name" in result.stdout
    assert SECRET_KEY not in result.stdout + result.stderr
    assert SECRET_VALUE not in result.stdout + result.stderr
    assert seconds < 5 and rss < 200, (seconds, rss)


def test_retention_and_the_gap_audit_go_on_for_the_other_companies(tmp_path: Path) -> None:
    """Both read every company file: a newcomer's unhashable key or broken link used to stop
    them for everyone (TypeError)."""
    from tests.world import build_world

    world = build_world(tmp_path / "world")
    (world.config / "unhashable.yaml").write_text("company: {id: unhashable}\n? [a, b]\n: x\n")
    (world.config / "ghost.yaml").symlink_to(world.config / "nowhere.yaml")
    retention = world.exportctl("retention", "--dry-run")
    assert (retention.returncode, "Traceback" in retention.stdout + retention.stderr) == (0, False)
    assert retention.stdout.startswith("0 artifact(s) would delete")
    audit = world.exportctl("audit", "--company", "acme", "--dry-run")
    assert (audit.returncode, "Traceback" in audit.stdout + audit.stderr) == (0, False)
    assert "note: acme/daily-spend: no effective_from and no run yet" in audit.stdout
    assert audit.stdout.rstrip().endswith("0 unrecoverable, 0 in flight)")
