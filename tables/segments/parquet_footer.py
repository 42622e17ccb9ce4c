"""Make a Parquet file written by Spark byte-identical whichever JVM wrote it.

Spark's Parquet writer (parquet-mr / parquet-java) lists each column chunk's encodings
(`ColumnMetaData.encodings` in the footer) in the iteration order of a Java `HashSet` of enum
constants, and enum hash codes are identity hash codes: they change from one JVM to the next. The
same rows written by another executor, or by the same worker after a restart, differ in those few
bytes, and so does the segment's CRC. `sort_column_encodings(path)` sorts every such list by the
encodings' numbers, in place. Parquet gives the list no meaning in its order (it is a set), so
readers see the same file; the footer keeps its length, since each element is one varint of the
same list (a permutation).

The footer is Thrift's compact protocol; this module walks it without a Thrift library:
FileMetaData.row_groups (4) -> RowGroup.columns (1) -> ColumnChunk.meta_data (3) ->
ColumnMetaData.encodings (2), skipping every other field whatever its type. A file it cannot walk
raises `ValueError`, and nothing is written.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

__all__ = ["sort_column_encodings"]

MAGIC = b"PAR1"
# Compact protocol type ids.
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY = 1, 2, 3, 4, 5, 6, 7, 8
_LIST, _SET, _MAP, _STRUCT = 9, 10, 11, 12
_VARINTS = (_I16, _I32, _I64)


class _Reader:
    def __init__(self, data: bytes | bytearray) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise ValueError("Parquet footer ends inside a value")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def varint(self) -> int:
        shift = result = 0
        while True:
            byte = self.byte()
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    def fields(self) -> Iterator[tuple[int, int]]:
        """(field id, type) of each field of a struct; the caller reads or skips each value."""
        last = 0
        while True:
            header = self.byte()
            if header == 0:  # STOP
                return
            delta, kind = header >> 4, header & 0x0F
            last = last + delta if delta else _zigzag(self.varint())
            yield last, kind

    def list_header(self) -> tuple[int, int]:
        header = self.byte()
        size = header >> 4
        return (self.varint() if size == 15 else size), header & 0x0F

    def skip(self, kind: int, in_container: bool = False) -> None:
        if kind in (_TRUE, _FALSE):
            self.pos += 1 if in_container else 0  # a field's boolean is in its header
        elif kind == _BYTE:
            self.pos += 1
        elif kind in _VARINTS:
            self.varint()
        elif kind == _DOUBLE:
            self.pos += 8
        elif kind == _BINARY:
            length = self.varint()  # read before pos is: `pos += varint()` would lose the varint
            self.pos += length
        elif kind in (_LIST, _SET):
            size, element = self.list_header()
            for _ in range(size):
                self.skip(element, in_container=True)
        elif kind == _MAP:
            size = self.varint()
            types = self.byte() if size else 0
            for _ in range(size):
                self.skip(types >> 4, in_container=True)
                self.skip(types & 0x0F, in_container=True)
        elif kind == _STRUCT:
            for _, field_kind in self.fields():
                self.skip(field_kind)
        else:
            raise ValueError(f"unknown Thrift compact type {kind} in a Parquet footer")
        if self.pos > len(self.data):
            raise ValueError("Parquet footer ends inside a value")


def _zigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def _each_struct_of_list(reader: _Reader, kind: int) -> Iterator[None]:
    """Position `reader` at each struct element of a list field (the caller walks its fields)."""
    if kind != _LIST:
        raise ValueError("Parquet footer: a list was expected")
    size, element = reader.list_header()
    if size and element != _STRUCT:
        raise ValueError("Parquet footer: a list of structs was expected")
    for _ in range(size):
        yield


def _sort_varint_list(reader: _Reader, out: bytearray) -> None:
    """Sort the elements of the i32 list at `reader.pos` (same bytes, sorted by value) into out."""
    size, element = reader.list_header()
    if element != _I32:
        raise ValueError("Parquet footer: encodings are not a list of i32")
    spans = []
    for _ in range(size):
        start = reader.pos
        value = _zigzag(reader.varint())
        spans.append((value, bytes(reader.data[start : reader.pos])))
    if spans:
        end = reader.pos
        start = end - sum(len(raw) for _, raw in spans)
        out[start:end] = b"".join(raw for _, raw in sorted(spans))


def _walk(footer: bytearray) -> bytearray:
    reader, out = _Reader(bytes(footer)), bytearray(footer)
    for field, kind in reader.fields():  # FileMetaData
        if field != 4:
            reader.skip(kind)
            continue
        for _ in _each_struct_of_list(reader, kind):  # row_groups
            for group_field, group_kind in reader.fields():  # RowGroup
                if group_field != 1:
                    reader.skip(group_kind)
                    continue
                for _ in _each_struct_of_list(reader, group_kind):  # columns
                    _walk_column_chunk(reader, out)
    return out


def _walk_column_chunk(reader: _Reader, out: bytearray) -> None:
    for field, kind in reader.fields():  # ColumnChunk
        if field != 3 or kind != _STRUCT:
            reader.skip(kind)
            continue
        for meta_field, meta_kind in reader.fields():  # ColumnMetaData
            if meta_field == 2 and meta_kind == _LIST:
                _sort_varint_list(reader, out)
            else:
                reader.skip(meta_kind)


def sort_column_encodings(path: str | Path) -> bool:
    """Sort each column chunk's encodings in the footer of the Parquet file at `path`, in place;
    True when a byte changed."""
    with Path(path).open("r+b") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        if size < 12:
            raise ValueError(f"{path} is not a Parquet file (too short)")
        handle.seek(size - 8)
        tail = handle.read(8)
        (length,) = struct.unpack("<I", tail[:4])
        if tail[4:] != MAGIC or length > size - 12:
            raise ValueError(f"{path} is not a Parquet file (no footer)")
        handle.seek(size - 8 - length)
        footer = bytearray(handle.read(length))
        normalised = _walk(footer)
        if normalised == footer:
            return False
        handle.seek(size - 8 - length)
        handle.write(normalised)
    return True
