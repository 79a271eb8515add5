"""The render budget's claim is atomic: many claims racing at once (threads, each with its own
engine, as separate workers would) admit exactly the budget, on PostgreSQL and on SQLite."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from export_lib.errors import RenderBudgetError
from export_lib.ledger import open_ledger
from export_lib.ledger.budget import RenderBudget
from tests.fixtures.ledger import NOW, registration
from tests.support.leases import lapse_leases

BUDGET = RenderBudget(total=4, per_company=2)


def race(ledger, keys: list[str]) -> tuple[list[str], list[str]]:
    """Claim every key at the same instant from its own thread; (admitted, refused)."""
    admitted, refused = [], []
    barrier = threading.Barrier(len(keys))

    def claim(key: str) -> None:
        own = open_ledger(ledger.url)
        barrier.wait()
        try:
            own.claim_attempt(key, origin="race", now=NOW, budget=BUDGET,
                              staging_uri=lambda a: f"file:///staging/{a}")
            admitted.append(key)
        except RenderBudgetError:
            refused.append(key)
        finally:
            own.engine.dispose()

    threads = [threading.Thread(target=claim, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return admitted, refused


def register(ledger, company: str, count: int) -> list[str]:
    keys = []
    for i in range(count):
        reg = replace(registration(f"{company}/daily/{i}"), company=company,
                      schedule_id=f"{company}/daily")
        keys.append(ledger.register(reg, NOW)[0].run_key)
    return keys


@pytest.mark.parametrize("backend", ["pg_ledger", "sqlite_ledger"])
def test_racing_claims_admit_exactly_the_budget(backend, request):
    ledger = request.getfixturevalue(backend)
    keys = register(ledger, "acme", 4) + register(ledger, "globex", 4) + register(ledger, "kiwi", 4)
    admitted, refused = race(ledger, keys)
    assert len(admitted) == 4 and len(refused) == 8
    live = ledger.live_renders()
    assert sum(live.values()) == 4 and max(live.values()) <= 2
    # A lease that runs out gives its place back (a worker killed without a word).
    assert lapse_leases(ledger) == 4
    assert ledger.live_renders() == {}


@pytest.mark.parametrize("backend", ["pg_ledger", "sqlite_ledger"])
def test_one_company_never_takes_more_than_two(backend, request):
    ledger = request.getfixturevalue(backend)
    admitted, refused = race(ledger, register(ledger, "acme", 6))
    assert (len(admitted), len(refused)) == (2, 4)
    # Finishing (here: failing) a render frees its place at once.
    ledger.fail(admitted[0], ledger.attempts(admitted[0])[0].attempt_id, "done", NOW)
    assert ledger.live_renders() == {"acme": 1}
