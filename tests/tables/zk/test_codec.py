"""ZNRecords in the real ZooKeeper: Helix's JSON, gzip read transparently, compression."""

from __future__ import annotations

import gzip
import hashlib
import json

import pytest

from tables.domain.znrecord import ZNRecord
from tables.zk import codec
from tables.zk.records import create_record, read_record, update_record

pytestmark = pytest.mark.zk


def _big_idealstate(segments: int) -> ZNRecord:
    return ZNRecord(
        id="big_REALTIME",
        simple_fields={"NUM_PARTITIONS": str(segments), "enableCompression": "true"},
        map_fields={
            f"big__{i % 16}__{i // 16}__20240101T0000Z": {
                "Server_a_1": "ONLINE",
                "Server_b_1": "ONLINE",
            }
            for i in range(segments)
        },
    )


def test_helix_json_layout():
    record = ZNRecord(id="x", simple_fields={"b": "2", "a": "1"}, map_fields={"m": {"k": "v"}})
    text = record.to_json()
    assert text.startswith('{\n  "id" : "x",\n  "simpleFields" : {\n    "a" : "1",')
    assert ZNRecord.from_json(text) == record
    # Readers accept any JSON of the shape, with members missing.
    assert ZNRecord.from_json('{"id":"y"}') == ZNRecord(id="y")
    assert ZNRecord.from_json('{"id":"z","simpleFields":{"colon":"a : b"}}').simple_fields == {
        "colon": "a : b"
    }


def test_a_gzip_idealstate_written_as_helix_writes_it_is_read(zk):
    record = _big_idealstate(1200)
    # As Helix does: the Jackson JSON, gzip-compressed, in the znode.
    zk.create("/is", gzip.compress(record.to_json().encode()))
    found = read_record(zk, "/is")
    assert found is not None
    assert found.record == record
    assert len(found.record.map_fields) == 1200


def test_records_that_ask_for_compression_are_written_compressed(zk):
    create_record(zk, "/big", _big_idealstate(1001))
    raw, _ = zk.get("/big")
    assert codec.is_compressed(raw)
    small = ZNRecord(id="small", simple_fields={"a": "1"})
    create_record(zk, "/small", small)
    raw, _ = zk.get("/small")
    assert not codec.is_compressed(raw)
    assert json.loads(raw)["simpleFields"] == {"a": "1"}


def test_an_oversized_record_is_refused_before_writing():
    # Hash text: gzip cannot shrink it below the limit.
    values = {f"k{i}": hashlib.sha256(str(i).encode()).hexdigest() * 2 for i in range(30000)}
    noise = ZNRecord(id="n", simple_fields=values)
    with pytest.raises(codec.RecordTooLarge, match="over the 1024000-byte limit"):
        codec.encode(noise)


def test_update_record_keeps_compression_on_rewrite(zk):
    create_record(zk, "/big", _big_idealstate(1001))

    def drop_one(record: ZNRecord) -> ZNRecord:
        out = record.copy()
        out.map_fields.pop(next(iter(sorted(out.map_fields))))
        return out

    result = update_record(zk, "/big", drop_one)
    assert result.version == 1
    assert len(result.record.map_fields) == 1000
    assert codec.is_compressed(zk.get("/big")[0])
