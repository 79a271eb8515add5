"""The user docs stay true: what README.md, CONTRIBUTING.md and docs/**/*.md name exists.

* every relative link resolves to a file of the repository, and a ``#anchor`` into a Markdown
  page to a heading or an ``<a id>`` of that page;
* every backticked repository path (`` `docs/…` ``, `` `dags/…` ``, `` `export_lib/…` ``,
  `` `plugins/…` ``, `` `scripts/…` ``, `` `bench/…` ``, `` `tests/…` ``) exists. Placeholders
  (``<id>``, ``{company}``) and globs are not paths; ``dags/config/<name>.yaml`` and
  ``dags/company_<name>.py`` are files a reader is told to create, so only their directory
  must exist;
* every ADR named (``ADR 0015``) has its file in docs/adr/; every ``make <target>`` is a
  Makefile target; every ``exportctl <command>`` is a subcommand of its parser;
* no commit hashes and no "issue N" / "seed 00N" references (a reader cannot look them up).
  A commit hash is (a) outside code blocks, any standalone token of 7 to 40 lower-case hex
  digits with at least one digit and one letter (standalone: not part of a longer word, path,
  UUID or 64-digit sha256), and (b) anywhere, code blocks included, such a token that is a
  commit of this repository (``git cat-file -e <token>^{commit}``: catches a hash pasted into a
  command example). Architecture decision records (docs/adr/) are records of their time:
  they are checked for links, paths and names, not for hashes and issue numbers.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

PATH_PREFIXES = ("docs/", "dags/", "export_lib/", "plugins/", "scripts/", "bench/", "tests/")
TO_CREATE = re.compile(r"dags/config/[a-z0-9_-]+\.ya?ml|dags/company_[a-z0-9_-]+\.py")
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEX = re.compile(r"(?<![0-9A-Za-z_./:@#-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}"
                 r"(?![0-9A-Za-z_/@-])")
ISSUE_REF = re.compile(r"\b(?:issues?\s+#?\d+|seed\s+0\d\d)\b", re.I)
ADR_REF = re.compile(r"\bADRs?\s+(\d{4})\b")
MAKE_REF = re.compile(r"(?<![\w-])make[ \t]+([a-z][\w-]*)")
EXPORTCTL_REF = re.compile(r"(?<![\w/-])exportctl[ \t]+([a-z][\w-]*)(?:[ \t]+([a-z][\w-]*))?")


def _docs() -> list[Path]:
    pages = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md"))]
    return [page for page in pages if page.is_file()]


DOCS = _docs()
IDS = [str(page.relative_to(REPO)) for page in DOCS]
USER_DOCS = [page for page in DOCS if "adr" not in page.relative_to(REPO).parts]
USER_IDS = [str(page.relative_to(REPO)) for page in USER_DOCS]


def _split(text: str) -> tuple[str, list[str]]:
    """The text outside fenced code blocks (the blocks blanked) and the blocks themselves."""
    blocks = [m.group(0) for m in FENCE.finditer(text)]
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text), blocks  # lines kept


def _name(page: Path) -> str:
    return str(page.relative_to(REPO)) if page.is_relative_to(REPO) else page.name


def _line(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


@functools.cache
def _anchors(page: Path) -> frozenset[str]:
    """The anchors of a Markdown page: its headings (GitHub's slugs) and ``<a id>``s."""
    text = _split(page.read_text())[0]
    found = set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return frozenset(found)


def broken_links(page: Path) -> list[str]:
    prose = _split(page.read_text())[0]
    broken = []
    for match in LINK.finditer(prose):
        target = match.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        where = (page.parent / path_part).resolve() if path_part else page
        if not where.exists():
            broken.append(f"line {_line(prose, match.start())}: {target} (no such file)")
        elif anchor and where.suffix == ".md" and anchor not in _anchors(where):
            broken.append(f"line {_line(prose, match.start())}: {target} (no such anchor in "
                          f"{_name(where)})")
    return broken


@pytest.mark.parametrize("page", DOCS, ids=IDS)
def test_every_relative_link_resolves(page: Path):
    broken = broken_links(page)
    assert not broken, f"{_name(page)}: broken links:\n" + "\n".join(broken)


def _repo_path(code: str) -> str | None:
    """The repository path an inline code span names, or None when it names none."""
    token = code.strip().split()[0] if code.strip() else ""
    if not token.startswith(PATH_PREFIXES) or any(c in token for c in "<>{}*$[]"):
        return None
    token = re.split(r"[#:]", token, maxsplit=1)[0]  # path#anchor, file.py:123, test::name
    return token.rstrip(".,;)")


def missing_paths(page: Path) -> list[str]:
    prose = _split(page.read_text())[0]
    missing = []
    for match in INLINE.finditer(prose):
        path = _repo_path(match.group(1))
        if path is None or (REPO / path).exists():
            continue
        module, dot, _ = path.rpartition(".")  # export_lib/render/csv_format.format_float
        if dot and (REPO / f"{module}.py").is_file():
            continue
        if TO_CREATE.fullmatch(path) and (REPO / path).parent.is_dir():
            continue  # a file the reader is told to create
        missing.append(f"line {_line(prose, match.start())}: `{match.group(1)}`")
    return missing


@pytest.mark.parametrize("page", DOCS, ids=IDS)
def test_every_backticked_repository_path_exists(page: Path):
    missing = missing_paths(page)
    assert not missing, f"{_name(page)} names paths that do not exist:\n" + "\n".join(missing)


@functools.cache
def _make_targets() -> frozenset[str]:
    text = (REPO / "Makefile").read_text()
    targets = set()
    for names in re.findall(r"^([A-Za-z][\w .-]*?):(?!=)", text, re.M):
        targets.update(names.split())
    return frozenset(targets)


@functools.cache
def _subcommands() -> dict[str, frozenset[str]]:
    """``exportctl``'s subcommands → their own subcommands (empty for most)."""
    import argparse

    from export_lib.cli.main import build_parser

    def choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        """Its subparsers, else the choices of its first positional (``ledger upgrade``)."""
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                return dict(action.choices)
        positional = [a for a in parser._actions if not a.option_strings and a.dest != "help"]
        if positional and positional[0].choices:
            return {str(choice): parser for choice in positional[0].choices}
        return {}

    return {name: frozenset(choices(sub)) for name, sub in choices(build_parser()).items()}


def _code_text(text: str) -> str:
    """Where commands are named: inline code spans and fenced blocks."""
    prose, blocks = _split(text)
    return "\n".join([*(m.group(1) for m in INLINE.finditer(prose)), *blocks])


def unknown_names(page: Path) -> list[str]:
    text = page.read_text()
    adrs = {p.name[:4] for p in (REPO / "docs" / "adr").glob("[0-9][0-9][0-9][0-9]-*.md")}
    problems = [f"ADR {n}: no docs/adr/{n}-*.md" for n in sorted(set(ADR_REF.findall(text)))
                if n not in adrs]
    code = _code_text(text)
    problems += [f"make {t}: not a Makefile target"
                 for t in sorted(set(MAKE_REF.findall(code)) - _make_targets())]
    commands = _subcommands()
    for command, sub in sorted(set(EXPORTCTL_REF.findall(code))):
        if command not in commands:
            problems.append(f"exportctl {command}: not an exportctl command")
        elif commands[command] and sub and sub not in commands[command]:
            problems.append(f"exportctl {command} {sub}: not a '{command}' subcommand")
    return problems


@pytest.mark.parametrize("page", DOCS, ids=IDS)
def test_every_adr_make_target_and_exportctl_command_named_exists(page: Path):
    problems = unknown_names(page)
    assert not problems, f"{_name(page)}:\n" + "\n".join(problems)


@functools.cache
def _is_commit(token: str) -> bool:
    try:
        done = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{token}^{{commit}}"],
                              capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return False  # no git (an unpacked release): rule (a) still applies
    return done.returncode == 0


def history_refs(page: Path) -> list[str]:
    text = page.read_text()
    prose, blocks = _split(text)
    found = [f"line {_line(prose, m.start())}: {m.group(0)} (looks like a commit hash)"
             for m in HEX.finditer(prose)]
    found += [f"{m.group(0)} (a commit of this repository, in a code block)"
              for block in blocks for m in HEX.finditer(block) if _is_commit(m.group(0))]
    found += [f"line {_line(text, m.start())}: {m.group(0)!r} (say the requirement in words)"
              for m in ISSUE_REF.finditer(text)]
    return found


@pytest.mark.parametrize("page", USER_DOCS, ids=USER_IDS)
def test_user_docs_carry_no_commit_hashes_or_issue_numbers(page: Path):
    found = history_refs(page)
    assert not found, f"{_name(page)}:\n" + "\n".join(found)


def test_the_rules_catch_what_they_are_for(tmp_path: Path):
    """Each rule fires on a planted mistake (a rule that cannot fail checks nothing)."""
    assert HEX.findall("built from 5f5a51e on main") == ["5f5a51e"]
    assert HEX.findall("sha256 " + "ab12" * 16 + " and 123e4567-e89b-12d3-a456-426614174000 "
                       "and deadbeef and 1234567 and `docs/a1b2c3d4e.md`") == []
    assert ISSUE_REF.findall("fixed in issue 46; seed 002 says; issues #12") == [
        "issue 46", "seed 002", "issues #12"]
    assert _repo_path("export_lib/config/models.py:120") == "export_lib/config/models.py"
    assert _repo_path("dags/company_<id>.py") is None
    assert not (REPO / "docs" / "how-to" / "no-such-page.md").exists()
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## A section\n<a id=\"x-y\"></a>\n")
    assert _anchors(page) == {"title", "a-section", "x-y"}
    assert "test" in _make_targets() and "nonsense" not in _make_targets()
    assert "runs" in _subcommands() and "upgrade" in _subcommands()["ledger"]
    head = git_head()
    planted = tmp_path / "planted.md"
    planted.write_text(
        "# Planted\n\nSee [the runbook](runbook.md) and [ok](page.md#a-section), "
        "[gone](page.md#nowhere), [web](https://example.com).\n\n"
        "Edit `export_lib/config/modelz.py` or `dags/config/newco.yaml` (you create it); "
        "`export_lib/config/models.py:12` is there.\n\n"
        "Per ADR 0012 and ADR 0001; run `make tests` or `make test`, then "
        "`exportctl runz --since 48h`, `exportctl ledger upgrad` and `exportctl runs`.\n\n"
        f"Fixed in {head[:9]} for issue 46.\n\n```\ngit show {head[:12]}\n"
        "sha256 " + "ab12" * 16 + "\n```\n")
    assert broken_links(planted) == ["line 3: runbook.md (no such file)",
                                     "line 3: page.md#nowhere (no such anchor in page.md)"]
    assert missing_paths(planted) == ["line 5: `export_lib/config/modelz.py`"]
    assert unknown_names(planted) == ["ADR 0012: no docs/adr/0012-*.md",
                                      "make tests: not a Makefile target",
                                      "exportctl ledger upgrad: not a 'ledger' subcommand",
                                      "exportctl runz: not an exportctl command"]
    assert history_refs(planted) == [
        f"line 9: {head[:9]} (looks like a commit hash)",
        f"{head[:12]} (a commit of this repository, in a code block)",
        "line 9: 'issue 46' (say the requirement in words)"]


def git_head() -> str:
    """A recent commit whose short forms mix digits and letters (as most do)."""
    hashes = subprocess.run(["git", "-C", str(REPO), "log", "--format=%H", "-n", "50"],
                            capture_output=True, text=True, check=True).stdout.split()
    return next(h for h in hashes if all(HEX.fullmatch(h[:n]) for n in (9, 12)))
