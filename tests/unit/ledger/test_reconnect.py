"""Which driver errors mean "the ledger is not there", and how long a call waits for it
(export_lib/ledger/reconnect.py; a real restart: tests/integration/ledger/test_ledger_restart.py)."""

from __future__ import annotations

import logging

import psycopg
import pytest
from psycopg import errors as pg
from sqlalchemy.exc import OperationalError

from export_lib.errors import LedgerError, LedgerUnavailable
from export_lib.ledger.reconnect import is_unavailable, ledger_error, reconnecting

URL = "postgresql+psycopg://exports:s3cret@db.internal:5432/exports"


def _driver(orig: Exception) -> OperationalError:
    return OperationalError("SELECT 1", {}, orig)


@pytest.mark.parametrize(("orig", "unavailable"), [
    (psycopg.OperationalError("connection failed: Connection refused\nIs the server running?"),
     True),
    (pg.AdminShutdown("terminating connection due to administrator command"), True),
    (pg.CannotConnectNow("the database system is starting up"), True),
    (pg.ConnectionFailure("connection failure"), True),
    (pg.QueryCanceled("canceling statement due to statement timeout"), False),
    (pg.LockNotAvailable("could not obtain lock"), False),
])
def test_only_a_server_that_is_not_there_is_unavailable(orig, unavailable):
    error = ledger_error(URL, _driver(orig))
    assert is_unavailable(_driver(orig)) is unavailable
    assert isinstance(error, LedgerUnavailable) is unavailable and isinstance(error, LedgerError)
    assert "\n" not in str(error) and "s3cret" not in str(error)
    if unavailable:
        assert str(error).startswith("the export ledger at postgresql://db.internal:5432 is "
                                     "unavailable: ")


class Clock:
    """Monotonic seconds that move only when slept."""

    def __init__(self) -> None:
        self.now, self.pauses = 0.0, []

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def _failing(times: int, clock: Clock):
    calls = []

    def call() -> str:
        calls.append(clock())
        if len(calls) <= times:
            raise LedgerUnavailable("the export ledger at db:5432 is unavailable: refused")
        return "answer"

    return call, calls


def test_a_call_waits_a_restart_out_with_growing_pauses(caplog):
    clock = Clock()
    call, calls = _failing(5, clock)
    with caplog.at_level(logging.WARNING, logger="export_lib"):
        assert reconnecting(call, what="ledger get_run", seconds=60, sleep=clock.sleep,
                            clock=clock) == "answer"
    assert len(calls) == 6
    assert all(0.25 <= p <= 5 for p in clock.pauses)
    assert clock.pauses[-1] > clock.pauses[0]  # backoff, jittered
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == ("ledger get_run: the export ledger at db:5432 is unavailable: "
                           "refused; reconnecting for up to 60 s")
    assert messages[-1].startswith("ledger get_run: the export ledger answered again after ")


def test_a_call_gives_up_with_one_line_when_its_budget_is_spent():
    clock = Clock()
    call, calls = _failing(10_000, clock)
    with pytest.raises(LedgerUnavailable, match=r"^the export ledger at db:5432 is unavailable: "
                       r"refused; ledger advance gave up after 20 s of reconnecting "
                       r"\(EXPORT_LEDGER_RECONNECT_SECONDS=20\); the task's retry continues "
                       r"from what the ledger holds$"):
        reconnecting(call, what="ledger advance", seconds=20, sleep=clock.sleep, clock=clock)
    assert clock() == pytest.approx(20)  # the last pause ends with the budget


def test_a_call_that_must_not_repeat_fails_at_once_and_nested_calls_wait_once():
    clock = Clock()
    call, calls = _failing(1, clock)
    with pytest.raises(LedgerUnavailable, match=r"unavailable: refused$"):
        reconnecting(call, what="ledger publish", seconds=20, again=lambda: False,
                     sleep=clock.sleep, clock=clock)
    assert len(calls) == 1 and clock.pauses == []
    inner, inner_calls = _failing(1, clock)
    outer = lambda: reconnecting(inner, what="inner", seconds=20, sleep=clock.sleep,  # noqa: E731
                                 clock=clock)
    assert reconnecting(outer, what="outer", seconds=20, sleep=clock.sleep,
                        clock=clock) == "answer"
    assert len(inner_calls) == 2 and len(clock.pauses) == 1  # the outer call's one pause


def test_the_setting_bounds_the_wait(monkeypatch):
    monkeypatch.setenv("EXPORT_LEDGER_RECONNECT_SECONDS", "0")
    clock = Clock()
    call, _ = _failing(1, clock)
    with pytest.raises(LedgerUnavailable, match=r"gave up after 0 s of reconnecting "
                       r"\(EXPORT_LEDGER_RECONNECT_SECONDS=0\)"):
        reconnecting(call, what="ledger get_run", sleep=clock.sleep, clock=clock)
    monkeypatch.setenv("EXPORT_LEDGER_RECONNECT_SECONDS", "soon")
    from export_lib.errors import ConfigError

    with pytest.raises(ConfigError, match=r"EXPORT_LEDGER_RECONNECT_SECONDS: 'soon' is not a "
                       r"whole number of seconds >= 0; unset it for the default \(60\)"):
        reconnecting(call, what="ledger get_run", sleep=clock.sleep, clock=clock)
