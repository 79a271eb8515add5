"""The scheduler tier's module clock (tests/system/scheduler/harness.SlotClock): a module's
daily slot is never nearer than SLOT_MARGIN to its start, whatever the minute it starts at, so
the newest due slot it computes is the one the scheduler runs first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.system.scheduler.harness import SLOT_MARGIN, SlotClock


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(("now", "ahead", "next_slot"), [
    ("2026-12-02 05:54:00", 1, "2026-12-02 06:00"),   # the shift run: due 6 min into the module
    ("2026-12-02 05:57:59", 1, "2026-12-02 06:00"),
    ("2026-12-02 05:58:00", 1, "2026-12-02 06:00"),   # exactly the margin away
    ("2026-12-02 05:58:01", 1, "2026-12-02 07:00"),   # nearer: the hour after
    ("2026-12-02 05:59:54", 1, "2026-12-02 07:00"),   # the start that broke test_runaway
    ("2026-12-02 23:59:00", 1, "2026-12-03 01:00"),   # across midnight
    ("2026-12-02 05:54:00", 12, "2026-12-02 17:00"),  # the default: ~12 h both ways
    ("2026-12-02 13:30:00", 12, "2026-12-03 01:00"),
])
def test_the_next_slot_is_a_full_hour_at_least_the_margin_ahead(now, ahead, next_slot):
    clock = SlotClock(_at(now), hours_ahead=ahead)
    assert clock.next_slot == _at(next_slot)
    assert clock.hour == clock.next_slot.hour
    assert clock.newest == clock.next_slot - timedelta(days=1)
    assert clock.next_slot - clock.now >= SLOT_MARGIN + timedelta(hours=ahead - 1)
    assert clock.next_slot - clock.now < timedelta(hours=ahead, minutes=2, seconds=1)


def test_the_newest_due_slot_is_the_latest_daily_slot_at_or_before_the_start():
    for minute in range(0, 24 * 60, 7):
        now = _at("2026-12-02 00:00:00") + timedelta(minutes=minute, seconds=13)
        for ahead in (1, 6, 12, 23):
            clock = SlotClock(now, hours_ahead=ahead)
            assert clock.newest <= now < clock.newest + timedelta(days=1)
            assert clock.newest.hour == clock.hour and clock.newest.minute == 0
            assert clock.now_hour <= now < clock.now_hour + timedelta(hours=1)
