"""A timing edit from plan to file to audit trail: the one code path of ``exportctl reschedule
--apply`` and the company page's "Change the export time" (ADR 0005 as amended).

:func:`prepare_reschedule` reads the company file, plans the switch
(:func:`~export_lib.pipeline.reschedule.plan_reschedule`) and makes the edited text (comments
kept, ``export_lib.config.edits``); :func:`check_edit` validates the directory with it without
writing; :func:`apply_reschedule` writes it (validated first, so a rejected edit leaves the
file untouched) and, given a ledger, records who changed what, before and after, in the
operator actions' audit trail (``action`` ``reschedule``), which the company page lists as the
company's history. Where the config directory cannot be written (a read-only mount, configs
managed in git) the page shows :attr:`RescheduleEdit.diff`, the exact change to commit.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from export_lib.errors import ConfigError
from export_lib.periods.instants import format_instant
from export_lib.pipeline.reschedule import ReschedulePlan, new_timing, plan_reschedule

if TYPE_CHECKING:
    from export_lib.ledger import Ledger
    from export_lib.ledger.controls import Action

ACTION = "reschedule"


@dataclass(frozen=True)
class RescheduleEdit:
    """The plan and the file it changes: ``before`` (the file now) and ``after`` (edited)."""

    plan: ReschedulePlan
    path: Path
    before: str
    after: str

    @property
    def diff(self) -> str:
        """The change to commit, as a unified diff of the company file."""
        name = self.path.name
        return "".join(difflib.unified_diff(self.before.splitlines(keepends=True),
                                            self.after.splitlines(keepends=True),
                                            f"a/{name}", f"b/{name}"))

    @property
    def change_text(self) -> str:
        """One line: each timing key before → after, from the switch instant."""
        changes = ", ".join(f"{k} {old!r} → {new!r}" for k, (old, new)
                            in self.plan.changes.items())
        return (f"{self.plan.schedule.schedule_id}: {changes} from "
                f"{format_instant(self.plan.effective_from)}")

    def as_json(self) -> dict[str, Any]:
        plan = self.plan
        return {
            "schedule": plan.schedule.schedule_id,
            "changes": {k: {"old": o, "new": n} for k, (o, n) in plan.changes.items()},
            "effective_from": format_instant(plan.effective_from),
            "old_next": [format_instant(s) for s in plan.old_next],
            "new_next": [format_instant(s) for s in plan.new_next],
            # The new timeline's zone: a timezone change shows both sides in the new one.
            "old_next_local": [f"{s.astimezone(plan.timeline.zone):%Y-%m-%d %H:%M %Z}"
                               for s in plan.old_next],
            "new_next_local": [f"{s.astimezone(plan.timeline.zone):%Y-%m-%d %H:%M %Z}"
                               for s in plan.new_next],
            "periods": [{"slot": format_instant(p.slot), "timing": p.timing, "period": p.period,
                         "outcome": p.outcome} for p in plan.periods],
            "uncovered": list(plan.holes), "reported_twice_sent_once": len(plan.twice),
            "file": self.path.name, "diff": self.diff,
        }


def company_path(config_dir: Path, company: str) -> Path:
    """The company's file (``<id>.yaml`` or ``<id>.yml``)."""
    for path in (config_dir / f"{company}.yaml", config_dir / f"{company}.yml"):
        if path.exists():
            return path
    raise ConfigError(f"{config_dir}: no file {company}.yaml for company {company!r}")


def prepare_reschedule(config_dir: Path, schedule_id: str, changes: dict[str, Any], *,
                       now: datetime, newest_run: datetime | None = None,
                       effective_from: datetime | None = None) -> RescheduleEdit:
    """The plan of moving ``schedule_id`` to ``changes`` (timing keys; None values ignored)
    and the edited company file. ConfigError (naming the field and the fix) when the company
    file has errors, the change is not valid, or it changes nothing."""
    from export_lib.config.edits import timing_edit_text
    from export_lib.ledger.seniority import open_catalog

    config_dir = Path(config_dir)
    catalog = open_catalog(config_dir)
    schedule = catalog.schedule(schedule_id)
    path = company_path(config_dir, schedule.company.id)
    company_errors = catalog.errors.get(str(path))
    if company_errors:
        raise ConfigError("fix the company file first:\n" + "\n".join(company_errors),
                          issues=list(company_errors))
    timing = new_timing(schedule, **changes)
    plan = plan_reschedule(schedule, timing, now=now, newest_run=newest_run,
                           effective_from=effective_from)
    before = path.read_text()
    after = timing_edit_text(
        before, kind=schedule.kind, ident=schedule.export_id or schedule.channel or "",
        data_kind=None if schedule.kind == "widget" else schedule.kind,
        new={k: n for k, (_, n) in plan.changes.items()},
        old={k: o for k, (o, _) in plan.changes.items()}, effective_from=plan.effective_from)
    return RescheduleEdit(plan=plan, path=path, before=before, after=after)


def check_edit(config_dir: Path, edit: RescheduleEdit) -> None:
    """ConfigError unless the directory validates with the edit (nothing is written)."""
    from export_lib.config.edits import validate_edit

    validate_edit(Path(config_dir), edit.path, edit.after)


def writable(config_dir: Path) -> bool:
    """Can the config directory be written here? False when ``EXPORT_CONFIG_READ_ONLY`` says
    it is managed elsewhere, on a read-only mount (``access`` answers that even for root) or
    without write permission."""
    from export_lib import settings

    return not settings.config_read_only() and os.access(Path(config_dir), os.W_OK)


def apply_reschedule(config_dir: Path, edit: RescheduleEdit, *, ledger: Ledger | None = None,
                     who: str = "", why: str = "", now: datetime | None = None) -> Action | None:
    """Write the edit (validated first; ConfigError and the file untouched when it does not
    validate or changed since it was read) and, with ``ledger``, record it in the audit trail
    (who, when, before → after); returns the recorded action."""
    from export_lib.config.edits import write_validated
    from export_lib.ledger.controls import Action, record_action

    if edit.path.read_text() != edit.before:
        raise ConfigError(f"{edit.path} changed since the plan was made; nothing written: "
                          "look at the plan again")
    try:
        write_validated(Path(config_dir), edit.path, edit.after)
    except OSError as exc:  # e.g. a mount that turned read-only: the file is as it was
        raise ConfigError(f"{edit.path} cannot be written ({exc.strerror or exc}); nothing "
                          "written: commit the change shown instead") from None
    if ledger is None or now is None:
        return None
    schedule = edit.plan.schedule
    action = Action(at=now, who=who, action=ACTION, target_kind="schedule",
                    target_id=schedule.schedule_id, why=why or "export time changed",
                    changed=True, outcome=f"{edit.change_text}; wrote {edit.path.name}",
                    company=schedule.company.id, schedule_id=schedule.schedule_id)
    record_action(ledger, action)
    return action


__all__ = ["ACTION", "RescheduleEdit", "apply_reschedule", "check_edit", "company_path",
           "prepare_reschedule", "writable"]
