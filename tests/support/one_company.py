"""A config directory with the shipped ``defaults.yaml`` and one company ``t`` whose single
daily widget export (``t/daily``) takes extra YAML lines: what the config tests of one
per-export setting vary (at_risk, schema_policy, the operational settings)."""

from __future__ import annotations

import shutil
from pathlib import Path

SHIPPED = Path(__file__).resolve().parents[2] / "dags" / "config"

COMPANY = """\
company: {id: t, name: Test, timezone: Europe/Berlin, owner: o@x.example}
widget_exports:
  - id: daily
    export_hour: 7
    query: {table: widget_metrics, columns: [a], timestamp_column: a, tenant_column: company_id}
    destinations: [{id: d, type: local, path: outbox/t%(path_suffix)s}]
%(extra)s"""


def company_yaml(extra: str = "", path_suffix: str = "") -> str:
    """``t.yaml`` with ``extra`` (indented lines of the export) appended."""
    return COMPANY % {"extra": extra, "path_suffix": path_suffix}


def config_dir_with_defaults(root: Path) -> Path:
    """``root`` holding a copy of the shipped ``defaults.yaml``."""
    shutil.copy(SHIPPED / "defaults.yaml", root / "defaults.yaml")
    return root
