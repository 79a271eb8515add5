"""Real child processes for the tests that race several processes (claims index loads, ledger
registrations, a stale publication), forked from one ``forkserver`` per worker.

``spawn`` gave each child a fresh interpreter that imported pytest, the test module and
export_lib again (~0.5 CPU-s a child, 17 children in ``make test-fast``); ``fork`` would copy a
process that runs pytest's threads. A forkserver is a clean single-threaded process that has
imported :data:`PRELOAD` once; each child is forked from it. Its children would inherit the
environment the server started with (the first test's, monkeypatched or not), so every child
is handed the parent's environment of the moment, as a spawned child was.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from multiprocessing.context import BaseContext
from typing import Any

# What the children's targets import (their test modules import the rest).
PRELOAD = ["tests.integration.hostile.test_claims_concurrency",
           "tests.integration.ledger.test_ledger", "tests.integration.ledger.test_publication"]


def context() -> BaseContext:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)  # read when the worker's server starts (first use)
    return ctx


def process(ctx: BaseContext, target: Callable[..., Any], args: tuple) -> Any:
    """``ctx.Process(target=target, args=args)`` run under this process's environment."""
    return ctx.Process(target=_with_environ, args=(dict(os.environ), target, args))


def _with_environ(environ: dict[str, str], target: Callable[..., Any], args: tuple) -> None:
    os.environ.clear()
    os.environ.update(environ)
    target(*args)
