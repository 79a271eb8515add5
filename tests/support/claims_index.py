"""Reading the claims index (``export_lib.config.claims_index``) as the tests check it."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

# The hostile-config tests' world: two local mounts, one nested in the other, and a company
# file with one local destination at ``path`` (format with id= and path=).
MOUNTS = 'local_mounts: ["/srv/exports", "/srv/exports/oldco"]\n'
COMPANY = """company: {{id: {id}, name: {id}, timezone: UTC, owner: o@{id}.example}}
data_exports:
  - channel: google-ads
    destinations:
      - {{id: d, type: local, path: {path}}}
"""


def indexed(index: Path) -> dict[str, list[tuple[str, str]]]:
    """File name → its indexed (label, location) claims, in the order they were stored (a file
    that claims nothing is left out)."""
    with closing(sqlite3.connect(index)) as db:
        rows = db.execute("SELECT name, label, loc FROM claims ORDER BY name, rowid").fetchall()
    found: dict[str, list[tuple[str, str]]] = {}
    for name, label, loc in rows:
        found.setdefault(name, []).append((label, loc))
    return found


def meta(index: Path) -> dict[str, object]:
    """The index's ``meta`` table: format, defaults key, gen (writes so far), digest."""
    with closing(sqlite3.connect(index)) as db:
        return dict(db.execute("SELECT k, v FROM meta").fetchall())
