"""One real `make run` stack per test module, with the module's own company config.

A module declares what it needs and uses the ``scheduler_stack`` fixture::

    COMPANIES = {"clearco": company_file("clearco", [widget_export("daily", export_hour=H)])}
    STACK_ENV = {"EXPORT_RETRY_DELAY_SECONDS": "5"}      # optional: extra stack environment

    def prepare_stack(stack):                             # optional: before `make run`
        (stack.artifact_root / "x").mkdir(parents=True)

    def test_something(scheduler_stack):
        run = scheduler_stack.wait_for_run("widget_export__clearco__daily")

``COMPANIES`` maps a company id to its file (YAML text or a dict; it may also be a function
returning the mapping). The stack is stopped (and its copy deleted unless ``SCHEDULER_KEEP=1``)
after the module. A test using the fixture is marked ``scheduler`` (and ``slow``) by the root
conftest. See ``tests/system/scheduler/harness.py`` for the API.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.system.scheduler.harness import SchedulerStack, keep_or_remove
from tests.system.soak.stack import scratch_dir


@pytest.fixture(scope="module")
def scheduler_stack(request: pytest.FixtureRequest) -> Iterator[SchedulerStack]:
    module = request.module
    companies = getattr(module, "COMPANIES", None)
    if companies is None:
        raise pytest.UsageError(f"{module.__name__} uses scheduler_stack but sets no COMPANIES")
    if callable(companies):
        companies = companies()
    root = scratch_dir("export-scheduler-")
    stack = SchedulerStack.prepare(root / "project", companies, getattr(module, "STACK_ENV", {}))
    try:
        prepare = getattr(module, "prepare_stack", None)
        if prepare is not None:
            prepare(stack)
        yield stack.start()
    finally:
        try:
            stack.stop()
        finally:
            keep_or_remove(root)
