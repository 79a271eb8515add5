"""Per-export operational settings (ADR 0015): how hard and how long the export's tasks try,
not what they export or when.

* ``retries: {count, delay, max_delay}`` — Airflow retries of the export's tasks (resolve,
  sensor, render, publish, ...; ``delay`` doubling up to ``max_delay``). The ``deliver`` tasks
  follow their destinations' ``retry`` and ``retry_window`` instead.
* ``timeouts: {resolve, sensor, render, publish, deliver, small}`` — each task kind's
  ``execution_timeout`` (``sensor``: per poke; ``small``: the ``destinations`` and
  ``restate_later`` bookkeeping tasks).
* ``catchup: {lookback}`` — how far back ``recover_missed`` looks for missed slots at least
  (``0s``: only back to the previous run).
* ``late_data.poke_interval`` (:class:`export_lib.config.models.LateData`) — how often
  ``wait_for_watermark`` looks at the source's watermark.
* a destination's ``retry: {base, cap}`` — the pacing of its deliveries' retries.

Every field is optional: a field left out takes the deployment default, which is the
environment variable the deployment sets (``EXPORT_RETRIES``, ``EXPORT_TIMEOUT_RENDER``, ...),
else the seed default. They are not timing keys (they do not decide a slot or a window) and not
part of ``config_version`` (they change how Airflow runs the tasks from the next parse on, for
every run, which a version per slot could not honour); a run's config snapshot still records
them. They apply to one DAG as a whole, so a ``history`` entry cannot set them
(:data:`export_lib.config.versions.DAG_WIDE_KEYS`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import Field, field_validator, model_validator

from export_lib.config.durations import Duration, short
from export_lib.config.limits import StrictInt, shown
from export_lib.config.messages import invalid
from export_lib.config.timing import FrozenModel

# The export-level keys (``late_data.poke_interval`` and a destination's ``retry`` live in
# their own blocks).
OPERATIONAL_KEYS = ("retries", "timeouts", "catchup", "at_risk")  # at_risk: ADR 0020
MAX_RETRIES = 100  # 10 min doubling, capped at 1 day: 100 retries are three months of trying
TIMEOUT_KINDS = ("resolve", "sensor", "render", "publish", "deliver", "small")


def _timeout(kind: str, default: str) -> str:
    return (f"The execution_timeout of the {kind} task; left out: "
            f"EXPORT_TIMEOUT_{kind.split()[0].upper()}, else {default}.")


def positive(field: str, value: timedelta | None, example: str) -> timedelta | None:
    """``value`` if it is above zero (None passes: the deployment default applies)."""
    if value is not None and value <= timedelta(0):
        raise invalid("duration", f"{field} must be longer than zero (got {short(value)}); "
                      f"give e.g. '{example}', or leave it out for the deployment default")
    return value


def _cap_not_below(names: tuple[str, str], base: timedelta | None, cap: timedelta | None) -> None:
    if base is not None and cap is not None and cap < base:
        raise invalid("order", f"{names[1]} {short(cap)} is shorter than {names[0]} "
                      f"{short(base)}; make {names[1]} at least {short(base)} (the longest wait "
                      f"between two tries), or lower {names[0]}")


class TaskRetries(FrozenModel):
    """``retries:`` of an export's tasks: ``count`` retries, the first after ``delay``, each
    next one doubling, never more than ``max_delay`` apart."""

    count: StrictInt | None = Field(None, description=f"How many retries (0 to {MAX_RETRIES}); "
                                    "left out: EXPORT_RETRIES, else 11.", examples=[3],
                                    json_schema_extra={"minimum": 0, "maximum": MAX_RETRIES})
    delay: Duration | None = Field(None, description="The wait before the first retry, "
                                   "doubling each time; left out: EXPORT_RETRY_DELAY_SECONDS, "
                                   "else 10m.", examples=["5m"])
    max_delay: Duration | None = Field(None, description="The longest wait between two tries; "
                                       "left out: EXPORT_MAX_RETRY_DELAY_SECONDS, else 1d.",
                                       examples=["6h"])

    @field_validator("count")
    @classmethod
    def _count_in_range(cls, value: int | None) -> int | None:
        if value is not None and not 0 <= value <= MAX_RETRIES:
            raise invalid("retries", f"retries.count {shown(value)} is out of range; give a "
                          f"whole number from 0 (no retry) to {MAX_RETRIES}")
        return value

    @field_validator("delay", "max_delay")
    @classmethod
    def _positive(cls, value: timedelta | None, info: Any) -> timedelta | None:
        return positive(f"retries.{info.field_name}", value, "30s")

    @model_validator(mode="after")
    def _ordered(self) -> TaskRetries:
        _cap_not_below(("retries.delay", "retries.max_delay"), self.delay, self.max_delay)
        return self


class TaskTimeouts(FrozenModel):
    """``timeouts:``: the ``execution_timeout`` of each task kind of the export."""

    resolve: Duration | None = Field(None, description=_timeout("resolve", "10m"),
                                     examples=["10m"])
    sensor: Duration | None = Field(None, description=_timeout("sensor (per poke)", "10m"),
                                    examples=["10m"])
    render: Duration | None = Field(None, description=_timeout("render", "1h"),
                                    examples=["2h"])
    publish: Duration | None = Field(None, description=_timeout("publish", "30m"),
                                     examples=["30m"])
    deliver: Duration | None = Field(None, description=_timeout("deliver", "1h"),
                                     examples=["1h"])
    small: Duration | None = Field(None, description=_timeout(
        "small (the destinations and restate_later bookkeeping tasks)", "5m"), examples=["5m"])

    @field_validator(*TIMEOUT_KINDS)
    @classmethod
    def _positive(cls, value: timedelta | None, info: Any) -> timedelta | None:
        if value is not None and value <= timedelta(0):
            raise invalid("duration", f"timeouts.{info.field_name} must be longer than zero "
                          f"(got {short(value)}); every export task needs a time limit: give "
                          "e.g. '90m', or leave it out for the deployment default")
        return value

    def get(self, kind: str) -> timedelta | None:
        """The configured timeout of ``kind`` (a :data:`TIMEOUT_KINDS` name), or None."""
        return getattr(self, kind)


class Catchup(FrozenModel):
    """``catchup:``: ``lookback`` is how far before its own slot a scheduled run looks for
    missed slots at least (it always reaches back to the previous run after an outage);
    ``batch_over`` how many missed periods it recovers one backfill run each (ADR 0032)."""

    lookback: Duration | None = Field(None, description="How far before its own slot a run "
                                      "looks for missed slots at least (0s: only back to the "
                                      "previous run); left out: EXPORT_CATCHUP_LOOKBACK_HOURS, "
                                      "else 48h.", examples=["72h"])
    batch_over: int | None = Field(None, description="More missed periods than this "
                                   "are recovered in batches, each batch one task exporting "
                                   "many periods (each with its own run, artifact and "
                                   "deliveries), instead of one backfill run per period; left "
                                   "out: EXPORT_BATCH_RECOVERY_THRESHOLD, else 8.",
                                   examples=[8])

    @field_validator("lookback")
    @classmethod
    def _not_negative(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value < timedelta(0):
            raise invalid("duration", f"catchup.lookback cannot be negative (got "
                          f"{short(value)}); give e.g. '48h', or '0s' to look back only to the "
                          "previous run")
        return value

    @field_validator("batch_over")
    @classmethod
    def _not_negative_count(cls, value: int | None) -> int | None:
        if value is not None and value < 0:
            raise invalid("count", f"catchup.batch_over cannot be negative (got {value}); give "
                          "e.g. 8 (0: every recovery in batches), or leave it out for the "
                          "deployment default")
        return value


class DeliveryRetry(FrozenModel):
    """A destination's ``retry:``: its failed deliveries are tried again after ``base``,
    doubling, never more than ``cap`` apart, until its ``retry_window`` closes."""

    base: Duration | None = Field(None, description="The wait before the first delivery "
                                  "retry, doubling; left out: "
                                  "EXPORT_DELIVERY_RETRY_BASE_SECONDS, else 10m.",
                                  examples=["10m"])
    cap: Duration | None = Field(None, description="The longest wait between two delivery "
                                 "tries; left out: EXPORT_DELIVERY_RETRY_CAP_SECONDS, else 6h.",
                                 examples=["6h"])

    @field_validator("base", "cap")
    @classmethod
    def _positive(cls, value: timedelta | None, info: Any) -> timedelta | None:
        return positive(f"retry.{info.field_name}", value, "10m")

    @model_validator(mode="after")
    def _ordered(self) -> DeliveryRetry:
        _cap_not_below(("retry.base", "retry.cap"), self.base, self.cap)
        return self


def check_poke_interval(value: timedelta | None) -> timedelta | None:
    """``late_data.poke_interval``: above zero when set."""
    return positive("late_data.poke_interval", value, "5m")


__all__ = ["MAX_RETRIES", "OPERATIONAL_KEYS", "TIMEOUT_KINDS", "Catchup", "DeliveryRetry", "TaskRetries",
           "TaskTimeouts", "check_poke_interval", "positive"]
