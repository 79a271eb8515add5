"""Scheduler tests: shared `make run` stacks (``EXPORT_TEST_SHARED_STACKS``, 2 by default, each
serving a group of modules one after the other on one pytest worker; tests/support/workload.py),
each module with its own uniquely named companies in it.

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
(``AIRFLOW_CONN_SMTP_DEFAULT``), a StatsD listener, ``broken_source`` (nothing listens there)
and ``fixture_source`` (a database of the session's PostgreSQL the module fills;
:class:`SharedStack`). A module whose stack must differ in executor or auth manager starts its
own (``test_tenants_and_secrets.py``: another auth manager; ``test_runaway.py``: a source seeded
before the stack starts). See ``harness.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.services.ports import free_port
from tests.services.postgres import PostgresServer, scratch_database
from tests.services.smtp import SmtpRelay, start_smtp, stop_smtp
from tests.system.scheduler.harness import (
    SchedulerStack,
    SlotClock,
    StatsdListener,
    dag_ids,
    keep_or_remove,
    report_slot,
)
from tests.system.soak.stack import scratch_dir

# A company id belongs to one module: two modules writing the same company would see each
# other's runs in the ledger.
_OWNERS: dict[str, str] = {}


@dataclass
class SharedStack:
    """The worker's stack and the servers it was started with."""

    stack: SchedulerStack
    relay: SmtpRelay
    statsd: StatsdListener
    fixture_dsn: str


# Package scope: the stack stops after the last module of its group (tests/support/workload.py
# keeps a group's modules together on one worker), not at the session's end.
@pytest.fixture(scope="package")
def shared_stack(request: pytest.FixtureRequest, postgres_server: PostgresServer
                 ) -> Iterator[SharedStack]:
    relay, statsd = start_smtp(), StatsdListener()
    root = scratch_dir("export-shared-")
    try:
        with scratch_database(postgres_server, "fixtures") as dsn:
            env = {
                "AIRFLOW_CONN_SMTP_DEFAULT": f"smtp://127.0.0.1:{relay.port}/?from_email=airflow"
                                            "%40example.com&disable_ssl=true&disable_tls=true"
                                            "&retry_limit=0&timeout=10",
                "AIRFLOW_CONN_BROKEN_SOURCE": f"postgresql://exports:exports@127.0.0.1:"
                                              f"{free_port()}/demo?connect_timeout=3",
                "AIRFLOW_CONN_FIXTURE_SOURCE": dsn,
                "AIRFLOW__METRICS__STATSD_ON": "True",
                "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
                "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port),
                "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
                # New files are found within 5 s; a changed company's loader is touched
                # (harness.write_company; every loader when defaults.yaml changes). Otherwise
                # every 30 s as in make run: re-parsing every file every 10 s cost CPU the suite
                # is short of. 300 s failed test_delivery_window (3 Dec: "the edited config to
                # be parsed" not within 60 s): the touch alone does not bring the re-parse.
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                # Our task log lines carry company/schedule/run/period as keys of Airflow's
                # records (issue 22 item 5; test_clear_and_retry reads them back). The
                # messages stay as in text mode, so every other module reads the same logs.
                "EXPORT_LOG_FORMAT": "json",
                # Modules write companies into the running stack: under FAB each would wait
                # for its roles (python -m export_airflow.access sync). Company scoping is
                # tested on the FAB stacks of test_tenants_and_secrets and the cluster.
                "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple."
                                               "simple_auth_manager.SimpleAuthManager",
                "EXPORT_UI_ALLOW_UNSCOPED_AUTH": "true",
            }
            stack = SchedulerStack.prepare(root / "project", {}, env)
            stack.add_sources(broken_source={"widget_metrics": "company_id"})
            failed_before = request.session.testsfailed
            try:
                yield SharedStack(stack.start(), relay, statsd, dsn)
            finally:
                try:
                    stack.stop()
                finally:
                    keep_or_remove(root, failed=request.session.testsfailed > failed_before)
    finally:
        statsd.stop()
        stop_smtp(relay)


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
