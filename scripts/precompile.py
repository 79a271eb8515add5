"""Compile, once and in parallel, the bytecode of the installed modules our processes import.

``uv`` installs without compiling bytecode (``pip`` compiled all ~40,000 files of the lock: 51 s
on two cores). A module is then compiled by the first process that imports it, and by every
other process that imports it before that one has written its ``.pyc``: processes that start
together each compile the same modules (four pytest workers collecting, then their Airflow
subprocesses; the four components of an Airflow stack). On a fresh venv, ``make test-fast``'s
pytest cost 46 CPU-s more than on the same venv compiled (185.3 s against 164.9 s, back to back);
what those tests import is ~6,800 modules, ~16 CPU-s to compile once.

So ``make venv`` runs this after installing: it compiles every ``.py`` file directly inside the
site-packages directories listed in ``scripts/precompile.txt`` (~8,000 files; not their
subdirectories), one process per core. Python checks each ``.pyc`` against its source's mtime
and size as always, and compiles again on a mismatch: the list only decides what is compiled
ahead, never what runs. A directory the list names that the venv lacks (a package renamed by a
lock change) is skipped and counted; a module the list misses is compiled when first imported,
as before. ``--record`` rewrites the list from a venv whose modules were compiled by use (after
``make test-fast`` on a fresh venv): every site-packages directory holding compiled modules.
"""

from __future__ import annotations

import argparse
import compileall
import os
import sys
import sysconfig
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

LIST = Path(__file__).with_name("precompile.txt")
HEADER = """\
# Site-packages directories whose modules `make venv` compiles ahead (scripts/precompile.py):
# the directories that held compiled modules after `make test-fast` on a fresh venv. Rewrite
# with `.venv/bin/python scripts/precompile.py --record` after such a run when the lock changes.
"""


def site_packages() -> Path:
    return Path(sysconfig.get_path("purelib"))


def listed(path: Path = LIST) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def files_of(root: Path, directories: list[str]) -> tuple[list[str], list[str]]:
    """(the ``.py`` files directly inside each listed directory that exists, the missing ones)."""
    files, missing = [], []
    for directory in directories:
        folder = root / directory
        if not folder.is_dir():
            missing.append(directory)
            continue
        files.extend(str(p) for p in sorted(folder.glob("*.py")))
    return files, missing


def _compile(paths: list[str]) -> int:
    # quiet=2: a file that does not compile (a package's Python 2 example) is left to fail, if
    # ever, where it is imported, as without this step.
    return sum(bool(compileall.compile_file(p, quiet=2)) for p in paths)


def compile_listed(root: Path, directories: list[str], workers: int) -> tuple[int, int, list[str]]:
    files, missing = files_of(root, directories)
    chunks = [files[i:i + 200] for i in range(0, len(files), 200)]
    if workers <= 1 or len(chunks) <= 1:
        return len(files), _compile(files), missing
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return len(files), sum(pool.map(_compile, chunks)), missing


def record(root: Path, path: Path = LIST) -> int:
    tag = f".{sys.implementation.cache_tag}.pyc"
    directories = sorted({str(p.parent.parent.relative_to(root))
                          for p in root.rglob(f"__pycache__/*{tag}")})
    path.write_text(HEADER + "".join(f"{d}\n" for d in directories), encoding="utf-8")
    return len(directories)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true",
                        help=f"rewrite {LIST.name} from this venv's compiled modules")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes compiling at once (default: one per core)")
    args = parser.parse_args(argv)
    root = site_packages()
    if args.record:
        print(f"precompile: listed {record(root)} directories of {root} in {LIST}")
        return 0
    started = time.monotonic()
    directories = listed()
    total, ok, missing = compile_listed(root, directories, args.workers)
    print(f"precompile: {total} files of {len(directories) - len(missing)} directories of {root} "
          f"compiled or already current in {time.monotonic() - started:.1f} s "
          f"({total - ok} did not compile)"
          + (f"; {len(missing)} listed directories are not installed (first: {missing[0]}): "
             f"re-record the list, see {LIST.name}" if missing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
