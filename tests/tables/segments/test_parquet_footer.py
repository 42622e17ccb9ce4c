"""Sorting the encodings lists of a Parquet footer (pure: pyarrow writes the files, no Spark).

The files Spark writes differ between JVMs only in the order of those lists; here the other order
is made by hand: each column's encodings list, as Thrift's compact protocol writes it, reversed.
"""

from __future__ import annotations

import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tables.segments.parquet_footer import sort_column_encodings

NUMBERS = {"PLAIN": 0, "PLAIN_DICTIONARY": 2, "RLE": 3, "BIT_PACKED": 4, "RLE_DICTIONARY": 8}


def _write(path) -> pa.Table:
    table = pa.table(
        {
            "id": pa.array([f"id-{i}" for i in range(50)]),
            "type": pa.array(["PushEvent", "WatchEvent"] * 25),
            "n": pa.array(range(50), pa.int64()),
        }
    )
    pq.write_table(table, path, compression="snappy")
    return table


def _compact_list(numbers: list[int]) -> bytes:
    """A short list<i32> in Thrift's compact protocol: size and type, then zigzag varints."""
    return bytes([len(numbers) << 4 | 5, *(n << 1 for n in numbers)])


def _reverse_encodings(path) -> int:
    """Reverse each column's encodings list in the footer, in place; how many were reversed."""
    meta = pq.ParquetFile(path).metadata
    data = bytearray(path.read_bytes())
    (length,) = struct.unpack("<I", data[-8:-4])
    start = len(data) - 8 - length
    footer = bytes(data[start:-8])
    reversed_lists = 0
    for index in range(meta.num_columns):
        numbers = [NUMBERS[name] for name in meta.row_group(0).column(index).encodings]
        at = footer.find(_compact_list(numbers))
        assert at >= 0 and len(set(numbers)) > 1
        footer = footer[:at] + _compact_list(numbers[::-1]) + footer[at + len(numbers) + 1 :]
        reversed_lists += 1
    data[start:-8] = footer
    path.write_bytes(bytes(data))
    return reversed_lists


def test_the_same_file_in_another_order_becomes_the_same_bytes(tmp_path):
    one, other = tmp_path / "one.parquet", tmp_path / "other.parquet"
    table = _write(one)
    other.write_bytes(one.read_bytes())
    assert _reverse_encodings(other) == 3
    assert other.read_bytes() != one.read_bytes()

    sort_column_encodings(one)
    assert sort_column_encodings(other)
    assert other.read_bytes() == one.read_bytes()
    assert pq.read_table(other).equals(table)
    meta = pq.ParquetFile(other).metadata
    for index in range(meta.num_columns):
        numbers = [NUMBERS[name] for name in meta.row_group(0).column(index).encodings]
        assert numbers == sorted(numbers)
    assert not sort_column_encodings(other)  # already sorted: nothing written


@pytest.mark.parametrize("content", [b"", b"not parquet at all", b"x" * 20 + b"\x05\0\0\0PAR1"])
def test_what_is_not_parquet_is_refused_untouched(tmp_path, content):
    path = tmp_path / "bad.parquet"
    path.write_bytes(content)
    with pytest.raises(ValueError):
        sort_column_encodings(path)
    assert path.read_bytes() == content
