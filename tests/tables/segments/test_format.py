"""Segment files: Java properties, creation.meta, deterministic tar.gz, reading back.

Pure Python (pyarrow, tarfile, gzip): no SparkSession needed.
"""

from __future__ import annotations

import datetime as dt
import decimal
import gzip
import os
import tarfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tables.segments import segment_format
from tables.segments.segment_format import (
    format_properties,
    format_value,
    pack_creation_meta,
    pack_files,
    pack_segment,
    parse_properties,
    read_segment,
    read_segment_files,
    unpack_creation_meta,
)


def test_properties_escape_like_java():
    text = format_properties(
        {
            "segment.name": "t__0__1__20210721T0600Z",
            "key with space": " leading and inner space",
            "column.a=b:c.minValue": "x=1:2#3!4\\5",
            "multi": "line1\nline2\ttab\r\f",
            "unicode": "é€😀",
        }
    )
    assert text.splitlines() == [
        "column.a\\=b\\:c.minValue=x\\=1\\:2\\#3\\!4\\\\5",
        "key\\ with\\ space=\\ leading and inner space",
        "multi=line1\\nline2\\ttab\\r\\f",
        "segment.name=t__0__1__20210721T0600Z",
        "unicode=\\u00E9\\u20AC\\uD83D\\uDE00",
    ]
    text.encode("ascii")  # always pure ASCII


@pytest.mark.parametrize(
    "value",
    [
        "",
        " ",
        "  two",
        "a b",
        "=:#!",
        "\\",
        "\\\\n",
        "trailing\\",
        "\n\t\r\f",
        "é€😀\x00\x7f",
        "#not a comment",
        "x" * 500,
    ],
)
def test_properties_round_trip(value):
    props = {"k": value, value or "empty": "v", "z": "last"}
    assert parse_properties(format_properties(props)) == props


def test_properties_parser_reads_java_syntax():
    text = (
        "# comment\n"
        "! other comment\n"
        "\n"
        "   a = 1\n"
        "b:2\n"
        "c 3\n"
        "long = first \\\n"
        "        second\n"
        "d\\=e=\\u0041\\n\n"
        "empty\n"
    )
    assert parse_properties(text) == {
        "a": "1",
        "b": "2",
        "c": "3",
        "long": "first second",
        "d=e": "A\n",
        "empty": "",
    }


def test_values_use_pinot_stored_forms():
    assert format_value(True) == "1" and format_value(False) == "0"
    assert format_value(b"\x00\xab") == "00ab"
    assert format_value(decimal.Decimal("1E-7")) == "0.0000001"
    assert format_value(dt.datetime(2021, 7, 21, 6, tzinfo=dt.UTC)) == "1626847200000"
    assert format_value(1626847200000) == "1626847200000"


def test_creation_meta_is_two_big_endian_longs():
    data = pack_creation_meta(0x0102030405060708, 1626847200000)
    assert data == bytes.fromhex("0102030405060708") + (1626847200000).to_bytes(8, "big")
    assert len(data) == 16
    assert unpack_creation_meta(data) == (0x0102030405060708, 1626847200000)
    assert unpack_creation_meta(pack_creation_meta(4294967295, 0)) == (4294967295, 0)
    with pytest.raises(ValueError, match="16 bytes"):
        unpack_creation_meta(b"short")


def make_segment(root, name="seg__0__1__20210721T0600Z"):
    segment = root / name
    segment.mkdir(parents=True)
    table = pa.table({"id": ["a", "b"], "__offset": pa.array([1, 2], pa.int64())})
    pq.write_table(table, segment / "data.parquet")
    (segment / "metadata.properties").write_text(format_properties({"segment.name": name}))
    (segment / "creation.meta").write_bytes(pack_creation_meta(7, 1626847200000))
    return segment, table


def test_a_segment_packed_from_memory_is_the_same_bytes_as_from_its_folder(tmp_path):
    segment, _ = make_segment(tmp_path / "one")
    from_folder, from_memory = tmp_path / "folder.tar.gz", tmp_path / "memory.tar.gz"
    pack_segment(segment, from_folder, mtime=1626847200)
    files = {path.name: path.read_bytes() for path in segment.iterdir()}
    size = pack_files(segment.name, dict(reversed(list(files.items()))), from_memory, 1626847200)
    assert size == from_memory.stat().st_size
    assert from_memory.read_bytes() == from_folder.read_bytes()


def test_tar_is_byte_identical_whatever_the_files_mtimes(tmp_path):
    segment, _ = make_segment(tmp_path / "one")
    first = tmp_path / "first.tar.gz"
    size = pack_segment(segment, first, mtime=1626847200)
    assert size == first.stat().st_size
    for path in segment.iterdir():
        os.utime(path, (1, 1))  # what a later rebuild would look like on disk
    second = tmp_path / "second.tar.gz"
    pack_segment(segment, second, mtime=1626847200)
    assert first.read_bytes() == second.read_bytes()

    raw = first.read_bytes()
    assert raw[:2] == b"\x1f\x8b" and raw[4:8] == b"\x00\x00\x00\x00"  # gzip mtime 0
    assert not raw[3] & 0x08  # no file name in the gzip header
    with tarfile.open(first, "r:gz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == [
        segment.name,  # tarfile reads a directory name without its slash
        f"{segment.name}/creation.meta",
        f"{segment.name}/data.parquet",
        f"{segment.name}/metadata.properties",
    ]
    assert all(m.mtime == 1626847200 and m.uid == 0 and m.gid == 0 for m in members)
    assert all(m.uname == "" and m.gname == "" for m in members)
    assert members[0].isdir() and all(m.isfile() for m in members[1:])
    assert gzip.decompress(raw)  # a plain gzip stream


def test_read_segment_returns_metadata_and_rows(tmp_path):
    segment, table = make_segment(tmp_path)
    tar_path = tmp_path / f"{segment.name}.tar.gz"
    pack_segment(segment, tar_path)
    metadata, rows = read_segment(tar_path)
    assert metadata == {"segment.name": segment.name}
    assert rows.equals(table)
    files = read_segment_files(tar_path)
    assert unpack_creation_meta(files["creation.meta"]) == (7, 1626847200000)


def test_read_segment_refuses_other_tars(tmp_path):
    other = tmp_path / "other.tar.gz"
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "readme.txt").write_text("hi")
    pack_segment(tmp_path / "x", other)
    with pytest.raises(ValueError, match="not a segment"):
        read_segment(other)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "plain.key",
        " leading",
        "  two leading",
        "a b c",
        "k=v:w#x!y\\z",
        "~!",
        "tab\there",
        "line\nbreak",
        "\f\r",
        "ünïcode",
        "emoji 😀",
        " = ",
        "\\ ",
        "end ",
    ],
)
@pytest.mark.parametrize("is_key", [True, False], ids=["key", "value"])
def test_escaping_by_translation_equals_escaping_each_character(text: str, is_key: bool) -> None:
    assert segment_format._escape(text, is_key) == segment_format._escape_each(text, is_key)
