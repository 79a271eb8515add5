"""E-mail recipients must be people allowed to receive the company's data.

Every address in an e-mail destination's ``to`` must be the company's ``owner`` or listed in
``company.authorized``. Checked when the catalog loads (one issue per address, naming the file,
schedule and destination) and again at delivery time (``export_lib.delivery.engine``), so an
address removed from ``authorized`` stops receiving from the next delivery on.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from export_lib.config.destinations import EmailDestination
from export_lib.config.models import Schedule


def recipient_issues(path: Path, schedules: Iterable[Schedule]) -> list[str]:
    """``file: field: message`` lines for every recipient the company does not authorise."""
    issues: list[str] = []
    seen: set[tuple[str, str]] = set()
    for schedule in schedules:
        company = schedule.company
        for dest in schedule.destinations:
            if not isinstance(dest, EmailDestination):
                continue
            for address in dest.to:
                if company.may_receive(address) or (schedule.schedule_id, address) in seen:
                    continue
                seen.add((schedule.schedule_id, address))
                issues.append(
                    f"{path}: {schedule.schedule_id}: destinations[{dest.id}].to: {address!r} is "
                    f"neither company.owner nor in company.authorized; add it to "
                    f"company.authorized or remove it from the destination")
    return issues
