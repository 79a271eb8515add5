"""Scheduler tests: one shared `make run` stack per test run (tests/system/scheduler/shared.py),
used at once by the pytest workers that run the modules' groups (``EXPORT_TEST_SHARED_STACKS``,
2 by default, each a group of modules one after the other on one worker;
tests/support/workload.py), each module with its own uniquely named companies in it.

A module declares what it needs and uses the ``scheduler_stack`` fixture::

    COMPANIES = {"clearco": company_file("clearco", [widget_export("daily", export_hour=H)])}

    def prepare_stack(stack):                             # optional: before the companies
        (stack.artifact_root / "x").mkdir(parents=True)

    def test_something(scheduler_stack):
        run = scheduler_stack.wait_for_run("widget_export__clearco__daily")

``COMPANIES`` maps a company id to its file (YAML text or a dict; it may also be a function of
the module's :class:`SlotClock` returning the mapping, called as the module starts: a module
whose exports are daily takes its export hour from it, ``clock.hour``, and its newest due slot,
``clock.newest``; tests read the same clock through the ``clock`` fixture). The module's
companies are written into the running stack (config, loaders, demo rows) and the fixture waits
until Airflow has serialised their DAGs; afterwards they are paused and removed. Settings a
module needs go into its companies' files (``retries``, ``catchup``, ``timeouts``, a
destination's ``retry``), never into the stack's environment, so every module shares one stack.
The stack itself offers what modules read from the environment: an SMTP relay
(``AIRFLOW_CONN_SMTP_DEFAULT``) and a StatsD listener (processes of their own, readable from
every worker: tests/services/spool.py), ``broken_source`` (nothing listens there)
and ``fixture_source`` (a database of the session's PostgreSQL the module fills;
:class:`SharedStack`). A module whose stack must differ in executor or auth manager starts its
own (``tests/system/tenants/``: another auth manager; ``test_runaway.py``: a source seeded
before the stack starts). See ``harness.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.services.postgres import PostgresServer
from tests.system.scheduler.harness import SchedulerStack, SlotClock, dag_ids, report_slot
from tests.system.scheduler.shared import SharedStack, shared_stack_for_run

# A company id belongs to one module: two modules writing the same company would see each
# other's runs in the ledger.
_OWNERS: dict[str, str] = {}


@pytest.fixture(scope="session")
def shared_stack(postgres_server: PostgresServer) -> SharedStack:
    """The run's one shared stack (started by the first worker that asks, stopped by the
    controlling process at the run's end: tests/system/scheduler/shared.py)."""
    return shared_stack_for_run(postgres_server)


@pytest.fixture(scope="module")
def scheduler_stack(request: pytest.FixtureRequest) -> Iterator[SchedulerStack]:
    module = request.module
    companies = getattr(module, "COMPANIES", None)
    if companies is None:
        raise pytest.UsageError(f"{module.__name__} uses scheduler_stack but sets no COMPANIES")
    shared: SharedStack = request.getfixturevalue("shared_stack")
    # The module's slots from the moment it starts writing its companies (not from its import:
    # a module may start many minutes after it was collected).
    clock = SlotClock.starting_now()
    if callable(companies):
        companies = companies(clock)
    for company in companies:
        owner = _OWNERS.setdefault(company, module.__name__)
        if owner != module.__name__:
            raise pytest.UsageError(f"{module.__name__}: company {company!r} is {owner}'s; "
                                    "every module names its own companies")
    stack = shared.stack.scoped(companies, clock)
    prepare = getattr(module, "prepare_stack", None)
    if prepare is not None:
        prepare(stack)
    try:
        for company, config in companies.items():
            stack.write_company(company, config, sync_loaders=False)
        stack.sync_loaders()
        stack.exportctl("demo", "seed", "--config", "dags/config", "--days", "21")
        stack.wait_for_dags(*(dag for company, config in companies.items()
                              for dag in dag_ids(company, config)), timeout=300)
        yield stack
    finally:
        report_slot(module.__name__, clock)
        stack.withdraw(companies)


@pytest.fixture(scope="module")
def clock(scheduler_stack: SchedulerStack) -> SlotClock:
    """The module's daily slots (:class:`SlotClock`), read as its companies were written."""
    assert scheduler_stack.clock is not None
    return scheduler_stack.clock
