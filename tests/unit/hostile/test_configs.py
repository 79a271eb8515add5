"""The hostile config corpus (``tests/data/hostile/configs``): every file is one short error naming
file and field, from the library, from ``exportctl validate`` (no traceback, < 5 s, < 200 MB
RSS) and, in ``test_dag_loaders.py``, as the import error of that company's DAG file."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from export_lib.config.limits import LINE_CHARS, MAX_FILE_BYTES
from export_lib.config.loader import load_catalog
from tests.world import REPO, clean_env

HERE = Path(__file__).resolve().parents[2] / "data" / "hostile"
CORPUS = sorted((HERE / "configs").glob("*.yaml"))
SHIPPED = ("acme", "dentsu-happiness", "kiwi-outdoors")
HEAVY = ("alias-bomb", "deep-nesting", "recursive-alias", "long-name")


def expected(path: Path) -> str:
    return re.search(r"^# expect: (.*)$", path.read_text(), re.M)[1]


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped config directory plus every hostile company file."""
    target = tmp_path_factory.mktemp("hostile") / "config"
    shutil.copytree(REPO / "dags" / "config", target)
    for path in CORPUS:
        shutil.copy(path, target / path.name)
    return target


@pytest.fixture(scope="module")
def corpus_catalog(corpus_dir: Path):
    return load_catalog(corpus_dir)


# ``python -m export_lib validate DIR`` that reports its own peak RSS since exec (VmHWM) and its
# own CPU seconds on its last stderr line: a child's ru_maxrss would include the test process it
# was forked from, and wall seconds would measure the machine's load (the suite runs Airflow
# stacks beside this test), not the validation.
_MEASURED = ("import atexit, os, runpy, sys\n"
             "def peak():\n"
             "    hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
             "    t = os.times()\n"
             "    sys.stderr.write('\\n' + hwm.strip() + ' cpu %.3f' % (t.user + t.system))\n"
             "atexit.register(peak)\n"
             "sys.argv = ['exportctl', 'validate', sys.argv[1]]\n"
             "runpy.run_module('export_lib', run_name='__main__')\n")


def validate(config_dir: Path) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """``exportctl validate`` as a user runs it: result, its CPU seconds and peak RSS in MB."""
    result = subprocess.run([sys.executable, "-c", _MEASURED, str(config_dir)],
                            capture_output=True, text=True, env=clean_env(), timeout=120,
                            check=False)
    stderr, _, last = result.stderr.rstrip("\n").rpartition("\n")
    assert last.startswith("VmHWM:"), result.stderr[-500:]
    result.stderr = stderr
    fields = last.split()
    return result, float(fields[-1]), int(fields[1]) / 1024


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_each_hostile_file_is_one_error_naming_file_and_field(corpus_dir: Path, corpus_catalog,
                                                              path: Path):
    catalog = corpus_catalog
    lines = catalog.errors[str(corpus_dir / path.name)]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{corpus_dir / path.name}: {expected(path)}")
    assert len(lines[0]) <= LINE_CHARS + 40
    assert path.stem not in catalog.companies  # nothing of it is registered


def test_the_shipped_companies_load_next_to_the_whole_corpus(corpus_catalog):
    assert sorted(corpus_catalog.companies) == list(SHIPPED)
    assert len(corpus_catalog.schedules) == 10
    assert sorted(Path(p).stem for p in corpus_catalog.errors) == sorted(p.stem for p in CORPUS)


def test_exportctl_validate_on_the_whole_corpus_is_short_fast_and_small(corpus_dir: Path):
    result, seconds, rss = validate(corpus_dir)
    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    for path in CORPUS:
        assert f"{corpus_dir / path.name}: {expected(path)}" in result.stdout
    assert len(result.stdout) < 300 * len(CORPUS) + 2000
    assert seconds < 5 and rss < 200, (seconds, rss)


@pytest.mark.parametrize("stem", HEAVY)
def test_exportctl_validate_on_one_heavy_file(tmp_path: Path, stem: str):
    config = tmp_path / "config"
    config.mkdir()
    shutil.copy(REPO / "dags" / "config" / "defaults.yaml", config)
    shutil.copy(HERE / "configs" / f"{stem}.yaml", config)
    result, seconds, rss = validate(config)
    assert (result.returncode, "Traceback" in result.stdout + result.stderr) == (1, False)
    assert f"{config / stem}.yaml: {expected(HERE / 'configs' / f'{stem}.yaml')}" in result.stdout
    assert len(result.stdout) < 1000
    assert seconds < 5 and rss < 200, (seconds, rss)


def test_an_oversized_file_is_refused_unread(tmp_path: Path):
    (tmp_path / "defaults.yaml").write_text((REPO / "dags" / "config" / "defaults.yaml")
                                            .read_text())
    big = tmp_path / "big.yaml"
    big.write_bytes(b"# " + b"x" * MAX_FILE_BYTES + b"\n")
    assert load_catalog(tmp_path).errors[str(big)] == (
        f"{big}: (file): larger than 1024 KiB; a config file is a few KB, split it or remove "
        "what does not belong",)


def test_two_files_for_one_company_are_both_errors(tmp_path: Path):
    shutil.copytree(REPO / "dags" / "config", tmp_path / "c")
    config = tmp_path / "c"
    shutil.copy(config / "acme.yaml", config / "acme.yml")
    catalog = load_catalog(config)
    assert catalog.errors == {
        str(config / "acme.yaml"): (f"{config / 'acme.yaml'}: (file): company 'acme' has more "
                                    "than one config file (also acme.yml); keep exactly one",),
        str(config / "acme.yml"): (f"{config / 'acme.yml'}: (file): company 'acme' has more "
                                   "than one config file (also acme.yaml); keep exactly one",)}
    assert "acme" not in catalog.companies and "kiwi-outdoors" in catalog.companies
    assert load_catalog(config, only="acme").errors == catalog.errors  # the DAG loader too


def test_a_company_id_that_is_not_a_slug_reads_no_file(tmp_path: Path):
    catalog = load_catalog(tmp_path, only="../etc/passwd")
    assert catalog.error_lines == [
        f"{tmp_path}: (file): '../etc/passwd' is not a company id (lower-case letters, digits, "
        "'-' and '_'); no file was read"]
