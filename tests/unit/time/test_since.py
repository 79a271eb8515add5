"""``--since``: a duration back from the ``now`` passed in, or an ISO 8601 date/time (UTC when
it has no offset); anything else is refused naming the flag, the value and both forms."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from export_lib.errors import WindowError
from export_lib.periods.instants import parse_since

NOW = datetime(2026, 3, 29, 12, 30, tzinfo=UTC)


@pytest.mark.parametrize(("text", "expected"), [
    ("48h", datetime(2026, 3, 27, 12, 30, tzinfo=UTC)),
    ("7d", datetime(2026, 3, 22, 12, 30, tzinfo=UTC)),
    ("90m", datetime(2026, 3, 29, 11, 0, tzinfo=UTC)),
    ("1d12h", datetime(2026, 3, 28, 0, 30, tzinfo=UTC)),
    ("2026-03-20", datetime(2026, 3, 20, tzinfo=UTC)),
    ("2026-03-29T07:00+02:00", datetime(2026, 3, 29, 5, 0, tzinfo=UTC)),
])
def test_a_duration_counts_back_from_now_a_date_is_itself(text, expected):
    assert parse_since(text, NOW) == expected


@pytest.mark.parametrize("text", ["yesterday", "48", "-2h", "48 hours", ""])
def test_anything_else_is_refused_with_both_forms(text):
    with pytest.raises(WindowError, match=rf"^--since {text!r} is neither a duration nor an ISO "
                                          r"8601 date/time; use e\.g\. 48h, 7d, 90m, 2026-03-29 "
                                          r"or 2026-03-29T05:00Z$"):
        parse_since(text, NOW)
