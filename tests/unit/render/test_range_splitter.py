"""The range scan's splitter (ADR 0038): COPY rows led by their period's number become each
period's records, the number stripped, in pieces of at most one chunk."""

from __future__ import annotations

import pytest

from export_lib.errors import RenderError
from export_lib.render.range_scan import PeriodSplitter


def _split(rows, periods=3, chunk=1 << 20, delimiter=","):
    splitter = PeriodSplitter([memoryview(r) for r in rows], delimiter, periods, chunk)
    return list(splitter), splitter


def test_rows_go_to_their_period_without_the_number():
    rows = [b'1,a,"x, ""y""\nz"\n', b"1,b,\n", b"3,c,10\n", b'3,"",\n']
    pieces, splitter = _split(rows)
    assert pieces == [(1, b'a,"x, ""y""\nz"\nb,\n', 2), (3, b'c,10\n"",\n', 2)]
    assert splitter.max_held == len(pieces[0][1])


def test_a_piece_never_holds_more_than_a_chunk():
    rows = [b"2;" + b"v" * 9 + b"\n"] * 100  # 10-byte records
    pieces, splitter = _split(rows, delimiter=";", chunk=64)
    assert all(p == 2 and len(data) <= 64 and data.count(b"\n") == n for p, data, n in pieces)
    assert b"".join(d for _, d, _ in pieces) == (b"v" * 9 + b"\n") * 100
    assert sum(n for *_, n in pieces) == 100 and splitter.max_held == 60


def test_a_row_longer_than_the_chunk_is_one_piece():
    pieces, splitter = _split([b"1,short\n", b"1," + b"w" * 100 + b"\n"], chunk=16)
    assert [(p, len(d), n) for p, d, n in pieces] == [(1, 6, 1), (1, 101, 1)]
    assert splitter.max_held == 101


def test_a_ten_and_a_one_are_different_periods():
    pieces, _ = _split([b"1,a\n", b"10,b\n", b"11,c\n"], periods=11)
    assert pieces == [(1, b"a\n", 1), (10, b"b\n", 1), (11, b"c\n", 1)]


@pytest.mark.parametrize("rows,problem", [
    ([b"2,a\n", b"1,b\n"], "period 1 came after period 2; its rows must come in period order"),
    ([b"4,a\n"], "does not start with a period number from 1 to 3: b'4'"),
    ([b"x,a\n"], "does not start with a period number from 1 to 3: b'x'"),
    ([b"1,a"], "not one whole CSV row; the server must send one row per message"),
])
def test_what_no_scan_of_ours_sends_is_refused_never_misrouted(rows, problem):
    with pytest.raises(RenderError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        _split(rows)
