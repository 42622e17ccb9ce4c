"""ZNRecord bytes as Helix stores them (reference §1.2).

Reading: gzip is detected by its magic bytes (0x1f 0x8b) and undone transparently, whatever
wrote it. Writing: Helix's pretty-printed JSON, gzip-compressed when the record asks for it
(`enableCompression` = "true", which Pinot sets on IdealStates past 1000 segments) or when the
JSON is larger than the 1,000 KiB write limit (Helix's auto-compression). A record still larger
than the limit after compression is refused, as Helix refuses it.
"""

from __future__ import annotations

import gzip

from tables.domain.znrecord import ZNRecord

__all__ = ["WRITE_SIZE_LIMIT", "RecordTooLarge", "decode", "encode", "is_compressed"]

WRITE_SIZE_LIMIT = 1000 * 1024
GZIP_MAGIC = b"\x1f\x8b"


class RecordTooLarge(ValueError):
    """A ZNRecord over ZooKeeper's write limit even after compression."""


def is_compressed(data: bytes) -> bool:
    return data[:2] == GZIP_MAGIC


def decode(data: bytes) -> ZNRecord:
    if is_compressed(data):
        data = gzip.decompress(data)
    return ZNRecord.from_json(data)


def encode(record: ZNRecord) -> bytes:
    raw = record.to_json().encode("utf-8")
    if record.simple_fields.get("enableCompression") == "true" or len(raw) > WRITE_SIZE_LIMIT:
        # mtime=0: the same record always compresses to the same bytes.
        raw = gzip.compress(raw, mtime=0)
    if len(raw) > WRITE_SIZE_LIMIT:
        raise RecordTooLarge(
            f"ZNRecord {record.id!r} is {len(raw)} bytes, over the {WRITE_SIZE_LIMIT}-byte limit"
        )
    return raw
