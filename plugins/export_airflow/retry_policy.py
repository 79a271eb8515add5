"""Retry policies (Airflow 3.3 ``retry_policy=``) evaluated in the worker at failure time."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk.definitions.retry_policy import RetryDecision, RetryPolicy

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
