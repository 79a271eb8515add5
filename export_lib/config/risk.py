"""``at_risk:`` of an export (ADR 0020): when a run that has not delivered yet
is *at risk* of missing its deadline, and whether that alerts.

* ``after`` — the **risk point**, measured from the slot: a share of the deadline (``"50%"``,
  1–99 %) or a duration shorter than the deadline (``"45m"``). Left out: the *automatic* risk
  point, half the deadline or the schedule's median slot→delivery time if that is longer,
  never later than the deadline (``export_lib.views.risk.risk_offset``).
* ``alert`` — announce an at-risk run once through the alert notifier (default ``true``).

Operational like ``retries`` (ADR 0015): not part of ``config_version``, DAG-wide, merged key
by key over ``defaults.yaml``'s ``policies:``.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from pydantic import Field, field_validator

from export_lib.config.durations import DURATION_PATTERN, parse_duration, short
from export_lib.config.limits import StrictBool, shown
from export_lib.config.messages import invalid
from export_lib.config.timing import FrozenModel

_SHARE = re.compile(r"^\s*(\d{1,2})\s*%\s*$")
# For an editor: a share or a duration (export_lib.config.durations); the bounds are checked here.
AFTER_PATTERN = r"^\s*\d{1,2}\s*%\s*$|" + DURATION_PATTERN[1:]
AFTER_HELP = ("give a share of the deadline such as '50%' (1-99 %), a duration shorter than "
              "the deadline such as '45m', or leave it out for the automatic risk point (half "
              "the deadline, or the schedule's median delivery time if longer)")


class AtRisk(FrozenModel):
    """``at_risk: {after, alert}``; ``after`` is kept as written (``"50%"`` or ``"45m"``)."""

    after: str | None = Field(None, description="The risk point after the slot: a share of "
                              "the deadline (1% to 99%) or a duration shorter than the deadline; "
                              "left out: half the deadline, or the median delivery time if "
                              "longer.", examples=["50%"],
                              json_schema_extra={"pattern": AFTER_PATTERN})
    alert: StrictBool = Field(True, description="Announce an at-risk run once through the "
                              "alert notifier.")

    @field_validator("after", mode="before")
    @classmethod
    def _after(cls, value: Any) -> str | None:
        if value is None:
            return None
        if isinstance(value, str) and _SHARE.match(value):
            percent = int(_SHARE.match(value).group(1))  # type: ignore[union-attr]
            if not 1 <= percent <= 99:
                raise invalid("at_risk", f"at_risk.after {shown(value)} is out of range; "
                              f"{AFTER_HELP}")
            return f"{percent}%"
        try:
            duration = parse_duration(value)
            if isinstance(duration, str):  # ISO 8601: let pydantic's own parser read it
                from pydantic import TypeAdapter

                duration = TypeAdapter(timedelta).validate_python(duration)
        except Exception:  # noqa: BLE001 - one message for every unreadable value
            raise invalid("at_risk", f"at_risk.after {shown(value)} is not a share or a "
                          f"duration; {AFTER_HELP}") from None
        if duration <= timedelta(0):
            raise invalid("at_risk", f"at_risk.after {shown(value)} must be after the slot; "
                          f"{AFTER_HELP}")
        return short(duration)

    @property
    def share(self) -> float | None:
        """``0.5`` for ``"50%"``; None for a duration or the automatic point."""
        return int(self.after[:-1]) / 100 if self.after and self.after.endswith("%") else None

    @property
    def duration(self) -> timedelta | None:
        """The fixed duration after the slot; None for a share or the automatic point."""
        if not self.after or self.after.endswith("%"):
            return None
        return parse_duration(self.after)

    def check_deadline(self, deadline: timedelta) -> None:
        """A duration risk point must come before the deadline (else it would never show)."""
        if self.duration is not None and self.duration >= deadline:
            raise invalid("at_risk", f"at_risk.after {self.after} is not before the deadline "
                          f"{short(deadline)}; give a shorter duration or a share such as "
                          "'50%'")


__all__ = ["AFTER_HELP", "AtRisk"]
