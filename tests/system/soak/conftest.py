from __future__ import annotations

import os
import shutil

import pytest

from tests.system.soak.stack import Stack, relocated_dir, scratch_dir, stop_and_sweep

# `make test` runs a bounded soak (6 h of demo slots, 3 manual exports, 3 random clears);
# SOAK_LOOKBACK_HOURS=168 is the acceptance size (make acceptance).
LOOKBACK_HOURS = int(os.environ.get("SOAK_LOOKBACK_HOURS", "6"))


@pytest.fixture(scope="module")
def soak_stack():
    """`make run` in a copy of the project on free ports; always stopped and deleted. On its
    own local cluster: test_soak.py checks that `make stop` stops it and frees its port.

    Run as root (CI), the copy sits in a mode-700 directory, like a new user's checkout in
    /root (issue 21 item 7): PostgreSQL runs as ``postgres``, which cannot enter it, so setup
    puts the cluster in postgres's home (:func:`relocated_dir`) and the soak runs on that.
    One stack for both (it was a stack of its own, tests/system/test_home_dir.py: a boot and
    a teardown, ~78 s of a worker in `make test`)."""
    root = scratch_dir("export-soak-")
    if os.geteuid() == 0:
        os.chmod(root, 0o700)
    # The heartbeat timeout: test_scheduler_sigkill kills the scheduler with tasks running;
    # their supervisors die with it, and the new scheduler fails those tasks (then retries
    # them) only once their heartbeat is this old. Airflow's 300 s made that test 311 s of
    # `make test` (3 Dec, 16:41 run) against 22 s alone; 60 s is still 30 missed heartbeats
    # (every 2 s, scripts/airflow-env.sh) before a live task could be taken for dead.
    # The render lease: a render killed with the scheduler keeps its period's lease, and the
    # retry waits it out; the default 5 minutes made that test 312 s of `make test` (6 Dec)
    # against 21 s when no render was in flight. The cluster tests run with 10 s.
    stack = Stack.in_copy(root / "project", local_pg=True,
                          EXPORT_CATCHUP_LOOKBACK_HOURS=str(LOOKBACK_HOURS),
                          AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT="60",
                          EXPORT_RENDER_LEASE_SECONDS="30")
    cluster = relocated_dir(stack.root / ".airflow") if os.geteuid() == 0 else None
    assert cluster is None or not cluster.exists(), f"{cluster} is left from another run"
    try:
        stack.start()
        yield stack
    finally:
        try:
            stop_and_sweep(stack)
            if cluster is not None and cluster.exists():
                stack.make("reset-db", timeout=120)
        finally:
            if cluster is not None:
                shutil.rmtree(cluster, ignore_errors=True)
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
