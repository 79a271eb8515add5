"""Which DAG bundle a file of the dags folder belongs to, when the DAG files are split over
several dag-processors (``make cluster DAG_PROCESSORS=2``; docs/how-to/deploy.md).

A company's loader (``company_<id>.py``) goes to part ``1 + sha256(id) mod parts``: stable
across restarts, machines and Python versions (no ``hash()``, which is salted per process), and
a company never moves while the number of parts stays the same. Every other DAG file (the
config check, gap audit, retention, demo feed, example consumer) is in part 1.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from export_lib.config.dag_loaders import LOADER_PREFIX

BUNDLE_PREFIX = "dags-"  # part n is the bundle named dags-n


def bundle_part(file_name: str, parts: int) -> int:
    """The part (1..``parts``) of the DAG file named ``file_name`` (a name, not a path)."""
    if parts < 1:
        raise ValueError(f"parts={parts}: the number of DAG bundles must be at least 1")
    stem = Path(file_name).stem
    if not stem.startswith(LOADER_PREFIX):
        return 1
    company = stem.removeprefix(LOADER_PREFIX)
    return 1 + int(hashlib.sha256(company.encode()).hexdigest()[:12], 16) % parts


def bundle_name(part: int) -> str:
    return f"{BUNDLE_PREFIX}{part}"


def part_files(dags_dir: Path, part: int, parts: int) -> list[Path]:
    """The DAG files (``*.py`` directly in ``dags_dir``) of ``part``, sorted."""
    if not 1 <= part <= parts:
        raise ValueError(f"part={part} is not one of the {parts} DAG bundles (1..{parts})")
    return sorted(p for p in Path(dags_dir).glob("*.py")
                  if bundle_part(p.name, parts) == part)
