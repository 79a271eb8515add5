"""``exportctl ARGS`` run by the tests: in this process, the way a subprocess would see it.

``python -m export_lib`` costs ~0.75 s of CPU per call just to start (the interpreter, pydantic,
SQLAlchemy); the suite makes hundreds of calls and is CPU-bound, so :func:`exportctl` calls
``export_lib.cli.main.main(args)`` here instead, inside exactly the environment and working
directory a subprocess would get, with stdout and stderr captured and the exit status returned
as a :class:`subprocess.CompletedProcess`. What only a real process can show stays a real
process: ``python -m export_lib`` itself (``tests/unit/time/test_cli.py``), a CLI killed mid-run
(``tests/integration/ledger/test_kill.py``, ``tests/integration/cli/test_run.py``) and every
system test's ``exportctl`` against a running stack. ``EXPORT_TEST_CLI_SUBPROCESS=1`` runs every
call as a subprocess again (to rule the shortcut out when a CLI test fails).
"""

from __future__ import annotations

import gc
import io
import logging
import os
import subprocess
import sys
import threading
import traceback
from collections.abc import Mapping
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

SUBPROCESS = os.environ.get("EXPORT_TEST_CLI_SUBPROCESS") == "1"


def exportctl(*args: str, cwd: Path, env: Mapping[str, str],
              timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``exportctl ARGS`` in ``cwd`` with exactly ``env``; ``timeout`` binds a subprocess only."""
    argv = [sys.executable, "-m", "export_lib", *args]
    # The environment, working directory and sys.stdout are the process's: a call from another
    # thread (a test's parallel lanes) gets a process of its own.
    if SUBPROCESS or threading.current_thread() is not threading.main_thread():
        return subprocess.run(argv, capture_output=True, text=True, env=dict(env), cwd=cwd,
                              timeout=timeout, check=False)
    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    # A subprocess's root logger has no handlers: a library warning reaches stderr through
    # logging.lastResort. Here pytest's capture handlers sit on the root; take them off for
    # the call so stderr reads the same.
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    root.handlers[:] = []
    root.setLevel(logging.WARNING)
    # What existed before the call is not its garbage: frozen, the collection below walks only
    # the call's own objects. A full gc.collect() walks the worker's whole heap (Airflow and
    # every module a test imported): 0.3-0.4 s per call, ~190 CPU-s of `make test-fast`'s
    # ~500 (py-spy, 3 Dec).
    gc.freeze()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = _main(list(args))
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        # A process's exit closes its ledger connections; here the engines die with the
        # garbage, so collect it before a test drops the database they point at.
        gc.collect()
        gc.unfreeze()
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def _main(args: list[str]) -> int:
    from export_lib.cli.main import main

    try:
        return main(args)
    except SystemExit as exc:  # argparse (2), sys.exit(N) or sys.exit("message")
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except Exception:  # noqa: BLE001 - the interpreter's own: traceback on stderr, status 1
        traceback.print_exc()
        return 1
