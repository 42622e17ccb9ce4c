"""The pauseless commit on the lead controller (reference §5.7, §6.3; round 2 §B.2, §B.3), on
the real ZooKeeper: the completion endpoints at Pinot's paths drive the pauseless FSM, whose
commit start makes the segment COMMITTING and the next one CONSUMING at once, and whose commit
end makes the segment DONE. The replicas of the githubEvents table (replication 2, peer download
over http) are played by the test."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

import pytest
from django.test import Client

from console.api import completion
from tables import builds
from tables.cluster import context
from tables.controller import completion_trust
from tables.controller.llc import (
    COMMITTING_SEGMENTS,
    CommitRejected,
    CommittingSegment,
    LLCSegmentManager,
    committing_segments,
)
from tables.controller.resources import ResourceManager
from tables.domain.idealstate import PauseState, with_pause_state, with_paused_partitions
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentZKMetadata
from tables.domain.table_config import switch_stream_type
from tables.ledger import verify_table
from tables.models import DurableCounter
from tables.redisconn import get_redis
from tables.security import cluster_token
from tables.segments.segment_format import pack_creation_meta
from tables.streams.redis_streams import RedisTopicAdmin
from tables.zk.records import read_record, update_record
from tests.cluster_fixtures import PATHS, load
from tests.console.test_completion_protocol import (
    creation_meta_file,
    properties_file,
    tmp_upload,
)
from tests.tables.leaders import lead_every_partition

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]
TABLE = "githubEvents_REALTIME"
ME = "Controller_127.0.0.1_9000"
VIP = "http://controller:9000"
ROWS = 200  # produced to every partition, so the offsets the tests report exist in the stream
GUARD_MS = 300_000  # max.segment.completion.time.millis default


class Clock:
    """The controller's clock: real time plus what the test adds."""

    def __init__(self) -> None:
        self.offset_ms = 0

    def __call__(self) -> int:
        return int(time.time() * 1000) + self.offset_ms


@pytest.fixture
def clock(monkeypatch):
    """Every ClusterContext the completion endpoints make reads this clock."""
    found = Clock()
    original = context.current
    monkeypatch.setattr(context, "current", lambda: dataclasses.replace(original(), now_ms=found))
    return found


@pytest.fixture(autouse=True)
def fresh_manager(settings, monkeypatch):
    """FSMs live in the process: each test starts with none."""
    monkeypatch.setattr(completion_trust, "FLUSH_EVERY_S", 0)
    settings.CONTROLLER_INSTANCE_ID = ME
    settings.CONTROLLER_VIP_URL = VIP
    completion._manager.cache_clear()
    yield
    completion._manager.cache_clear()


def pauseless_table(topic: str) -> dict:
    rest = switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic)
    rest["segmentsConfig"]["replication"] = "2"
    rest["segmentsConfig"]["peerSegmentDownloadScheme"] = "http"
    rest["ingestionConfig"]["streamIngestionConfig"]["pauselessConsumptionEnabled"] = True
    return rest


@pytest.fixture
def table(servers, topic, zk, settings, clock):
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    assert manager.add_table(pauseless_table(topic)).pauseless_enabled
    lead_every_partition(zk, ME)
    admin = RedisTopicAdmin(get_redis(settings.REDIS_URL))
    admin.produce_many(topic, {p: [b'{"id": "2"}'] * ROWS for p in range(4)}, now_ms=0)
    return zk


def server() -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {cluster_token()}")


def _segment(zk, partition: int) -> tuple[str, list[str], int]:
    ideal = read_record(zk, PATHS.idealstate(TABLE)).record
    segment = next(
        s for s in sorted(ideal.map_fields) if s.startswith(f"githubEvents__{partition}__")
    )
    return segment, sorted(ideal.map_fields[segment]), int(_meta(zk, segment).start_offset)


def _meta(zk, segment: str) -> SegmentZKMetadata:
    return SegmentZKMetadata.from_znrecord(read_record(zk, PATHS.segment(TABLE, segment)).record)


def _ideal(zk) -> dict[str, dict[str, str]]:
    return read_record(zk, PATHS.idealstate(TABLE)).record.map_fields


def _partition_segments(zk, partition: int) -> list[str]:
    return sorted(
        s
        for s in zk.get_children(PATHS.segments(TABLE))
        if s.startswith(f"githubEvents__{partition}__")
    )


def _committing_list(zk) -> list[str]:
    found = read_record(zk, PATHS.pauseless_debug(TABLE))
    return found.record.list_fields.get(COMMITTING_SEGMENTS, []) if found else []


def _params(instance: str, segment: str, offset: int, **extra) -> dict:
    return {"instance": instance, "name": segment, "streamPartitionMsgOffset": offset, **extra}


def _consumed(instance: str, segment: str, offset: int, reason: str = "rowLimit") -> dict:
    return (
        server().get("/segmentConsumed", _params(instance, segment, offset, reason=reason)).json()
    )


def _commit_start(instance: str, segment: str, offset: int) -> dict:
    return server().get("/segmentCommitStart", _params(instance, segment, offset)).json()


def _commit_end(instance: str, segment: str, offset: int, crc: int = 777) -> dict:
    """The committer's segmentCommitEndWithMetadata after its upload to the deep store."""
    store = builds.deep_store()
    upload = store.uri_for(tmp_upload(store, segment))
    files = {
        "metadata.properties": properties_file(
            {
                "segment.total.docs": "100",
                "segment.start.time": "1626847200000",
                "segment.end.time": "1626850800000",
            }
        ),
        "creation.meta": creation_meta_file(pack_creation_meta(crc, 1626847200000)),
    }
    query = "&".join(
        f"{k}={v}"
        for k, v in _params(instance, segment, offset, location=upload, segmentSizeBytes=4).items()
    )
    return server().post(f"/segmentCommitEndWithMetadata?{query}", files).json()


def _start_commit(zk, partition: int, rows: int = 100) -> tuple[str, list[str], int]:
    """The winner gets COMMIT and starts the commit; returns (segment, replicas, end offset)."""
    segment, (a, b), start = _segment(zk, partition)
    end = start + rows
    assert _consumed(a, segment, end)["status"] == "COMMIT"
    assert _commit_start(a, segment, end)["status"] == "COMMIT_CONTINUE"
    return segment, [a, b], end


# --- the protocol -------------------------------------------------------------------------------


def test_commit_start_makes_it_committing_and_the_next_segment_consuming(table):
    zk = table
    segment, (a, b), start = _segment(zk, 0)
    end = start + 100
    commit = _consumed(a, segment, end)
    assert (commit["status"], commit["streamPartitionMsgOffset"]) == ("COMMIT", str(end))
    # Before commit start the other replica at the winning offset holds, as in blocking mode.
    assert _consumed(b, segment, end)["status"] == "HOLD"

    assert _commit_start(a, segment, end)["status"] == "COMMIT_CONTINUE"

    meta = _meta(zk, segment)
    assert (meta.status, meta.end_offset) == ("COMMITTING", str(end))
    # nothing of the build yet
    assert (meta.crc, meta.download_url, meta.total_docs, meta.size_in_bytes) == (None,) * 4
    (following,) = [s for s in _partition_segments(zk, 0) if s != segment]
    assert LLCSegmentName.parse(following).sequence_number == 1
    assert (_meta(zk, following).status, _meta(zk, following).start_offset) == (
        "IN_PROGRESS",
        str(end),
    )
    ideal = _ideal(zk)
    assert ideal[segment] == {a: "ONLINE", b: "ONLINE"}
    assert ideal[following] == {a: "CONSUMING", b: "CONSUMING"}
    assert _committing_list(zk) == [segment]
    assert read_record(zk, PATHS.pauseless_debug(TABLE)).record.id == TABLE
    # Step 0 (the debug list) comes last, after the IdealState write the servers wait for.
    written = [zk.exists(p).mzxid for p in (PATHS.idealstate(TABLE), PATHS.pauseless_debug(TABLE))]
    assert written[0] < written[1]

    # The other replica at the winning offset keeps its copy; one behind catches up.
    assert _consumed(b, segment, end) == {
        "status": "KEEP",
        "streamPartitionMsgOffset": str(end),
        "buildTimeSec": -1,
        "isSplitCommitType": True,
    }
    catch_up = _consumed(b, segment, end - 5)
    assert (catch_up["status"], catch_up["streamPartitionMsgOffset"]) == ("CATCH_UP", str(end))


def test_commit_end_makes_it_done_with_the_built_segments_facts(table, caplog, settings):
    zk = table
    segment, (a, b), end = _start_commit(zk, 1)
    with caplog.at_level(logging.INFO, logger="tables.controller.llc"):
        assert _commit_end(a, segment, end)["status"] == "COMMIT_SUCCESS"

    meta = _meta(zk, segment)
    assert (meta.status, meta.end_offset, meta.total_docs, meta.crc, meta.size_in_bytes) == (
        "DONE",
        str(end),
        100,
        777,
        4,
    )
    assert meta.download_url == f"{VIP}/segments/githubEvents/{segment}"
    assert (meta.start_time, meta.end_time, meta.time_unit) == (
        1626847200000,
        1626850800000,
        "MILLISECONDS",
    )
    assert _committing_list(zk) == []
    assert committing_segments(context.current(), TABLE) == []
    (following,) = [s for s in _partition_segments(zk, 1) if s != segment]
    logged = [r.getMessage() for r in caplog.records]
    assert f"committed {segment} at offset {end} (next: {following})" in logged
    report = verify_table(context.current(), TABLE)
    assert report.ok, report.problems
    assert report.segments == 1 and report.open_segments == 4

    # The FSM is gone; a new one starts COMMITTED from ZooKeeper.
    assert _consumed(b, segment, end)["status"] == "KEEP"
    assert _consumed(b, segment, end - 1)["status"] == "DISCARD"


def test_a_peer_download_commit_is_done_with_an_empty_download_url(table):
    zk = table
    segment, (a, _), end = _start_commit(zk, 2)
    files = {
        "metadata.properties": properties_file({"segment.total.docs": "100"}),
        "creation.meta": creation_meta_file(pack_creation_meta(55, 1)),
    }
    query = "&".join(
        f"{k}={v}" for k, v in _params(a, segment, end, location=f"peer:///{segment}").items()
    )
    answer = server().post(f"/segmentCommitEndWithMetadata?{query}", files).json()
    assert answer["status"] == "COMMIT_SUCCESS"
    meta = _meta(zk, segment)
    assert (meta.status, meta.crc, meta.download_url) == ("DONE", 55, "")


def test_commit_end_past_the_guard_fails_and_leaves_it_committing(table, clock):
    zk = table
    segment, (a, _), end = _start_commit(zk, 3)
    before = read_record(zk, PATHS.segment(TABLE, segment))
    clock.offset_ms = GUARD_MS + 5_000  # later than COMMITTING's mtime + 5 min

    assert _commit_end(a, segment, end)["status"] == "FAILED"

    after = read_record(zk, PATHS.segment(TABLE, segment))
    assert after.version == before.version
    assert _meta(zk, segment).status == "COMMITTING"
    assert _committing_list(zk) == [segment]
    assert DurableCounter.value_of("llcStateMachineAborts", "githubEvents") == 1
    # A new round for the segment fails at commit start (still COMMITTING): left to the healer.
    ideal = read_record(zk, PATHS.idealstate(TABLE))
    assert _consumed(a, segment, end)["status"] == "COMMIT"
    assert _commit_start(a, segment, end)["status"] == "FAILED"
    assert read_record(zk, PATHS.idealstate(TABLE)).version == ideal.version


@pytest.mark.parametrize("pause", ["table", "partition"])
def test_a_paused_partition_commits_without_a_next_segment(table, pause):
    zk = table

    def paused(record):
        if pause == "table":
            return with_pause_state(record, PauseState(paused=True, comment="swap topic"))
        return with_paused_partitions(record, {0})

    update_record(zk, PATHS.idealstate(TABLE), paused)
    segment, (a, b), end = _start_commit(zk, 0)

    assert _meta(zk, segment).status == "COMMITTING"
    assert _partition_segments(zk, 0) == [segment]  # step 2's metadata was removed again
    ideal = _ideal(zk)
    assert ideal[segment] == {a: "ONLINE", b: "ONLINE"}
    assert [s for s in ideal if s.startswith("githubEvents__0__")] == [segment]
    assert _commit_end(a, segment, end)["status"] == "COMMIT_SUCCESS"
    assert _meta(zk, segment).status == "DONE"
    assert _partition_segments(zk, 0) == [segment]


# --- the segment manager directly ----------------------------------------------------------------


def _llc() -> LLCSegmentManager:
    return LLCSegmentManager(context.current())


def test_commit_start_of_a_segment_not_in_progress_is_refused(table, settings):
    zk = table
    segment, _, end = _start_commit(zk, 1)
    ideal = read_record(zk, PATHS.idealstate(TABLE))
    with pytest.raises(CommitRejected, match="is COMMITTING, not IN_PROGRESS"):
        _llc().commit_segment_metadata_to_committing(TABLE, segment, end + 10)
    assert _meta(zk, segment).end_offset == str(end)
    assert read_record(zk, PATHS.idealstate(TABLE)).version == ideal.version


def test_commit_end_of_a_segment_not_committing_is_refused(table, settings):
    zk = table
    segment, _, start = _segment(zk, 2)
    built = CommittingSegment(segment, start + 5, 5, 1, 2, 3, 3, 10, "http://x/y")
    with pytest.raises(CommitRejected, match="is IN_PROGRESS, not COMMITTING"):
        _llc().commit_segment_metadata_to_done(TABLE, built)
    assert _meta(zk, segment).status == "IN_PROGRESS"


def test_segment_consumed_asking_to_start_commits_in_one_call(table):
    zk = table
    segment, (a, b), start = _segment(zk, 1)
    end = start + 100
    query = _params(a, segment, end, reason="rowLimit", startCommit="true")

    answer = server().get("/segmentConsumed", query).json()

    assert (answer["status"], answer["streamPartitionMsgOffset"]) == ("COMMIT", str(end))
    # Commit start ran in that call: COMMITTING, the next segment made and in the IdealState.
    assert (_meta(zk, segment).status, _meta(zk, segment).end_offset) == ("COMMITTING", str(end))
    (following,) = [s for s in _partition_segments(zk, 1) if s != segment]
    ideal = read_record(zk, PATHS.idealstate(TABLE))
    assert ideal.record.map_fields[following] == {a: "CONSUMING", b: "CONSUMING"}
    assert segment in _committing_list(zk)
    # The winner's own commit start then changes nothing and answers COMMIT_CONTINUE.
    assert _commit_start(a, segment, end)["status"] == "COMMIT_CONTINUE"
    assert read_record(zk, PATHS.idealstate(TABLE)).version == ideal.version
    assert _partition_segments(zk, 1) == sorted([segment, following])
    assert _commit_end(a, segment, end)["status"] == "COMMIT_SUCCESS"
    assert _meta(zk, segment).status == "DONE"


def test_a_failed_idealstate_write_removes_the_next_segments_metadata(table, settings):
    zk = table
    segment, (a, b), start = _segment(zk, 3)

    def offline(record):
        out = record.copy()
        out.map_fields[segment] = {a: "OFFLINE", b: "OFFLINE"}
        return out

    update_record(zk, PATHS.idealstate(TABLE), offline)
    with pytest.raises(CommitRejected, match="no CONSUMING replica"):
        _llc().commit_segment_metadata_to_committing(TABLE, segment, start + 10)
    assert _partition_segments(zk, 3) == [segment]
    # Pinot leaves the segment COMMITTING (and listed) for the healer.
    assert _meta(zk, segment).status == "COMMITTING"
    assert _committing_list(zk) == [segment]


def test_concurrent_commits_of_every_partition_all_land_in_the_committing_list(table, settings):
    zk = table
    segments = [_segment(zk, p) for p in range(4)]
    errors: list[Exception] = []

    def start(segment: str, offset: int) -> None:
        try:
            _llc().commit_segment_metadata_to_committing(TABLE, segment, offset)
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(s, o + 50)) for s, _, o in segments]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(_committing_list(zk)) == sorted(s for s, _, _ in segments)
    consuming = [s for s, r in _ideal(zk).items() if set(r.values()) == {"CONSUMING"}]
    assert sorted(LLCSegmentName.parse(s).partition_group_id for s in consuming) == [0, 1, 2, 3]

    for segment, _, start in segments:
        built = CommittingSegment(segment, start + 50, 50, 1, 2, 3, 3, 10, "http://x/y")
        _llc().commit_segment_metadata_to_done(TABLE, built)
    assert _committing_list(zk) == []
    assert verify_table(context.current(), TABLE).ok
