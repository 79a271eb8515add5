"""Free text and CSV delimiters in config files (issue 23): the four delimiters CSV readers agree
on load (a tab included, the one control character allowed, and only there), every other
control character in any value or key is one line naming the field, and a file full of them
stays short."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from export_lib.config.loader import load_catalog
from export_lib.config.text import MAX_LINES, text_issues
from tests.world import REPO


@pytest.fixture()
def config(tmp_path: Path) -> Path:
    target = tmp_path / "config"
    shutil.copytree(REPO / "dags" / "config", target)
    return target


def with_delimiter(config: Path, written: str) -> Path:
    acme = config / "acme.yaml"
    text = acme.read_text()
    assert 'csv: {delimiter: ",", timestamps: local}' in text
    acme.write_text(text.replace('csv: {delimiter: ",", timestamps: local}',
                                 f"csv: {{delimiter: {written}, timestamps: local}}", 1))
    return acme


@pytest.mark.parametrize(("written", "loaded"), [
    ('","', ","), ('";"', ";"), ('"|"', "|"), ('"\\t"', "\t")])
def test_the_four_delimiters_load(config: Path, written: str, loaded: str) -> None:
    with_delimiter(config, written)
    catalog = load_catalog(config)
    assert catalog.ok, catalog.error_lines
    assert catalog.schedule("acme/daily-spend").csv.delimiter == loaded


@pytest.mark.parametrize(("written", "shown"), [
    ('"\\n"', "'\\n'"), ("'\"'", "'\"'"), ('"a"', "'a'"), ('";;"', "';;'"), ("1", "1"),
    ('"\\r"', "'\\r'"), ('" "', "' '")])
def test_any_other_delimiter_is_one_error(config: Path, written: str, shown: str) -> None:
    acme = with_delimiter(config, written)
    assert load_catalog(config).errors[str(acme)] == (
        f"{acme}: widget_exports[0].csv.delimiter: delimiter {shown} is not one of ',' ';' '|' "
        "or a tab (write \"\\t\" in double quotes); CSV readers agree on no other",)


def test_a_tab_anywhere_else_is_refused(config: Path) -> None:
    acme = config / "acme.yaml"
    acme.write_text(acme.read_text().replace("name: ACME Corp", 'name: "ACME\\tCorp"', 1))
    assert load_catalog(config).errors[str(acme)] == (
        f"{acme}: company.name: the text 'ACME\\tCorp' contains a control character (U+0009 at "
        "position 5); remove it: free text is one line of printable characters",)


def test_a_control_character_in_defaults_is_named_there(config: Path) -> None:
    defaults = config / "defaults.yaml"
    text = defaults.read_text()
    assert "local_mounts: []\n" in text
    defaults.write_text(text.replace("local_mounts: []\n",
                                     'local_mounts: ["/mnt/exports\\u2028"]\n', 1))
    catalog = load_catalog(config)
    assert catalog.errors[str(defaults)] == (
        f"{defaults}: local_mounts[0]: the text '/mnt/exports\\u2028' contains a control "
        "character (U+2028 at position 13); remove it: free text is one line of printable "
        "characters",)
    assert not catalog.companies  # nothing loads on a broken defaults.yaml


def test_a_file_full_of_control_characters_stays_short() -> None:
    data = {"company": {f"k{i}": f"v\x07{i}" for i in range(500)}}
    lines = text_issues("f.yaml", data)
    assert len(lines) == MAX_LINES
    assert lines[0] == ("f.yaml: company.k0: the text 'v\\x070' contains a control character "
                        "(U+0007 at position 2); remove it: free text is one line of printable "
                        "characters")


@pytest.mark.parametrize(("args", "line"), [
    (("pause", "--company", "acme", "--by", "ann", "--why", "ok\n2026-12-02 INFO unpaused"),
     "exportctl pause: error: argument --why: contains a control character (U+000A at position "
     "3); write one line"),
    (("pause", "--company", "acme", "--by", "ann\x1b[2K", "--why", "customer asked"),
     "exportctl pause: error: argument --by: contains a control character (U+001B at position "
     "4); write one line"),
    (("requeue", "acme/daily-spend/2026-03-29T05:00Z", "--reason", "x\u202ey"),
     "exportctl requeue: error: argument --reason: contains a control character (U+202E at "
     "position 2); write one line"),
])
def test_exportctl_audit_text_is_one_line(tmp_path: Path, args: tuple[str, ...],
                                          line: str) -> None:
    from tests.world import build_world

    world = build_world(tmp_path / "world")
    result = world.exportctl(*args)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == line
    assert world.exportctl("actions", "--json").stdout.strip() == "[]"  # nothing recorded
