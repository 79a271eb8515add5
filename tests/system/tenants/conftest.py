"""The modules of this folder share one `make run` stack with the FAB auth manager:
tenant_stack.py says what it holds and why one for all."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.system.tenants.tenant_stack import World, tenant_world


@pytest.fixture(scope="package")
def world() -> Iterator[World]:
    with tenant_world() as started:
        yield started
