"""Alerts, the pure part: who is told, the dedupe key and the words.

An alert says that one run of one schedule needs a person: its export **failed** (a task gave
up after its retries), a **delivery** to one destination is exhausted or refused, it is **at
risk** (nothing delivered at its risk point, ADR 0020) or it missed its **deadline**. It is
announced once per (run, reason[, destination]) — the key of
:func:`alert_key`, claimed in the ledger (``export_notices``) before anything is sent — so
Airflow retries, a clear that fails the same way again, or two processes at once add nothing.
A **schema change** published under ``schema_policy: warn`` (ADR 0025) is announced once per
change instead (:func:`schema_change_alert`: keyed by the schedule's contract entry, so the
later runs that publish under the new schema send nothing).
The Airflow edge (``export_airflow.alerts``) sends it through an Airflow notifier.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from export_lib.config.models import AlertsConfig
    from export_lib.ledger import Ledger
    from export_lib.ledger.contracts import ContractEntry
    from export_lib.ledger.records import RunRecord

MAX_DETAIL = 1500
UNRESOLVED_PERIOD = "not resolved (the run failed before its window was recorded)"


class AlertReason(StrEnum):
    FAILED = "failed"
    DELIVERY = "delivery"
    DEADLINE = "deadline"
    AT_RISK = "at_risk"  # not delivered past its risk point, deadline ahead (ADR 0020)
    UNRECOVERABLE = "unrecoverable"  # the gap audit: a missed period the source no longer has
    SCHEMA_CHANGE = "schema_change"  # published under schema_policy: warn (ADR 0025)


HEADLINES = {
    AlertReason.FAILED: "export failed",
    AlertReason.DELIVERY: "delivery not made",
    AlertReason.DEADLINE: "deadline missed",
    AlertReason.AT_RISK: "at risk of missing its deadline",
    AlertReason.UNRECOVERABLE: "period unrecoverable",
    AlertReason.SCHEMA_CHANGE: "published with a changed schema",
}


def alert_key(run_key: str, reason: AlertReason | str, destination: str | None = None) -> str:
    """``alert:<run key>:<reason>[:<destination>]`` — one alert per run and reason (and
    destination for deliveries); the same for every retry, clear and process."""
    key = f"alert:{run_key}:{AlertReason(reason).value}"
    return f"{key}:{destination}" if destination else key


def recipients(config: AlertsConfig, owner: str | None) -> tuple[str, ...]:
    """The exports team, then the schedule's owner (unless ``notify_owner: false``), each once,
    lower-cased, in that order."""
    found: list[str] = []
    for address in (*config.exports_team, *((owner,) if owner and config.notify_owner else ())):
        address = address.strip().lower()
        if address and address not in found:
            found.append(address)
    return tuple(found)


@dataclass(frozen=True)
class Alert:
    """One alert about one run. ``period`` is the run's reporting period when the ledger has
    the run (``None`` if it failed before it was registered); ``where`` names the Airflow run
    and task for the reader who opens the UI."""

    reason: AlertReason
    company: str
    schedule_id: str
    run_key: str
    slot: datetime
    detail: str
    period: str | None = None
    destination: str | None = None
    where: str | None = None
    once_per: str | None = None
    """The dedupe key when it is not the run's (a schema change: once per change)."""

    @property
    def key(self) -> str:
        return self.once_per or alert_key(self.run_key, self.reason, self.destination)

    @property
    def notice_reason(self) -> str:
        """The ``reason`` recorded with the claim (``delivery:<destination>`` for a delivery)."""
        return self.key.removeprefix(f"alert:{self.run_key}:") if self.once_per is None \
            else self.reason.value

    def log_context(self) -> dict[str, str | None]:
        """The run's log fields (``period`` None before the run was registered)."""
        return {"company": self.company, "schedule": self.schedule_id, "run": self.run_key,
                "period": self.period}

    @property
    def headline(self) -> str:
        what = HEADLINES[self.reason]
        return f"{what} ({self.destination})" if self.destination else what

    @property
    def subject(self) -> str:
        return (f"[exports] {self.headline}: {self.schedule_id} "
                f"{self.period or f'slot {self.slot:%Y-%m-%dT%H:%MZ}'}")

    def commands(self) -> list[str]:
        """What to run to investigate, most specific first."""
        day = f"{self.slot:%Y-%m-%d}"
        cmds = [f"exportctl explain --schedule {self.schedule_id} --date {day}",
                f"exportctl runs --company {self.company} --schedule {self.schedule_id} "
                f"--since {self.slot:%Y-%m-%dT%H:%MZ} --limit 1"]
        if self.reason is AlertReason.DELIVERY:
            cmds.append(f"exportctl requeue {self.run_key} --destination {self.destination} "
                        "--reason '...'  # once the destination is fixed")
        if self.reason is AlertReason.SCHEMA_CHANGE:
            cmds.insert(0, f"exportctl schema {self.schedule_id}")
        return cmds

    def text(self) -> str:
        """The body: run, period, reason and the commands, one fact per line."""
        detail = " ".join(self.detail.split())
        if len(detail) > MAX_DETAIL:
            detail = detail[:MAX_DETAIL] + " …"
        lines = [
            f"{self.headline.capitalize()} for {self.schedule_id} (company {self.company}).",
            "",
            f"run:     {self.run_key}",
            f"period:  {self.period or UNRESOLVED_PERIOD}",
            f"slot:    {self.slot:%Y-%m-%dT%H:%MZ}",
        ]
        if self.destination:
            lines.append(f"destination: {self.destination}")
        lines.append(f"reason:  {detail}")
        if self.where:
            lines.append(f"airflow: {self.where}")
        once = ("This alert is sent once per schema change; later runs that publish under the "
                "new schema send nothing more." if self.once_per else
                "This alert is sent once per run and reason; retries and clears that fail "
                "the same way send nothing more.")
        lines += ["", "Investigate:", *(f"  {c}" for c in self.commands()), "", once]
        return "\n".join(lines)

    def html(self) -> str:
        """The body for an e-mail notifier: the text, escaped, in ``<pre>``."""
        from html import escape

        return f"<pre>{escape(self.text())}</pre>"


def schema_change_alert(entry: ContractEntry) -> Alert:
    """The one alert of a schema change published under ``schema_policy: warn`` (ADR 0025):
    about the run that first published it, keyed by the change
    (:func:`export_lib.ledger.contracts.schema_notice_key`)."""
    from export_lib.ledger.contracts import schema_notice_key

    detail = (f"the file's schema changed and was published under schema_policy: warn; it is "
              f"the schedule's contract now ({entry.fingerprint[:12]}, was "
              f"{(entry.previous_fingerprint or '?')[:12]}): {'; '.join(entry.diff)}")
    return Alert(reason=AlertReason.SCHEMA_CHANGE, company=entry.company,
                 schedule_id=entry.schedule_id, run_key=entry.run_key, slot=entry.slot,
                 detail=detail, period=entry.period,
                 once_per=schema_notice_key(entry.schedule_id, entry.seq))


# -- batched recovery (ADR 0032) ----------------------------------------------------------
# A batch alerts per period, at the two moments the period's own tasks would have:
#
# * after a batch, for its failed periods: a delivery that ended without an acknowledgment
#   (``exhausted`` past its window, ``refused`` by a permission recheck) fails its period and is
#   final whatever the task does next, and the next try passes such a period over as done — so
#   it is alerted then (``given_up=False``);
# * when the batch task fails for good (its last retry, a timeout, its worker lost): each period
#   it left not done is one alert — ``failed`` with the error its last attempt recorded (or that
#   it never started), or ``delivery`` per destination not acknowledged (``given_up=True``).
#
# Each alert is keyed like every alert of the run (:func:`alert_key`): a
# period alerted once is not alerted again by a retry, a clear or its own DAG run. Read from the
# ledger only: the failure callback may run where the task's exception is not at hand.

# Deliveries that end without an acknowledgment and stay so until an operator requeues them.
GAVE_UP = frozenset({"exhausted", "refused"})
_QUIET = frozenset({"skipped", "cancelled"})  # final runs with nothing to alert


def batch_alerts(ledger: Ledger, schedule_id: str, slots: Sequence[datetime], *,
                 where: str, given_up: bool) -> list[Alert]:
    """The alerts for the periods of ``slots`` (of ``schedule_id``), in slot order: with
    ``given_up`` (the task failed for good) every period not done; without, only deliveries
    that gave up. ``where`` names the batch's Airflow task (``dag/run/task try N``)."""
    from export_lib.periods.names import period_label, run_key

    found: list[Alert] = []
    for slot in sorted(set(slots)):
        key = run_key(schedule_id, slot)
        run = ledger.get_run(key)
        if run is not None and run.state in _QUIET:
            continue
        for reason, detail, destination in _undone(ledger, key, run, given_up):
            found.append(Alert(
                reason=reason, company=schedule_id.split("/", 1)[0], schedule_id=schedule_id,
                run_key=key, slot=slot, detail=detail, destination=destination,
                period=period_label(run.window_start, run.window_end, run.timezone)
                if run is not None else None, where=f"batched recovery {where}"))
    return found


def _undone(ledger: Ledger, key: str, run: RunRecord | None,
            given_up: bool) -> list[tuple[AlertReason, str, str | None]]:
    """What is left of one period to alert: (reason, detail, destination)."""
    from export_lib.ledger import RunState
    from export_lib.pipeline.stages import list_deliveries, schedule_of

    if run is None:
        return [(AlertReason.FAILED, "not exported: the batch ended before this period was "
                                     "started", None)] if given_up else []
    if run.state != RunState.READY.value:
        if not given_up:
            return []
        tries = ledger.attempts(key)
        error = next((a.error for a in reversed(tries) if a.error), None)
        return [(AlertReason.FAILED, f"the run is {run.state} after {len(tries)} attempt(s)"
                 + (f": {error}" if error else ""), None)]
    latest = ledger.latest_artifact(key)
    last = {d["destination"]: d for d in list_deliveries(ledger, key)
            if latest is not None and d["version"] == latest.version}
    left = []
    for destination in (d.id for d in schedule_of(run).destinations):
        record = last.get(destination)
        state = record["state"] if record is not None else None
        if state == "acknowledged" or (not given_up and state not in GAVE_UP):
            continue
        left.append((AlertReason.DELIVERY, f"delivery to {destination} is {state} after "
                     f"{record['attempts']} attempt(s): "
                     f"{record.get('last_error') or 'no error recorded'}" if record is not None
                     else f"delivery to {destination} was never attempted", destination))
    return left
