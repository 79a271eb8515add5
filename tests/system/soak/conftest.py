from __future__ import annotations

import os
import shutil

import pytest

from tests.system.soak.stack import Stack, scratch_dir, stop_and_sweep

# `make test` runs a bounded soak (6 h of demo slots, 5 manual exports, 4 random clears);
# SOAK_LOOKBACK_HOURS=168 is the acceptance size (make acceptance).
LOOKBACK_HOURS = int(os.environ.get("SOAK_LOOKBACK_HOURS", "6"))


@pytest.fixture(scope="module")
def soak_stack():
    """`make run` in a copy of the project on free ports; always stopped and deleted. On its
    own local cluster: test_soak.py checks that `make stop` stops it and frees its port."""
    root = scratch_dir("export-soak-")
    stack = Stack.in_copy(root / "project", local_pg=True,
                          EXPORT_CATCHUP_LOOKBACK_HOURS=str(LOOKBACK_HOURS))
    try:
        stack.start()
        yield stack
    finally:
        try:
            stop_and_sweep(stack)
        finally:
            if os.environ.get("SOAK_KEEP"):
                print(f"SOAK_KEEP: the stack's copy stays in {stack.root}")
            else:
                shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def project_copy():
    """A copy of the project that is never started for long (bad-input tests of the local
    cluster: its port, its data directory)."""
    root = scratch_dir("export-run-")
    stack = Stack.in_copy(root / "project", local_pg=True)
    try:
        yield stack
    finally:
        try:
            stop_and_sweep(stack)
        finally:
            shutil.rmtree(root, ignore_errors=True)
