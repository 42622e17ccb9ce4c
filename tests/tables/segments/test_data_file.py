"""The data file writer: the same rows give the same bytes however they arrive."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from tables.domain.schema import parse_schema
from tables.segments import data_file
from tables.segments.data_file import DataFileWriter, arrow_schema
from tables.segments.parquet_read import read_parquet

SCHEMA = parse_schema(
    {
        "schemaName": "t",
        "dimensionFieldSpecs": [
            {"name": "s", "dataType": "STRING"},
            {"name": "tags", "dataType": "INT", "singleValueField": False},
        ],
        "dateTimeFieldSpecs": [
            {
                "name": "ts",
                "dataType": "TIMESTAMP",
                "format": "TIMESTAMP",
                "granularity": "1:SECONDS",
            }
        ],
    }
)


def _rows(count: int) -> pa.Table:
    return pa.table(
        {
            "s": [f"value {i % 37}" for i in range(count)],
            "tags": [[i, i + 1] if i % 5 else None for i in range(count)],
            "ts": pa.array(range(count), pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "__offset": pa.array(range(count), pa.int64()),
            "__time": pa.array(range(count), pa.int64()),  # extra columns are left out
        }
    )


def _write(path, pieces) -> bytes:
    with DataFileWriter(path, arrow_schema(SCHEMA)) as writer:
        for piece in pieces:
            writer.write(piece)
    return path.read_bytes()


def test_row_groups_do_not_depend_on_how_the_rows_arrive(tmp_path, monkeypatch):
    monkeypatch.setattr(data_file, "ROW_GROUP_ROWS", 100)
    rows = _rows(1_050)
    whole = _write(tmp_path / "a.parquet", [rows])
    sizes = [1, 99, 250, 3, 400, 297]
    pieces, start = [], 0
    for size in sizes:
        pieces.append(rows.slice(start, size))
        start += size
    batches = [b for p in pieces for b in p.to_batches(max_chunksize=7)]
    assert _write(tmp_path / "b.parquet", pieces) == whole
    assert _write(tmp_path / "c.parquet", batches) == whole
    handle = pq.ParquetFile(tmp_path / "a.parquet")
    assert [handle.metadata.row_group(i).num_rows for i in range(handle.num_row_groups)] == [
        100
    ] * 10 + [50]
    assert handle.schema_arrow.names == ["s", "tags", "ts", "__offset"]
    assert handle.metadata.metadata is None  # no schema blobs in the footer
    assert not list(tmp_path.glob(".*"))  # no temporary file left


def test_no_rows_give_a_file_with_the_schema(tmp_path):
    _write(tmp_path / "empty.parquet", [])
    table = read_parquet(tmp_path / "empty.parquet")
    assert table.num_rows == 0 and table.schema.names == ["s", "tags", "ts", "__offset"]
    assert str(table.schema.field("ts").type) == "timestamp[us, tz=UTC]"
