"""Small builders shared by the time tests."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from export_lib.config.timing import Timing
from export_lib.periods.slots import format_instant

SHIPPED = Path(__file__).resolve().parents[2] / "dags" / "config"


def utc(text: str) -> datetime:
    """``utc("2026-03-29T01:00Z")`` → an aware UTC datetime."""
    return datetime.fromisoformat(text)


def timing(tz: str, hour: int = 0, every: int = 24, gap: str = "shift",
           fold: str = "first") -> Timing:
    return Timing(timezone=tz, export_hour=hour, interval_hours=every, dst_gap=gap,
                  dst_fold=fold)


def z(instants) -> list[str]:
    return [format_instant(i) for i in instants]
