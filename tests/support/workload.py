"""How `make test` hands its files to pytest-xdist's workers (``--dist loadfile``, with the
scheduler of :func:`scheduler`).

The suite is CPU-bound on 2 cores, and an idle Airflow stack (scheduler, dag-processor,
api-server, triggerer) costs CPU all the same: in a run with one shared stack per worker, four
stacks stayed up until the session ended, whether their worker had scheduler modules left or
not. So:

* the scheduler modules (``SHARED_STACK_MODULES``) all run on the run's one shared stack
  (tests/system/scheduler/shared.py), in ``EXPORT_TEST_SHARED_STACKS`` groups (balanced by
  the measured seconds below, ``TOGETHER`` modules in one group): each group is one unit of
  work for xdist, so it runs on one worker, one module after the other, and the groups run at
  the same time on different workers against the same stack (two stacks, one per group, cost
  a second boot and ~0.1 of a core for the whole run);
* every other file is a unit of its own (what ``--dist loadfile`` does: module fixtures such as
  a Celery cluster are set up once), but a folder of ``FOLDER_UNITS`` is one unit (its modules
  share a stack of the folder's own: tests/system/tenants);
* once every shared-stack group has run, the controller stops the shared stack (it idled until
  the run's end: ~0.1 of a core, an idle stack measured 6 Dec);
* the files of tests/dags, which import Airflow into their worker (``dag.test()``'s
  in-process Execution API, DagBags, the metadata DB's copy: ~4–5 CPU-s the first time), run on
  at most ``EXPORT_TEST_AIRFLOW_WORKERS`` workers (2): once loaded, Airflow stays in a worker;
* the units go out longest first (xdist hands them out in collection order when
  ``--no-loadscope-reorder``), so the long ones start at once and the short files fill the end.

Nothing here changes what a test checks, only where and when it runs. (xdist's own
``--dist loadgroup`` does not work with pytest 9: it renames node ids through ``item._nodeid``,
which pytest 9 no longer reads; hence a scheduler of our own, which xdist's
``pytest_xdist_make_scheduler`` hook allows.)
"""

from __future__ import annotations

import functools
import os
from collections.abc import Collection, Iterable

import pytest

# Measured seconds of one pytest worker per unit (`make test`: 2 Dec; the system units 4 Dec,
# fresh clone of 875d221, EXPORT_TEST_TIMELINE); a new file gets
# DEFAULT_SECONDS until it is measured. Only the order and the balance depend on them.
SECONDS = {
    "tests/system/cluster/test_cluster.py": 402,
    "tests/system/cluster/test_ha.py": 1,  # skipped but in make acceptance (HA_COMPANIES)
    # skipped but in make acceptance (BATCH_FAULT_MISSED), after catch-up and the manual lane
    "tests/system/scheduler/test_batch_faults.py": 1,
    "tests/system/soak/test_soak.py": 157,
    "tests/system/scheduler/test_catchup.py": 300,  # with the batched-recovery case, 6 Dec
    "tests/system/scheduler/test_alerts.py": 180,  # 256 with the shared stack's start
    "tests/system/scheduler/test_delivery_window.py": 159,
    "tests/system/scheduler/test_clear_and_retry.py": 70,
    "tests/system/scheduler/test_runaway.py": 129,
    # One FAB stack for the folder (FOLDER_UNITS), its boot in the first file's (6 Dec, when
    # each file had a stack of its own: 104 s and 74 s).
    "tests/system/tenants/test_company_view.py": 110,
    "tests/system/tenants/test_isolation_and_secrets.py": 40,
    "tests/system/tenants/test_pg_server.py": 5,
    "tests/system/scheduler/test_manual_lane.py": 17,
    "tests/system/scheduler/test_operations_page.py": 41,
    "tests/system/scheduler/test_gap_audit.py": 77,
    "tests/system/scheduler/test_connections.py": 60,  # with the SFTPHook connection, 6 Dec
    "tests/system/scheduler/test_outages_and_risk.py": 32,
    "tests/system/scheduler/test_controls.py": 27,
    "tests/system/scheduler/test_assets.py": 53,
    "tests/system/soak/test_run_inputs.py": 5,
    # Moved from the fast tiers (4 Dec; wall at -n 4 of make test-fast).
    "tests/system/deploy/test_install.py": 84,  # a fresh venv with the lock and the wheel
    "tests/system/deploy/test_dag_processor_bench.py": 21,
    "tests/system/deploy/test_lock.py": 20,
    "tests/system/deploy/test_parse_bench.py": 16,  # 5 Dec, beside its --dag-processor sibling
    # The fast tiers' longest files (make test-fast, 4 workers, 2 Dec 08:15): handed out first,
    # so no 40 s file starts last and holds the run's end.
    "tests/integration/pipeline/test_schema_contract.py": 35,  # 3 Dec
    "tests/dags/test_plugin_registration.py": 32,  # 3 Dec
    "tests/integration/pipeline/test_reschedule.py": 44,
    "tests/integration/cli/test_run.py": 32,
    "tests/integration/cli/test_controls.py": 25,
    "tests/dags/test_start_parity.py": 25,
    "tests/unit/time/test_cli.py": 22,
    "tests/unit/test_tiers.py": 20,
    "tests/dags/test_obligations_ui.py": 20,
    "tests/dags/test_company_ui.py": 32,  # 6 Dec, alone at -n 0
    "tests/integration/pipeline/test_timing_change.py": 19,
    "tests/unit/time/test_oracle.py": 18,
    "tests/integration/delivery/test_object_stores.py": 18,
    "tests/dags/test_outages_ui.py": 17,
    "tests/integration/ledger/test_kill.py": 17,
    "tests/dags/test_reruns.py": 17,
    "tests/integration/pipeline/test_retention_holds.py": 16,
    "tests/dags/test_ui.py": 16,
    "tests/integration/pipeline/test_leases.py": 15,
    "tests/integration/pipeline/test_gap_audit.py": 15,
    "tests/integration/pipeline/test_explain.py": 15,
    "tests/unit/pipeline/test_requeue.py": 14,
    "tests/unit/test_foundation.py": 14,
    "tests/dags/test_task_limits.py": 14,
    "tests/integration/pipeline/test_waiting.py": 13,
    "tests/unit/hostile/test_free_text.py": 13,
    "tests/dags/test_connections.py": 11,
    "tests/dags/test_walking_skeleton.py": 10,
    "tests/integration/test_obligations.py": 8,
    "tests/unit/cli/test_migrate_legacy.py": 8,
    # Added 6 Dec, as their helpers measured them alone (a file left at DEFAULT_SECONDS is
    # handed out last and, if long, holds the run's end).
    "tests/integration/ledger/test_ledger_restart.py": 70,  # its own PostgreSQL, a 15 s outage
    "tests/integration/ledger/test_upgrade_in_place.py": 60,
    "tests/integration/ledger/test_clock_skew.py": 40,
    "tests/integration/delivery/test_webhook_signing.py": 24,
    "tests/integration/ledger/test_bytes_moved_once.py": 17,
    "tests/integration/pipeline/test_batch_recovery.py": 20,  # + the owed asset events, 3 s
    "tests/dags/test_sftp_hook.py": 15,
    "tests/integration/render/test_formats.py": 15,
    "tests/dags/test_provider.py": 13,
    "tests/integration/ledger/test_object_store_faults.py": 12,
}
DEFAULT_SECONDS = 10
TIER_RANK = {"system": 0, "dags": 1, "integration": 2, "unit": 3}
STACK_BOOT_SECONDS = 70
# The scheduler modules on the shared stack (tests/system/scheduler/conftest.py). xdist's
# controller sees node ids only, so the list is written out; the collection checks it against
# what the modules use (a module that asks for one of SHARED_FIXTURES, or sets COMPANIES, the
# scheduler_stack fixture's input, and asks for it with request.getfixturevalue).
SHARED_STACK_MODULES = tuple(f"tests/system/scheduler/test_{name}.py" for name in (
    "alerts", "assets", "batch_faults", "catchup", "clear_and_retry", "connections", "controls",
    "delivery_window", "gap_audit", "manual_lane", "operations_page", "outages_and_risk", "runaway"))
SHARED_FIXTURES = frozenset({"shared_stack", "scheduler_stack"})
# Modules that must not run at the same time on the shared stack, so they share a group (one
# after the other on one worker): catchup and manual_lane both fill the stack's export_catchup
# pool and assert on it (batch_faults' batches take its places too); connections runs
# `exportctl loaders dags` as an operator does, which removes every orphan loader in the folder,
# and clear_and_retry keeps one on purpose (a removed company's loader, whose stand-in DAGs its
# cleared task must find).
TOGETHER = (("tests/system/scheduler/test_catchup.py",
             "tests/system/scheduler/test_manual_lane.py",
             "tests/system/scheduler/test_batch_faults.py"),
            ("tests/system/scheduler/test_clear_and_retry.py",
             "tests/system/scheduler/test_connections.py"))


# Folders whose modules share a stack of the folder's own (a package-scoped fixture): one unit
# of work, so one worker runs the modules one after the other and the stack starts once.
FOLDER_UNITS = ("tests/system/tenants/",)


def uses_shared_stack(item: pytest.Item) -> bool:
    if not path_of(item).startswith("tests/system/scheduler/"):
        return False
    module = getattr(item, "module", None)
    return bool(SHARED_FIXTURES & set(getattr(item, "fixturenames", ()))) or (
        module is not None and hasattr(module, "COMPANIES"))


def shared_stacks() -> int:
    """``EXPORT_TEST_SHARED_STACKS`` (default 2): how many groups the shared-stack modules form,
    i.e. how many workers use the run's one shared stack at once."""
    value = os.environ.get("EXPORT_TEST_SHARED_STACKS", "2")
    if not value.isdigit() or int(value) < 1:
        raise pytest.UsageError(f"EXPORT_TEST_SHARED_STACKS={value!r}: give a whole number "
                                "of stacks, 1 or more (default 2)")
    return int(value)


def path_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def stack_groups(paths: list[str], count: int) -> dict[str, str]:
    """Shared-stack module → its group (``shared-stack-1`` …), longest first onto the
    lightest group (the modules of a ``TOGETHER`` set as one block); deterministic, so every
    worker's collection agrees."""
    blocks: dict[str, list[str]] = {}
    for path in paths:
        key = next((together[0] for together in TOGETHER if path in together), path)
        blocks.setdefault(key, []).append(path)
    seconds = {key: sum(SECONDS.get(p, DEFAULT_SECONDS) for p in members)
               for key, members in blocks.items()}
    load = {f"shared-stack-{n + 1}": 0 for n in range(count)}
    groups = {}
    for key in sorted(blocks, key=lambda k: (-seconds[k], k)):
        group = min(load, key=lambda g: (load[g], g))
        groups.update(dict.fromkeys(blocks[key], group))
        load[group] += seconds[key]
    return groups


@functools.cache
def _listed_groups(count: int) -> dict[str, str]:
    return stack_groups(list(SHARED_STACK_MODULES), count)


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its shared-stack group, else its folder if it is
    one of ``FOLDER_UNITS``, else its file (xdist's controller asks once per test: the grouping
    is computed once per stack count)."""
    path = nodeid.split("::", 1)[0]
    return _listed_groups(shared_stacks()).get(path, _folder_or_file(path))


def _folder_or_file(path: str) -> str:
    return next((folder for folder in FOLDER_UNITS if path.startswith(folder)), path)


def max_stacks() -> int:
    """``EXPORT_TEST_MAX_STACKS`` (default 3): how many Airflow stacks or Celery clusters the
    system units run at once (the shared-stack groups count once: they share one stack); the
    other workers take the fast tiers meanwhile."""
    value = os.environ.get("EXPORT_TEST_MAX_STACKS", "3")
    if not value.isdigit() or int(value) < 1:
        raise pytest.UsageError(f"EXPORT_TEST_MAX_STACKS={value!r}: give a whole number of "
                                "stacks, 1 or more (default 3)")
    return int(value)


def is_stack_unit(unit: str) -> bool:
    """A unit that runs on an Airflow stack of its own: a shared-stack group or a system file
    (tests/system/deploy's start no stack: fresh venvs, one dag-processor pass at a time)."""
    return unit.startswith("shared-stack-") or (
        unit.startswith("tests/system/") and not unit.startswith("tests/system/deploy/"))


def stack_of(unit: str) -> str:
    """The stack a stack unit runs on: every shared-stack group the run's one shared stack,
    any other its own (the unit)."""
    return "shared-stack" if unit.startswith("shared-stack-") else unit


def loads_airflow(unit: str) -> bool:
    """A unit that imports Airflow into its worker (tests/dags: DagBags, ``dag.test()``'s
    in-process Execution API, the metadata DB's copy): every worker that runs one pays that
    once, ~4–5 CPU-s (tests/dags/test_ui.py first in a worker: 8.2 self CPU-s, after another
    tests/dags file 3.8)."""
    return unit.startswith("tests/dags/")


def airflow_workers() -> int:
    """``EXPORT_TEST_AIRFLOW_WORKERS`` (default 2): how many workers run the units that load
    Airflow (:func:`loads_airflow`); the others never import it."""
    value = os.environ.get("EXPORT_TEST_AIRFLOW_WORKERS", "2")
    if not value.isdigit() or int(value) < 1:
        raise pytest.UsageError(f"EXPORT_TEST_AIRFLOW_WORKERS={value!r}: give a whole number "
                                "of workers, 1 or more (default 2)")
    return int(value)


def next_unit(queue: Iterable[str], node_has_stack: bool, stacks_up: Collection[str],
              limit: int, node_has_airflow: bool = True, airflow_nodes: int = 0,
              airflow_limit: int | None = None) -> str | None:
    """The unit a worker takes next: the first in the queue, unless it is a stack unit whose
    stack is not up (``stacks_up``: the :func:`stack_of` the units other workers hold) while
    ``limit`` stacks are, or it loads Airflow and ``airflow_limit`` other workers already have
    (the worker then takes the first unit it may).
    A worker that holds a stack unit may queue the next one behind it: they run one after the
    other, so the number of stacks up does not grow; a shared-stack group may join the shared
    stack whatever the count (it starts no stack); a worker that has loaded Airflow keeps it,
    so it may take every unit that loads Airflow."""
    up = set(stacks_up)

    def may_start(unit: str) -> bool:
        return (not is_stack_unit(unit) or node_has_stack or stack_of(unit) in up
                or len(up) < limit)

    may_load_airflow = (node_has_airflow or airflow_limit is None
                        or airflow_nodes < airflow_limit)
    for unit in queue:
        if may_start(unit) and (may_load_airflow or not loads_airflow(unit)):
            return unit
    return None


def shared_stack_done(queue: Iterable[str], assigned: Iterable[dict]) -> bool:
    """Every shared-stack group handed out and run to its last test (and at least one was):
    ``queue`` the units not handed out yet, ``assigned`` each worker's units (unit -> its
    tests -> done)."""
    if any(unit.startswith("shared-stack-") for unit in queue):
        return False
    groups = [tests for work in assigned for unit, tests in work.items()
              if unit.startswith("shared-stack-")]
    return bool(groups) and all(all(tests.values()) for tests in groups)


class _SharedStackNotice:
    """Calls ``on_shared_stack_done`` once, when every shared-stack group has run
    (tests/conftest.py stops the shared stack then: idle, it cost ~0.1 of a core while the
    fast tiers finished, 140-180 s of each run)."""

    on_shared_stack_done = None
    _shared_stack_done = False

    def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
        # xdist calls this after the test's whole protocol: a module's fixtures are torn down
        # with its last test.
        super().mark_test_complete(node, item_index, duration)  # type: ignore[misc]
        if self.on_shared_stack_done is None or self._shared_stack_done:
            return
        if shared_stack_done(self.workqueue, self.assigned_work.values()):  # type: ignore[attr-defined]
            self._shared_stack_done = True
            self.on_shared_stack_done()


def scheduler(config: pytest.Config, log):
    """xdist's file scheduling with :func:`unit_of` as the unit (``--dist loadfile`` only), and
    at most :func:`max_stacks` stacks up at once (the shared-stack groups on their one stack).

    Four stacks up at once on 2 cores (each ~0.17 of a core while idle, ~55 CPU-s to start)
    had a slow machine at load 12-13 and its system tests past their timeouts (CI, 2 Dec)."""
    scheduling = _scheduling_class()(config, log)
    scheduling.limit = max_stacks()
    scheduling.airflow_limit = airflow_workers()
    return scheduling


@functools.cache
def _scheduling_class() -> type:
    from xdist.scheduler.loadscope import LoadScopeScheduling

    class WorkloadScheduling(_SharedStackNotice, LoadScopeScheduling):
        limit = 3
        airflow_limit = 2

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _stacks_held(self, node) -> set[str]:
            return {stack_of(unit) for unit, done in self.assigned_work.get(node, {}).items()
                    if is_stack_unit(unit) and not all(done.values())}

        def _has_airflow(self, node) -> bool:
            return any(loads_airflow(unit) for unit in self.assigned_work.get(node, {}))

        def _pick(self, node) -> str | None:
            others = [n for n in self.assigned_work if n is not node]
            return next_unit(self.workqueue, bool(self._stacks_held(node)),
                             set().union(*map(self._stacks_held, others)), self.limit,
                             self._has_airflow(node), sum(map(self._has_airflow, others)),
                             self.airflow_limit)

        def _assign_work_unit(self, node) -> None:
            unit = self._pick(node)
            if unit is None:
                return
            work_unit = self.workqueue.pop(unit)
            self.assigned_work.setdefault(node, {})[unit] = work_unit
            collection = self.registered_collections[node]
            node.send_runtest_some([collection.index(nodeid)
                                    for nodeid, done in work_unit.items() if not done])

        def _reschedule(self, node) -> None:
            # The next unit only when the worker is down to its last test (pytest runs a test
            # once it knows the next one): a stack unit is not claimed a whole test early.
            if node.shutting_down or (self.workqueue
                                      and self._pending_of(self.assigned_work[node]) > 1):
                return
            if self._pick(node) is None:
                # Nothing left, or only units that enough other workers run (stacks, Airflow):
                # done.
                node.shutdown()
                return
            self._assign_work_unit(node)

    return WorkloadScheduling


def plan(items: list[pytest.Item], tier: dict[str, str]) -> list[pytest.Item]:
    """The items longest unit first (each unit's tests together and in their collected order;
    xdist hands the units out in this order). ``tier`` maps a file to its tier."""
    used = {path_of(i) for i in items if uses_shared_stack(i)}
    unlisted = sorted(used - set(SHARED_STACK_MODULES))
    if unlisted:
        raise pytest.UsageError(f"{', '.join(unlisted)} use the shared stack: add them to "
                                "SHARED_STACK_MODULES in tests/support/workload.py")
    groups = _listed_groups(shared_stacks())

    def unit_of_path(path: str) -> str:
        return groups.get(path, _folder_or_file(path))

    seconds: dict[str, int] = {}
    for path in {path_of(i) for i in items}:
        unit = unit_of_path(path)
        boot = STACK_BOOT_SECONDS if path in groups and unit not in seconds else 0
        seconds[unit] = seconds.get(unit, 0) + SECONDS.get(path, DEFAULT_SECONDS) + boot
    first_seen = {}
    for index, item in enumerate(items):
        path = path_of(item)
        unit = unit_of_path(path)
        first_seen.setdefault(unit, (TIER_RANK[tier[path]], index))
    return sorted(items, key=lambda i: _rank(unit_of_path(path_of(i)), seconds, first_seen, i))


def _rank(unit: str, seconds: dict[str, int], first_seen: dict, item: pytest.Item) -> tuple:
    tier_rank, index = first_seen[unit]
    # Measured units by their seconds, longest first; the rest by tier, then as collected.
    measured = unit.startswith("shared-stack-") or unit in SECONDS or unit in FOLDER_UNITS
    return (0, -seconds[unit], unit) if measured else (1, tier_rank, index)
