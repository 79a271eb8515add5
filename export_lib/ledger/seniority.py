"""Which of two companies came first: the ledger's answer when two company files claim one
destination (``export_lib.config.claims``; the newcomer is refused).

A company's seniority is its earliest run in the ledger. The config layer cannot import the
ledger, so the loader takes this as a function; :func:`open_catalog` is the loader with it, for
every caller that runs exports (DAG loaders, tasks, ``exportctl``).
"""

from __future__ import annotations

import os
from collections.abc import Collection
from datetime import datetime
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from export_lib.config.loader import Catalog, load_catalog
from export_lib.ledger.database import ledger_url, make_engine, masked
from export_lib.ledger.schema import runs
from export_lib.logfmt import get_logger

log = get_logger(__name__)


def first_seen(companies: Collection[str], url: str | None = None) -> dict[str, datetime]:
    """Company id → its earliest run's creation time, for the ``companies`` the ledger has runs
    of. Asked only when files overlap, so it opens (and closes) its own connection; a ledger
    that cannot answer answers nothing, and both overlapping files are refused."""
    resolved = ledger_url(url)
    parsed = make_url(resolved)
    if (parsed.get_backend_name() == "sqlite" and parsed.database
            and not os.path.exists(parsed.database)):
        return {}  # the embedded ledger was never created: no company has run yet
    engine = make_engine(resolved)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(runs.c.company, func.min(runs.c.created_at))
                .where(runs.c.company.in_(sorted(companies)))
                .group_by(runs.c.company))
            return {company: seen for company, seen in rows if seen is not None}
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        log.warning("company=%s schedule=- period=-: cannot ask the ledger %s which company "
                    "exported first (%s); both files sharing a destination are refused",
                    ",".join(sorted(companies)), masked(resolved), reason)
        return {}
    finally:
        engine.dispose()


def open_catalog(config_dir: str | Path, only: str | None = None, *,
                 now: datetime | None = None) -> Catalog:
    """:func:`~export_lib.config.loader.load_catalog` with the ledger telling newcomers apart."""
    return load_catalog(config_dir, only, now=now, seniority=first_seen)
