"""The controller's three commit steps against the real ZooKeeper (reference §6.2, §6.5, §6.6)."""

from __future__ import annotations

import threading
import time

import pytest

from tables.cluster.context import ClusterContext
from tables.controller.llc import CommitRejected, CommittingSegment, LLCSegmentManager
from tables.controller.resources import ResourceManager
from tables.domain.flush import CommittedSegmentStats, make_updater
from tables.domain.idealstate import PauseState, with_pause_state, with_paused_partitions
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentZKMetadata
from tables.domain.table_config import switch_stream_type
from tables.redisconn import get_redis
from tables.streams.base import provider_for
from tables.streams.redis_streams import DEFAULT_KEY_PREFIX
from tables.zk.records import read_record, update_record
from tests.cluster_fixtures import PATHS, load

pytestmark = [pytest.mark.zk, pytest.mark.redis]
TABLE = "githubEvents_REALTIME"


class Clock:
    def __init__(self) -> None:
        self.offset_ms = 0

    def __call__(self) -> int:
        return int(time.time() * 1000) + self.offset_ms


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def ctx(servers, zk, settings, clock):
    """The cluster of the test's chroot, with a clock the test can move."""
    return ClusterContext(zk, PATHS, settings.REDIS_URL, now_ms=clock)


def _create(ctx, topic, **stream_extra):
    rest = switch_stream_type(
        load("githubEvents_realtime_table_config.json"), "redis", topic, stream_extra
    )
    rest["segmentsConfig"]["replication"] = "2"
    manager = ResourceManager(ctx)
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(rest)
    return manager


def _segment(zk, partition: int) -> str:
    ideal = read_record(zk, PATHS.idealstate(TABLE)).record
    return next(s for s in sorted(ideal.map_fields) if s.startswith(f"githubEvents__{partition}__"))


def _meta(zk, segment: str) -> SegmentZKMetadata:
    return SegmentZKMetadata.from_znrecord(read_record(zk, PATHS.segment(TABLE, segment)).record)


def _committing(segment: str, end: int, docs: int = 100, size: int = 5_000) -> CommittingSegment:
    return CommittingSegment(
        segment_name=segment,
        end_offset=end,
        total_docs=docs,
        start_time_ms=1_626_847_200_000,
        end_time_ms=1_626_850_800_000,
        crc=123,
        data_crc=123,
        size_bytes=size,
        download_url=f"http://controller/segments/githubEvents/{segment}",
        row_count=docs,
    )


def test_a_commit_marks_done_creates_the_next_segment_and_updates_the_idealstate(ctx, zk, topic):
    _create(ctx, topic)
    segment = _segment(zk, 0)
    start = int(_meta(zk, segment).start_offset)
    replicas = read_record(zk, PATHS.idealstate(TABLE)).record.map_fields[segment]

    next_name = LLCSegmentManager(ctx).commit_segment_metadata(
        "githubEvents", _committing(segment, start + 100)
    )

    done = _meta(zk, segment)
    assert done.status == "DONE"
    assert done.end_offset == str(start + 100)
    assert done.total_docs == 100
    assert done.download_url.endswith(segment)
    parsed = LLCSegmentName.parse(next_name)
    assert (parsed.partition_group_id, parsed.sequence_number) == (0, 1)
    following = _meta(zk, next_name)
    assert following.status == "IN_PROGRESS"
    assert following.start_offset == str(start + 100)
    assert following.num_replicas == 2
    assert following.flush_threshold_size == 33  # threshold.size 100 over 3 partitions/server
    ideal = read_record(zk, PATHS.idealstate(TABLE)).record
    assert ideal.map_fields[segment] == {server: "ONLINE" for server in replicas}
    assert set(ideal.map_fields[next_name].values()) == {"CONSUMING"}
    assert set(ideal.map_fields[next_name]) == set(replicas)  # same partition, same servers
    assert ideal.simple_fields["NUM_PARTITIONS"] == "5"


def test_a_second_commit_of_the_same_segment_is_refused_and_changes_nothing(ctx, zk, topic):
    _create(ctx, topic)
    segment = _segment(zk, 1)
    manager = LLCSegmentManager(ctx)
    manager.commit_segment_metadata("githubEvents", _committing(segment, 50))
    before = read_record(zk, PATHS.idealstate(TABLE))
    with pytest.raises(CommitRejected, match="is DONE, not IN_PROGRESS"):
        manager.commit_segment_metadata("githubEvents", _committing(segment, 60))
    assert read_record(zk, PATHS.idealstate(TABLE)).version == before.version
    assert _meta(zk, segment).end_offset == "50"


@pytest.mark.parametrize("pause", ["table", "partition"])
def test_a_paused_table_or_partition_commits_without_a_next_segment(ctx, zk, topic, pause):
    _create(ctx, topic)

    def paused(record):
        if pause == "table":
            return with_pause_state(record, PauseState(paused=True, comment="swap topic"))
        return with_paused_partitions(record, {2})

    update_record(zk, PATHS.idealstate(TABLE), paused)
    segment = _segment(zk, 2)
    assert (
        LLCSegmentManager(ctx).commit_segment_metadata("githubEvents", _committing(segment, 10))
        is None
    )
    ideal = read_record(zk, PATHS.idealstate(TABLE)).record
    assert set(ideal.map_fields[segment].values()) == {"ONLINE"}
    assert [s for s in ideal.map_fields if s.startswith("githubEvents__2__")] == [segment]
    assert zk.get_children(PATHS.segments(TABLE)).count(segment) == 1
    assert not any(
        s.startswith("githubEvents__2__1__") for s in zk.get_children(PATHS.segments(TABLE))
    )


def test_a_partition_known_paused_commits_without_making_or_deleting_a_next_segment(ctx, zk, topic):
    """With the pause hint (the caller check's last IdealState) step 2 makes nothing: the
    segments folder sees no create and no delete (its children version is unchanged)."""
    _create(ctx, topic)
    update_record(zk, PATHS.idealstate(TABLE), lambda r: with_paused_partitions(r, {1}))
    segment = _segment(zk, 1)
    before = zk.exists(PATHS.segments(TABLE)).cversion
    manager = LLCSegmentManager(ctx, paused_hint=lambda table, partition: partition == 1)
    assert manager.commit_segment_metadata("githubEvents", _committing(segment, 10)) is None
    assert zk.exists(PATHS.segments(TABLE)).cversion == before
    ideal = read_record(zk, PATHS.idealstate(TABLE)).record
    assert set(ideal.map_fields[segment].values()) == {"ONLINE"}
    assert [s for s in ideal.map_fields if s.startswith("githubEvents__1__")] == [segment]


def test_a_stale_paused_hint_still_gives_a_resumed_partition_its_next_segment(ctx, zk, topic):
    _create(ctx, topic)
    segment = _segment(zk, 0)
    manager = LLCSegmentManager(ctx, paused_hint=lambda table, partition: True)  # not paused
    next_name = manager.commit_segment_metadata("githubEvents", _committing(segment, 10))
    assert next_name is not None and next_name.startswith("githubEvents__0__1__")
    ideal = read_record(zk, PATHS.idealstate(TABLE)).record
    assert set(ideal.map_fields[next_name].values()) == {"CONSUMING"}
    meta = _meta(zk, next_name)
    assert (meta.status, meta.start_offset) == ("IN_PROGRESS", "10")


def test_a_commit_past_the_completion_time_guard_is_refused(ctx, zk, topic, clock):
    _create(ctx, topic)
    segment = _segment(zk, 3)
    before = read_record(zk, PATHS.idealstate(TABLE))
    clock.offset_ms = 300_001 + 5_000  # later than the metadata's mtime + 5 min
    with pytest.raises(CommitRejected, match="MAX_SEGMENT_COMPLETION_TIME"):
        LLCSegmentManager(ctx).commit_segment_metadata("githubEvents", _committing(segment, 10))
    assert read_record(zk, PATHS.idealstate(TABLE)).version == before.version
    # The next segment's metadata made in step 2 was removed again.
    assert not any(
        s.startswith("githubEvents__3__1__") for s in zk.get_children(PATHS.segments(TABLE))
    )


def test_the_guard_reads_the_cluster_config(ctx, zk, topic):
    _create(ctx, topic)

    def shorter(record):
        out = record.copy()
        out.simple_fields["max.segment.completion.time.millis"] = "60000"
        return out

    update_record(zk, PATHS.cluster_config, shorter)
    assert LLCSegmentManager(ctx).max_completion_time_ms() == 60_000


def test_concurrent_commits_of_every_partition_all_land(ctx, zk, topic):
    _create(ctx, topic)
    segments = [_segment(zk, p) for p in range(4)]
    errors = []

    def commit(segment):
        try:
            LLCSegmentManager(ctx).commit_segment_metadata(
                "githubEvents", _committing(segment, 500)
            )
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=commit, args=(s,)) for s in segments]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    ideal = read_record(zk, PATHS.idealstate(TABLE)).record
    states = {s: set(r.values()) for s, r in ideal.map_fields.items()}
    assert sorted(s for s, v in states.items() if v == {"ONLINE"}) == segments
    consuming = [s for s, v in states.items() if v == {"CONSUMING"}]
    assert sorted(LLCSegmentName.parse(s).partition_group_id for s in consuming) == [0, 1, 2, 3]


def test_size_based_thresholds_learn_from_the_committed_segment(ctx, zk, topic):
    stream = {
        "realtime.segment.flush.threshold.rows": "0",
        "realtime.segment.flush.threshold.segment.size": "1M",
    }
    _create(ctx, topic, **stream)
    segment = _segment(zk, 0)
    first = _meta(zk, segment)
    next_name = LLCSegmentManager(ctx).commit_segment_metadata(
        "githubEvents", _committing(segment, 40_000, docs=40_000, size=400_000)
    )
    # The same updater, fed the same facts independently, sizes the next segment the same way.
    reference = make_updater({**stream})
    stats = CommittedSegmentStats(
        total_docs=40_000,
        size_bytes=400_000,
        creation_time_ms=first.creation_time,
        threshold=first.flush_threshold_size,
        pre_commit_rows=40_000,
    )
    reference.on_segment_commit(stats, int(time.time() * 1000))
    expected = reference.threshold_for_new_segment(3, stats)
    assert _meta(zk, next_name).flush_threshold_size == expected
    assert expected != first.flush_threshold_size


def test_a_replica_that_stops_consuming_goes_offline(ctx, zk, topic):
    _create(ctx, topic)
    segment = _segment(zk, 0)
    server = sorted(read_record(zk, PATHS.idealstate(TABLE)).record.map_fields[segment])[0]
    LLCSegmentManager(ctx).segment_stopped_consuming("githubEvents", segment, server)
    assert read_record(zk, PATHS.idealstate(TABLE)).record.map_fields[segment][server] == "OFFLINE"


def test_a_partition_past_the_streams_count_ends_with_a_shared_provider_too(
    ctx, zk, topic, settings
):
    """The stream shrinks to 2 partitions: a segment of partition 3 gets no next segment. Step 2
    counts them on the provider it is given, which stays open for the next commit."""
    _create(ctx, topic)
    stream_config = ResourceManager(ctx).get_table_config(TABLE).stream_config
    provider = provider_for(stream_config, ctx.redis_url)
    get_redis(settings.REDIS_URL).hset(f"{DEFAULT_KEY_PREFIX}{topic}:meta", "partitions", 2)
    asked: list[str] = []

    def streams(table: str):
        asked.append(table)
        return provider

    try:
        llc = LLCSegmentManager(ctx, streams=streams)
        ended = _segment(zk, 3)
        start = int(_meta(zk, ended).start_offset)
        assert llc.commit_segment_metadata("githubEvents", _committing(ended, start)) is None
        going = _segment(zk, 1)
        start = int(_meta(zk, going).start_offset)
        assert llc.commit_segment_metadata("githubEvents", _committing(going, start + 2))
        assert asked == [TABLE, TABLE]
        assert provider.partition_count() == 2  # still open
    finally:
        provider.close()
