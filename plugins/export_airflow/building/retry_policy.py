"""Retry policies (Airflow 3.3 ``retry_policy=``) evaluated in the worker at failure time."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import RetryDecision, RetryPolicy

from export_lib import settings
from export_lib.config.operational import TaskRetries
from export_lib.errors import ExportError


class StepRetryPolicy(RetryPolicy):
    """Retry after fixed, growing delays (manual exports: 30 s, 2 min, 10 min — seed 002);
    export errors that a retry cannot fix (config, authorisation, validation, fencing) fail at
    once."""

    def __init__(self, delays: tuple[timedelta, ...]) -> None:
        self.delays = tuple(delays)

    def evaluate(self, exception: BaseException, try_number: int, max_tries: int,
                 context: Any = None) -> RetryDecision:
        if isinstance(exception, ExportError) and not exception.retryable:
            return RetryDecision.fail(f"{type(exception).__name__} is not retryable")
        if try_number > len(self.delays):
            return RetryDecision.fail(f"retry budget of {len(self.delays)} retries used up")
        return RetryDecision.retry(delay=self.delays[try_number - 1],
                                   reason=f"retry {try_number} of {len(self.delays)}")

    def serialize(self) -> dict[str, Any]:
        return {"delays": [d.total_seconds() for d in self.delays]}

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> StepRetryPolicy:
        return cls(tuple(timedelta(seconds=s) for s in data["delays"]))


MANUAL_RETRY = StepRetryPolicy((timedelta(seconds=30), timedelta(minutes=2), timedelta(minutes=10)))


def _doubled(base: timedelta, cap: timedelta, doublings: int) -> timedelta:
    """``base * 2**doublings``, at most ``cap``: doubled step by step and never past the cap (a
    short cap over a long window means hundreds of tries; ``base * 2**40`` overflows)."""
    wait = base
    for _ in range(doublings):
        if wait >= cap:
            break
        wait *= 2
    return min(wait, cap)


class DeliveryWindowPolicy(RetryPolicy):
    """Deliveries retry until their window closes (ADR 0003 §6): ``base`` doubling, capped at
    ``cap``, and never past the window's end — the ledger put it on the error
    (``DeliveryError.retry_until``), so the last try lands when the window closes and the
    ledger, not an attempt count, decides exhaustion (it then raises a non-retryable error).

    ``destinations`` maps a destination id to its own ``(base, cap)`` (its ``retry:`` in the
    config, ADR 0015); the mapped ``deliver`` task's ``destination_id`` picks it at failure
    time, any other destination gets ``base`` and ``cap``.
    """

    def __init__(self, base: timedelta, cap: timedelta,
                 destinations: Mapping[str, tuple[timedelta, timedelta]] | None = None) -> None:
        self.base, self.cap = base, cap
        self.destinations = dict(sorted((destinations or {}).items()))

    def pacing(self, destination_id: str | None = None) -> tuple[timedelta, timedelta]:
        """``(base, cap)`` of ``destination_id``'s retries."""
        return self.destinations.get(destination_id or "", (self.base, self.cap))

    def delay(self, try_number: int, retry_until: datetime | None, now: datetime,
              destination_id: str | None = None) -> timedelta:
        """The wait before try ``try_number + 1``."""
        wait = _doubled(*self.pacing(destination_id), max(try_number - 1, 0))
        if retry_until is not None and retry_until > now:
            wait = min(wait, retry_until - now + timedelta(seconds=1))
        return max(wait, timedelta(seconds=1))

    def evaluate(self, exception: BaseException, try_number: int, max_tries: int,
                 context: Any = None) -> RetryDecision:
        if isinstance(exception, ExportError) and not exception.retryable:
            return RetryDecision.fail(f"{type(exception).__name__} is not retryable")
        until = getattr(exception, "retry_until", None)
        task = context.get("task") if context is not None else None
        wait = self.delay(try_number, until, datetime.now(UTC),
                          getattr(task, "destination_id", None))
        window = f"; window closes {until:%Y-%m-%dT%H:%M:%SZ}" if until else ""
        return RetryDecision.retry(delay=wait, reason=f"retry in {wait}{window}")

    def retries_for(self, window: timedelta, destination_id: str | None = None) -> int:
        """Enough retries for the backoff schedule to outlast ``window`` (plus one at its end)."""
        base, cap = self.pacing(destination_id)
        total, tries = timedelta(0), 0
        while total < window:
            total += _doubled(base, cap, tries)
            tries += 1
        return tries + 1

    def serialize(self) -> dict[str, Any]:
        return {"base": self.base.total_seconds(), "cap": self.cap.total_seconds(),
                "destinations": {d: [b.total_seconds(), c.total_seconds()]
                                 for d, (b, c) in self.destinations.items()}}

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> DeliveryWindowPolicy:
        return cls(timedelta(seconds=data["base"]), timedelta(seconds=data["cap"]),
                   {d: (timedelta(seconds=b), timedelta(seconds=c))
                    for d, (b, c) in data.get("destinations", {}).items()})


def delivery_policy(schedule: Any = None) -> DeliveryWindowPolicy:
    """The deliver tasks' retry schedule: 10 minutes doubling, at most 6 h between tries, until
    the delivery's window closes. The deployment's ``EXPORT_DELIVERY_RETRY_BASE_SECONDS``
    (else ``EXPORT_RETRY_DELAY_SECONDS``, else 600) and ``EXPORT_DELIVERY_RETRY_CAP_SECONDS``
    (21600) change it for every destination; a destination's ``retry: {base, cap}`` for its own
    deliveries (ADR 0015; the newest version that has the destination decides)."""
    base, cap = settings.delivery_retry_base(), settings.delivery_retry_cap()
    own: dict[str, tuple[timedelta, timedelta]] = {}
    for version in schedule.versions if schedule is not None else ():
        for destination in version.destinations:
            if destination.retry is not None:
                mine = destination.retry.base or base
                own[destination.id] = (mine, max(destination.retry.cap or cap, mine))
            else:
                own.pop(destination.id, None)
    return DeliveryWindowPolicy(base, max(cap, base), own)


def retry_args(schedule: Any) -> dict[str, Any]:
    """Seed 000: retry every 10 minutes, doubling, inside a 5-day window (24 h cap per wait:
    10+20+…+1280 min, then 1440 min twice = 4.8 days over 11 retries). An export's
    ``retries: {count, delay, max_delay}`` sets its own (ADR 0015); what it leaves out is the
    deployment's: ``EXPORT_RETRIES``, ``EXPORT_RETRY_DELAY_SECONDS``,
    ``EXPORT_MAX_RETRY_DELAY_SECONDS`` (Airflow's backoff counts every try of a cleared task,
    so its retries after a clear start at 2**4 times the first delay)."""
    own = schedule.policies.retries or TaskRetries()
    return {
        "retries": own.count if own.count is not None else settings.task_retries(),
        "retry_delay": own.delay or settings.retry_delay(),
        "retry_exponential_backoff": 2.0,
        "max_retry_delay": own.max_delay or settings.max_retry_delay(),
    }
