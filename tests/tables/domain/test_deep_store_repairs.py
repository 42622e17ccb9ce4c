"""The deep-store upload repair's decisions (round 2 §B.5): which segments a server must upload,
what the server answers, what the controller writes, what leaves `committingSegments`."""

from __future__ import annotations

import pytest

from tables.domain.deep_store_repairs import (
    DeepStoreRepairKind,
    ServerUpload,
    UploadFacts,
    check_server_fields,
    is_upload_key,
    plan_deep_store_repairs,
    repaired_record,
    stale_committing,
    uploaded_metadata,
)
from tables.domain.segment_metadata import SegmentStatus, SegmentZKMetadata, new_in_progress

GUARD = 300_000
NOW = 10_000_000
OLD = NOW - GUARD - 1  # past the guard
FRESH = NOW - GUARD  # exactly at it: not past
S1, S2 = "Server_h_1", "Server_h_2"
SEG = "t__0__3__20240501T1030Z"
UUID = "0b9f2f6c-4b0e-4c2a-9d51-3b1f4b6f2a10"


def _plan(facts: list[UploadFacts], pauseless: bool = True):
    return plan_deep_store_repairs(facts, pauseless=pauseless, now_ms=NOW, max_completion_ms=GUARD)


def test_a_committing_segment_held_online_is_repaired_past_the_guard_only():
    held = UploadFacts(SEG, "COMMITTING", None, OLD, (S2, S1))
    (repair,) = _plan([held]).repairs
    assert (repair.kind, repair.segment, repair.servers) == (
        DeepStoreRepairKind.COMMITTING,
        SEG,
        (S1, S2),
    )
    plan = _plan([UploadFacts(SEG, "COMMITTING", None, FRESH, (S1,))])
    assert plan.repairs == []
    (wait,) = plan.waits
    assert (wait.segment, wait.until_ms) == (SEG, FRESH + GUARD)


def test_a_committing_segment_nobody_holds_is_left_to_the_error_repair():
    plan = _plan([UploadFacts(SEG, "COMMITTING", None, OLD, ())])
    assert plan.repairs == [] and plan.waits == []


def test_committing_counts_only_in_a_pauseless_table():
    plan = _plan([UploadFacts(SEG, "COMMITTING", None, OLD, (S1,))], pauseless=False)
    assert plan.repairs == [] and plan.waits == []


def test_done_without_url_is_repaired_at_once_in_a_blocking_table():
    facts = [
        UploadFacts(SEG, "DONE", "", NOW, (S1,)),
        UploadFacts("t__1__0__20240501T1030Z", "DONE", "http://c/segments/t/x", OLD, (S1,)),
        UploadFacts("t__2__0__20240501T1030Z", "DONE", None, OLD, (S1,)),  # absent key: not ""
        UploadFacts("t__3__0__20240501T1030Z", "UPLOADED", "", OLD, (S1,)),
        UploadFacts("t__0__4__20240501T1030Z", "IN_PROGRESS", None, OLD, (S1,)),
    ]
    plan = _plan(facts, pauseless=False)
    assert [(r.kind, r.segment) for r in plan.repairs] == [(DeepStoreRepairKind.MISSING_URL, SEG)]
    assert plan.waits == []


def test_done_without_url_waits_for_the_guard_in_a_pauseless_table():
    plan = _plan([UploadFacts(SEG, "DONE", "", FRESH, (S1,))])
    assert plan.repairs == [] and [w.segment for w in plan.waits] == [SEG]
    (repair,) = _plan([UploadFacts(SEG, "DONE", "", OLD, (S1,))]).repairs
    assert repair.kind is DeepStoreRepairKind.MISSING_URL


def test_done_without_url_nobody_holds_is_still_a_candidate():
    (repair,) = _plan([UploadFacts(SEG, "DONE", "", OLD, ())], pauseless=False).repairs
    assert repair.servers == () and "no replica is ONLINE" in repair.reason


def _committing() -> SegmentZKMetadata:
    return new_in_progress(SEG, "100", 2, 1000, 5).mark_committing("250")


def test_the_server_answers_the_committing_segment_done_with_its_copy():
    done = uploaded_metadata(
        _committing(),
        total_docs=150,
        start_time_ms=11,
        end_time_ms=22,
        crc=777,
        size_bytes=4096,
        download_url=f"file:///ds/t/{SEG}.tmp.{UUID}",
    )
    assert done.status is SegmentStatus.DONE
    assert (done.start_offset, done.end_offset, done.crc, done.total_docs) == (
        "100",
        "250",
        777,
        150,
    )
    assert (done.start_time, done.end_time, done.size_in_bytes) == (11, 22, 4096)
    assert done.download_url == f"file:///ds/t/{SEG}.tmp.{UUID}"


def test_the_server_answers_a_done_segment_with_the_uploaded_uri():
    peers_only = _committing().mark_done(
        end_offset="250",
        start_time_ms=1,
        end_time_ms=2,
        total_docs=150,
        crc=777,
        data_crc=777,
        size_in_bytes=10,
        download_url="",
        custom_map={"k": "v"},
    )
    done = uploaded_metadata(
        peers_only,
        total_docs=150,
        start_time_ms=1,
        end_time_ms=2,
        crc=777,
        size_bytes=10,
        download_url="file:///x",
    )
    assert (done.status, done.download_url, done.custom_map) == ("DONE", "file:///x", {"k": "v"})


def test_a_consuming_segment_has_no_copy_to_answer_with():
    with pytest.raises(ValueError, match="still consuming"):
        uploaded_metadata(
            new_in_progress(SEG, "100", 2, 1000, 5),
            total_docs=1,
            start_time_ms=1,
            end_time_ms=1,
            crc=1,
            size_bytes=1,
            download_url="u",
        )


def _fields(**changes: str) -> dict[str, str]:
    fields = {
        "segment.realtime.status": "DONE",
        "segment.crc": "777",
        "segment.download.url": f"file:///ds/t/{SEG}.tmp.{UUID}",
        "segment.realtime.startOffset": "100",
        "segment.realtime.endOffset": "250",
        "segment.total.docs": "150",
    }
    fields.update(changes)
    return fields


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ([], "not an object of strings"),
        ({"segment.crc": 7}, "not an object of strings"),
        (_fields(**{"segment.realtime.status": "COMMITTING"}), "not DONE"),
        (_fields(**{"segment.download.url": ""}), "no segment.download.url"),
        (_fields(**{"segment.crc": "x"}), "not a number"),
    ],
)
def test_a_malformed_answer_is_refused(answer: object, problem: str):
    with pytest.raises(ValueError, match=problem):
        check_server_fields(answer, SEG)


def test_a_good_answer_gives_its_uri_and_crc():
    upload = check_server_fields(_fields(), SEG)
    assert (upload.uploaded_uri, upload.crc) == (f"file:///ds/t/{SEG}.tmp.{UUID}", 777)


def test_only_the_segments_own_uploads_are_moved():
    assert is_upload_key(f"t/{SEG}.tmp.{UUID}", "t", SEG)
    assert not is_upload_key(f"t/{SEG}.tmp.not-a-uuid", "t", SEG)
    assert not is_upload_key(f"t/{SEG}.tar.gz", "t", SEG)
    assert not is_upload_key(f"other/{SEG}.tmp.{UUID}", "t", SEG)
    assert not is_upload_key(f"t/t__0__4__20240501T1030Z.tmp.{UUID}", "t", SEG)
    assert not is_upload_key(None, "t", SEG)


def test_a_committing_record_adopts_the_servers_fields_and_keeps_its_maps():
    record = _committing().to_znrecord()
    record.map_fields["custom.map"] = {"k": "v"}
    upload = check_server_fields(_fields(), SEG)
    new = repaired_record(record, DeepStoreRepairKind.COMMITTING, upload, "http://c/segments/t/s")
    assert new is not None
    assert new.simple_fields["segment.realtime.status"] == "DONE"
    assert new.simple_fields["segment.crc"] == "777"
    assert new.simple_fields["segment.download.url"] == "http://c/segments/t/s"
    assert new.simple_fields["segment.flush.threshold.size"] == "1000"  # kept from ZooKeeper
    assert new.map_fields == {"custom.map": {"k": "v"}}
    assert record.simple_fields["segment.realtime.status"] == "COMMITTING"  # not mutated


def test_a_committing_record_refuses_other_offsets():
    record = _committing().to_znrecord()
    upload = check_server_fields(_fields(**{"segment.realtime.endOffset": "260"}), SEG)
    with pytest.raises(ValueError, match="endOffset"):
        repaired_record(record, DeepStoreRepairKind.COMMITTING, upload, "u")


def _peers_only(crc: int = 777) -> SegmentZKMetadata:
    return _committing().mark_done(
        end_offset="250",
        start_time_ms=1,
        end_time_ms=2,
        total_docs=150,
        crc=crc,
        data_crc=crc,
        size_in_bytes=10,
        download_url="",
    )


def test_a_done_record_only_gets_its_url():
    record = _peers_only().to_znrecord()
    upload = ServerUpload(_fields(**{"segment.total.docs": "1"}), "file:///x", 777)
    new = repaired_record(record, DeepStoreRepairKind.MISSING_URL, upload, "http://c/s")
    assert new is not None
    changed = {k for k in new.simple_fields if new.simple_fields[k] != record.simple_fields[k]}
    assert changed == {"segment.download.url"}
    assert new.simple_fields["segment.download.url"] == "http://c/s"


def test_a_done_record_takes_a_differing_crc():
    record = _peers_only(crc=5).to_znrecord()
    upload = ServerUpload(_fields(), "file:///x", 777)
    new = repaired_record(record, DeepStoreRepairKind.MISSING_URL, upload, "http://c/s")
    assert new is not None
    assert (new.simple_fields["segment.crc"], new.simple_fields["segment.data.crc"]) == (
        "777",
        "777",
    )


def test_a_record_repaired_meanwhile_is_left_alone():
    upload = ServerUpload(_fields(), "file:///x", 777)
    done_with_url = _peers_only().to_znrecord()
    done_with_url.simple_fields["segment.download.url"] = "http://c/segments/t/s"
    assert repaired_record(done_with_url, DeepStoreRepairKind.MISSING_URL, upload, "u") is None
    assert repaired_record(done_with_url, DeepStoreRepairKind.COMMITTING, upload, "u") is None
    committing = _committing().to_znrecord()
    assert repaired_record(committing, DeepStoreRepairKind.MISSING_URL, upload, "u") is None


def test_committed_and_deleted_segments_leave_the_committing_list():
    listed = ["a", "b", "c", "d", "e", "f"]
    statuses = {"a": "DONE", "b": "COMMITTING", "c": None, "d": "IN_PROGRESS", "e": "UPLOADED"}
    assert stale_committing(listed, statuses) == ["a", "c", "e"]  # "f" was not read: kept
