"""The system tier's stacks share the session's PostgreSQL server.

``Stack.in_copy`` (tests/system/soak/stack.py) gives every stack its own databases there,
cloned from templates migrated once per session, instead of an ``initdb``-ed cluster of its own
(``local_pg=True`` keeps that, for the tests of the local cluster itself).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.services.postgres import PostgresServer
from tests.system.soak.stack import use_session_postgres


@pytest.fixture(scope="session", autouse=True)
def stacks_on_the_session_postgres(postgres_server: PostgresServer) -> Iterator[None]:
    use_session_postgres(postgres_server)
    try:
        yield
    finally:
        use_session_postgres(None)
