"""RowGroupWriter: row groups sized by bytes, cut per row, whatever the incoming batches."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from export_lib.render.parquet_format import RowGroupWriter

SCHEMA = pa.schema([("n", pa.int64()), ("pad", pa.string()), ("ok", pa.bool_())])
ROWS = 20_000


def _table() -> pa.Table:
    return pa.table({"n": list(range(ROWS)),
                     "pad": [None if i % 7 == 0 else "x" * (i % 300) for i in range(ROWS)],
                     "ok": [i % 2 == 0 for i in range(ROWS)]}, schema=SCHEMA)


def _write(batch_rows: int, **kwargs) -> bytes:
    sink = io.BytesIO()
    writer = RowGroupWriter(sink, SCHEMA, compression="snappy", **kwargs)
    for batch in _table().to_batches(max_chunksize=batch_rows):
        writer.add(batch)
    writer.close()
    assert writer.rows == ROWS
    return sink.getvalue()


def _group_rows(data: bytes) -> list[int]:
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    return [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]


@pytest.mark.parametrize("batch_rows", [1, 997, 4096, ROWS])
def test_same_rows_same_bytes_whatever_the_batch_sizes(batch_rows):
    assert _write(batch_rows, group_bytes=1 << 20) == _write(3_000, group_bytes=1 << 20)


def test_a_group_ends_at_the_first_row_that_reaches_the_byte_budget():
    budget = 1 << 20
    data = _write(1_000, group_bytes=budget)
    groups = _group_rows(data)
    assert len(groups) > 1 and sum(groups) == ROWS
    writer = RowGroupWriter(io.BytesIO(), SCHEMA, group_bytes=budget, compression="none")
    sizes = writer.row_bytes(pa.RecordBatch.from_pydict(_table().to_pydict(), schema=SCHEMA))
    start = 0
    for rows in groups[:-1]:
        group = sizes[start:start + rows]
        assert group.sum() >= budget > group[:-1].sum()
        start += rows
    assert sizes[start:].sum() < budget + sizes[start:].max()
    assert pq.read_table(io.BytesIO(data)).equals(_table())


def test_row_bytes_counts_fixed_widths_offsets_and_string_lengths():
    writer = RowGroupWriter(io.BytesIO(), SCHEMA, group_bytes=1 << 20, compression="none")
    batch = pa.RecordBatch.from_pydict({"n": [1, 2, 3], "pad": ["", None, "abcd"],
                                        "ok": [True, None, False]}, schema=SCHEMA)
    # int64 8 + bool 1 + string offset 4 (+ its length); a slice keeps its own lengths.
    assert writer.row_bytes(batch).tolist() == [13, 13, 17]
    assert writer.row_bytes(batch.slice(2)).tolist() == [17]


def test_max_rows_caps_a_group_before_its_byte_budget():
    assert _group_rows(_write(777, group_bytes=1 << 30, max_rows=6_000)) == [
        6_000, 6_000, 6_000, 2_000]
