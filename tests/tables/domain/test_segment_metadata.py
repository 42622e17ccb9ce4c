"""Segment ZK metadata: the §2.2 examples, exact round trips, legacy keys and transitions."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tables.domain.segment_metadata import (
    DOWNLOAD_URL,
    STATUS,
    SegmentStatus,
    SegmentZKMetadata,
    is_completed,
    new_in_progress,
)
from tables.domain.znrecord import ZNRecord

SEGMENT = "myTable__0__1__20240501T1131Z"
PARTITION_METADATA = json.dumps(
    {
        "columnPartitionMap": {
            "id": {
                "functionName": "Murmur",
                "numPartitions": 4,
                "partitions": [0],
                "functionConfig": None,
            }
        }
    },
    separators=(",", ":"),
)

IN_PROGRESS_EXAMPLE = {
    "id": SEGMENT,
    "simpleFields": {
        "segment.creation.time": "1714563060123",
        "segment.flush.threshold.size": "250000",
        "segment.realtime.numReplicas": "2",
        "segment.realtime.startOffset": "5500000",
        "segment.realtime.status": "IN_PROGRESS",
    },
    "mapFields": {},
    "listFields": {},
}

DONE_RECORD = {
    "id": SEGMENT,
    "simpleFields": {
        "segment.creation.time": "1714563060123",
        "segment.crc": "3417624470",
        "segment.data.crc": "2218745063",
        "segment.download.url": "http://controller:9000/segments/myTable/myTable__0__1__20240501T1131Z",
        "segment.end.time": "1714566660000",
        "segment.flush.threshold.size": "250000",
        "segment.index.version": "v3",
        "segment.partition.metadata": PARTITION_METADATA,
        "segment.realtime.endOffset": "5750000",
        "segment.realtime.numReplicas": "2",
        "segment.realtime.startOffset": "5500000",
        "segment.realtime.status": "DONE",
        "segment.size.in.bytes": "52428800",
        "segment.start.time": "1714563060000",
        "segment.time.unit": "MILLISECONDS",
        "segment.total.docs": "250000",
        "segment.use.data.crc": "true",
        # Keys this module does not model: kept verbatim.
        "segment.name": SEGMENT,
        "segment.type": "REALTIME",
        "some.future.key": "with a value",
    },
    "mapFields": {
        "custom.map": {"owner": "ingest", "source": "kafka"},
        "someOtherMap": {"k": "v"},
    },
    "listFields": {"someList": ["x", "y"]},
}


def test_it_creates_the_in_progress_example_exactly():
    metadata = new_in_progress(SEGMENT, "5500000", 2, 250000, 1714563060123)
    assert metadata.to_znrecord().to_dict() == IN_PROGRESS_EXAMPLE


def test_it_reads_the_in_progress_example():
    metadata = SegmentZKMetadata.from_znrecord(ZNRecord.from_dict(IN_PROGRESS_EXAMPLE))
    assert metadata == new_in_progress(SEGMENT, "5500000", 2, 250000, 1714563060123)
    assert metadata.status is SegmentStatus.IN_PROGRESS
    assert metadata.start_offset == "5500000"
    assert metadata.end_offset is None
    assert metadata.num_replicas == 2
    assert metadata.flush_threshold_size == 250000
    assert metadata.creation_time == 1714563060123
    assert not metadata.is_completed


def test_it_round_trips_a_done_record_with_unknown_keys_exactly():
    record = ZNRecord.from_dict(DONE_RECORD)
    metadata = SegmentZKMetadata.from_znrecord(record)
    assert metadata.status is SegmentStatus.DONE
    assert metadata.end_offset == "5750000"
    assert metadata.total_docs == 250000
    assert metadata.crc == 3417624470
    assert metadata.use_data_crc is True
    assert metadata.time_unit == "MILLISECONDS"
    assert metadata.partition_metadata == PARTITION_METADATA
    assert metadata.custom_map == {"owner": "ingest", "source": "kafka"}
    assert metadata.extra == {
        "segment.name": SEGMENT,
        "segment.type": "REALTIME",
        "some.future.key": "with a value",
    }
    written = metadata.to_znrecord()
    assert written.to_dict() == DONE_RECORD
    assert written.to_json() == record.to_json()


def test_it_reads_a_missing_status_as_uploaded_and_does_not_invent_it():
    raw = {"id": "seg", "simpleFields": {"segment.total.docs": "10"}}
    metadata = SegmentZKMetadata.from_znrecord(ZNRecord.from_dict(raw))
    assert metadata.status is SegmentStatus.UPLOADED
    assert metadata.is_completed
    assert STATUS not in metadata.to_znrecord().simple_fields
    done = dataclasses.replace(metadata, status=SegmentStatus.DONE)
    assert done.to_znrecord().simple_fields[STATUS] == "DONE"


def test_it_falls_back_to_legacy_download_url_keys():
    raw = {"id": "seg", "simpleFields": {"segment.realtime.download.url": "http://old/seg"}}
    metadata = SegmentZKMetadata.from_znrecord(ZNRecord.from_dict(raw))
    assert metadata.download_url == "http://old/seg"
    assert metadata.to_znrecord().to_dict()["simpleFields"] == raw["simpleFields"]
    moved = dataclasses.replace(metadata, download_url="http://new/seg")
    assert moved.to_znrecord().simple_fields[DOWNLOAD_URL] == "http://new/seg"
    assert moved.to_znrecord().simple_fields["segment.realtime.download.url"] == "http://old/seg"


def test_it_prefers_the_current_download_url_key_and_keeps_both():
    simple = {
        "segment.download.url": "http://same/seg",
        "segment.offline.download.url": "http://same/seg",
        "segment.offline.push.time": "1700000000000",
    }
    metadata = SegmentZKMetadata.from_znrecord(ZNRecord("seg", simple_fields=dict(simple)))
    assert metadata.download_url == "http://same/seg"
    assert metadata.push_time == 1700000000000
    assert metadata.to_znrecord().simple_fields == simple


def test_it_keeps_values_it_cannot_read_verbatim():
    simple = {"segment.total.docs": "007", "segment.crc": "not-a-number", STATUS: "WEIRD"}
    metadata = SegmentZKMetadata.from_znrecord(ZNRecord("seg", simple_fields=dict(simple)))
    assert metadata.total_docs is None
    assert metadata.crc is None
    assert metadata.status is SegmentStatus.UPLOADED
    assert metadata.to_znrecord().simple_fields == simple
    fixed = dataclasses.replace(metadata, total_docs=7)
    assert fixed.to_znrecord().simple_fields["segment.total.docs"] == "7"


def test_it_keeps_an_empty_custom_map_and_writes_a_new_one():
    raw = {"id": "seg", "simpleFields": {STATUS: "DONE"}, "mapFields": {"custom.map": {}}}
    metadata = SegmentZKMetadata.from_znrecord(ZNRecord.from_dict(raw))
    assert metadata.custom_map == {}
    assert metadata.to_znrecord().map_fields == {"custom.map": {}}
    tagged = dataclasses.replace(metadata, custom_map={"a": "b"})
    assert tagged.to_znrecord().map_fields == {"custom.map": {"a": "b"}}
    assert new_in_progress("s", "0", 1, 1, 0).to_znrecord().map_fields == {}


def test_it_marks_committing_from_in_progress_only():
    metadata = new_in_progress(SEGMENT, "5500000", 2, 250000, 1714563060123)
    committing = metadata.mark_committing("5750000")
    assert committing.status is SegmentStatus.COMMITTING
    fields = committing.to_znrecord().simple_fields
    assert fields[STATUS] == "COMMITTING"
    assert fields["segment.realtime.endOffset"] == "5750000"
    with pytest.raises(ValueError):
        committing.mark_committing("5750001")


def _done(metadata: SegmentZKMetadata, **overrides: object) -> SegmentZKMetadata:
    values = {
        "end_offset": "5750000",
        "start_time_ms": 1714563060000,
        "end_time_ms": 1714566660000,
        "total_docs": 250000,
        "crc": 3417624470,
        "data_crc": 2218745063,
        "size_in_bytes": 52428800,
        "download_url": "http://controller:9000/segments/myTable/myTable__0__1__20240501T1131Z",
        "partition_metadata": PARTITION_METADATA,
        "custom_map": {"owner": "ingest", "source": "kafka"},
    }
    values.update(overrides)
    return metadata.mark_done(**values)


def test_it_marks_done_with_the_fields_pinot_writes():
    metadata = new_in_progress(SEGMENT, "5500000", 2, 250000, 1714563060123)
    done = _done(metadata)
    written = done.to_znrecord().to_dict()
    expected = dict(DONE_RECORD)
    expected["simpleFields"] = {
        k: v
        for k, v in DONE_RECORD["simpleFields"].items()
        if k not in ("segment.name", "segment.type", "some.future.key")
    }
    expected["mapFields"] = {"custom.map": DONE_RECORD["mapFields"]["custom.map"]}
    expected["listFields"] = {}
    assert written == expected
    # Also from COMMITTING (pauseless), and never twice.
    assert _done(metadata.mark_committing("5750000")).status is SegmentStatus.DONE
    with pytest.raises(ValueError):
        _done(done)


def test_it_leaves_use_data_crc_unset_without_a_data_crc():
    done = _done(new_in_progress(SEGMENT, "0", 1, 1000, 0), data_crc=-1, download_url="")
    fields = done.to_znrecord().simple_fields
    assert "segment.data.crc" not in fields
    assert "segment.use.data.crc" not in fields
    assert fields[DOWNLOAD_URL] == ""  # peer-download commit


def test_it_tells_completed_statuses():
    assert is_completed(SegmentStatus.DONE)
    assert is_completed(SegmentStatus.UPLOADED)
    assert is_completed(None)
    assert not is_completed(SegmentStatus.IN_PROGRESS)
    assert not is_completed(SegmentStatus.COMMITTING)
