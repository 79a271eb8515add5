"""E-mail recipients must be people allowed to receive the company's data.

Every address in an e-mail destination's ``to`` must be the company's ``owner`` or listed in
``company.authorized``. Checked when the catalog loads (one issue per address, naming the file,
schedule and destination) and again at delivery time (``export_lib.delivery.engine``), so an
address removed from ``authorized`` stops receiving from the next delivery on.
"""

from __future__ import annotations

from pathlib import Path

from export_lib.config.destinations import EmailDestination
from export_lib.config.isolation import ExportVersion
from export_lib.config.models import CompanyFile


def recipient_issues(path: Path, parsed: CompanyFile, versions: list[ExportVersion]
                     ) -> list[str]:
    """``file: field: message`` lines for every recipient the company does not authorise, in
    every version of every export (a ``history`` entry in force today mails as the current
    version would)."""
    issues: list[str] = []
    seen: set[tuple[str, str, str]] = set()
    company = parsed.company
    for version in versions:
        for dest in version.destinations:
            if not isinstance(dest, EmailDestination):
                continue
            for address in dest.to:
                key = (version.schedule_id, version.history_part, address)
                if company.may_receive(address) or key in seen:
                    continue
                seen.add(key)
                issues.append(
                    f"{path}: {version.schedule_id}: {version.history_part}"
                    f"destinations[{dest.id}].to: {address!r} is neither company.owner nor in "
                    "company.authorized; add it to company.authorized or remove it from the "
                    "destination")
    return issues
