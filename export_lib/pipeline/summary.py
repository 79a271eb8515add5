"""What the start of a run hands to the next stage: a typed, frozen summary that survives XCom.

The window travels as one value (:class:`~export_lib.periods.windows.ExportWindow`, the one
window type, with its invariants), never as loose keys, so a stage downstream cannot
pair the start of one window with the end of another. ``as_xcom()`` gives plain JSON types;
``from_xcom()`` reads them back (and rejects anything else, naming the field).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from export_lib.errors import ExportError
from export_lib.periods.windows import ExportWindow


class RunSummary(BaseModel):
    """The run of one slot (or one manual request) after the start policies were applied.

    ``skip_reason`` is set when the run must not export (a paused company, ``late_start: skip``,
    a run that was already skipped or cancelled); the Airflow edge skips its task with it and
    ``exportctl run`` reports it, with the same words, because both read it from here.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_key: str
    created: bool
    state: str
    company: str
    schedule_id: str
    slot: datetime
    window: ExportWindow
    config_version: str
    deadline: datetime | None = None
    artifact_version: int | None = None
    skip_reason: str | None = None
    late_reason: str | None = None
    missed_recorded: int = 0
    destinations: tuple[str, ...] = ()

    def as_xcom(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_xcom(cls, value: Any) -> RunSummary:
        if isinstance(value, cls):
            return value
        try:
            return cls.model_validate(value)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                 for e in exc.errors())
            raise ExportError(f"the run summary handed between tasks is not readable "
                              f"({problems}); clear the resolve_window task to rebuild it") from exc

    def log_fields(self) -> tuple[str, str, str]:
        """``company``, ``schedule`` and ``period`` for a log line."""
        return self.company, self.schedule_id, self.window.period

    def log_context(self) -> dict[str, str]:
        """The run's log fields (``with run_context(**summary.log_context()):``)."""
        return {"company": self.company, "schedule": self.schedule_id, "run": self.run_key,
                "period": self.window.period, "status": self.state}
