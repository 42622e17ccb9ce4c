"""A flush-threshold change by `PUT /tables/{t}` sizes the very next segment (reference §6.6).

The controller keeps one flush-threshold updater per table and topic in memory, so that the
size-based autotune can learn across commits; a config change must not be hidden behind it until a
restart. Real ZooKeeper and Redis; the commits go through the controller's own commit steps.
"""

from __future__ import annotations

import time

import pytest
from rest_framework.test import APIClient

from tables.cluster.context import ClusterContext
from tables.controller.llc import CommittingSegment, LLCSegmentManager
from tables.domain.flush import CommittedSegmentStats, make_updater
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentZKMetadata
from tables.domain.table_config import switch_stream_type
from tables.zk.records import read_record
from tests.cluster_fixtures import PATHS, load

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]
TABLE = "githubEvents_REALTIME"
FLUSH = "realtime.segment.flush.threshold."
# 4 partitions x 2 replicas over 3 servers: at most 3 partitions per server.
PARTITIONS_PER_SERVER = 3


@pytest.fixture
def api(admin_user) -> APIClient:
    client = APIClient()
    client.force_authenticate(admin_user)
    return client


@pytest.fixture
def llc(servers, zk, settings) -> LLCSegmentManager:
    return LLCSegmentManager(ClusterContext(zk, PATHS, settings.REDIS_URL))


def table_config(topic: str, flush: dict[str, str]) -> dict:
    """githubEvents on Redis, replication 2, with exactly the flush keys in `flush`."""
    rest = switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic)
    rest["segmentsConfig"]["replication"] = "2"
    stream = rest["ingestionConfig"]["streamIngestionConfig"]["streamConfigMaps"][0]
    for key in [k for k in stream if k.startswith(FLUSH)]:
        del stream[key]
    stream.update(flush)
    return rest


def meta(zk, segment: str) -> SegmentZKMetadata:
    return SegmentZKMetadata.from_znrecord(read_record(zk, PATHS.segment(TABLE, segment)).record)


def consuming_segment(zk, partition: int) -> str:
    ideal = read_record(zk, PATHS.idealstate(TABLE)).record
    return next(
        segment
        for segment, replicas in sorted(ideal.map_fields.items())
        if LLCSegmentName.parse(segment).partition_group_id == partition
        and set(replicas.values()) == {"CONSUMING"}
    )


def commit(llc: LLCSegmentManager, zk, docs: int = 100, size: int = 5_000) -> str:
    """Commit partition 0's consuming segment; the name of the next CONSUMING segment."""
    segment = consuming_segment(zk, 0)
    start = int(meta(zk, segment).start_offset)
    committing = CommittingSegment(
        segment_name=segment,
        end_offset=start + docs,
        total_docs=docs,
        start_time_ms=1_626_847_200_000,
        end_time_ms=1_626_850_800_000,
        crc=1,
        data_crc=1,
        size_bytes=size,
        download_url=f"http://controller/segments/githubEvents/{segment}",
        row_count=docs,
    )
    next_name = llc.commit_segment_metadata("githubEvents", committing)
    assert next_name is not None
    assert consuming_segment(zk, 0) == next_name
    return next_name


def put(api: APIClient, topic: str, flush: dict[str, str]) -> None:
    resp = api.put("/tables/githubEvents", table_config(topic, flush), format="json")
    assert resp.status_code == 200, resp.content


def fresh_threshold(flush: dict[str, str], committed: SegmentZKMetadata, docs: int, size: int):
    """What a newly made updater for `flush` gives after learning from that one commit."""
    updater = make_updater(flush)
    stats = CommittedSegmentStats(
        total_docs=docs,
        size_bytes=size,
        creation_time_ms=committed.creation_time,
        threshold=committed.flush_threshold_size,
        pre_commit_rows=docs,
    )
    updater.on_segment_commit(stats, int(time.time() * 1000))
    return updater.threshold_for_new_segment(PARTITIONS_PER_SERVER, stats)


def test_a_put_of_new_flush_thresholds_sizes_the_next_segment(api, llc, zk, topic):
    assert api.post("/schemas", load("githubEvents_schema.json"), format="json").status_code == 200
    resp = api.post("/tables", table_config(topic, {FLUSH + "rows": "300"}), format="json")
    assert resp.status_code == 200, resp.content
    assert meta(zk, commit(llc, zk)).flush_threshold_size == 300 // PARTITIONS_PER_SERVER

    # threshold.rows: the table-wide budget, divided among a server's partitions
    put(api, topic, {FLUSH + "rows": "600"})
    assert meta(zk, commit(llc, zk)).flush_threshold_size == 600 // PARTITIONS_PER_SERVER

    # threshold.segment.rows: a fixed count per segment
    put(api, topic, {FLUSH + "segment.rows": "250"})
    assert meta(zk, commit(llc, zk)).flush_threshold_size == 250

    # threshold.rows 0 with segment.size and time: the size-based autotune
    autotune = {FLUSH + "rows": "0", FLUSH + "segment.size": "1000000", FLUSH + "time": "1h"}
    put(api, topic, autotune)
    committed = meta(zk, consuming_segment(zk, 0))
    next_name = commit(llc, zk, docs=40_000, size=800_000)
    expected = fresh_threshold(autotune, committed, 40_000, 800_000)
    # the desired 1,000,000 bytes at the learned 40,000 rows per 800,000 bytes
    assert meta(zk, next_name).flush_threshold_size == expected == 50_000

    # a smaller desired size: the same commit facts now give half the rows
    smaller = {**autotune, FLUSH + "segment.size": "500000"}
    put(api, topic, smaller)
    committed = meta(zk, consuming_segment(zk, 0))
    next_name = commit(llc, zk, docs=40_000, size=800_000)
    expected = fresh_threshold(smaller, committed, 40_000, 800_000)
    # 800,000 bytes is over 1.5 x the desired 500,000: half the rows
    assert meta(zk, next_name).flush_threshold_size == expected == 20_000


def test_a_put_that_keeps_the_thresholds_keeps_what_the_autotune_learned(api, llc, zk, topic):
    autotune = {FLUSH + "rows": "0", FLUSH + "segment.size": "1000000", FLUSH + "time": "1h"}
    assert api.post("/schemas", load("githubEvents_schema.json"), format="json").status_code == 200
    resp = api.post("/tables", table_config(topic, autotune), format="json")
    assert resp.status_code == 200, resp.content
    commit(llc, zk, docs=40_000, size=800_000)  # learns 0.05 rows per byte

    # The same thresholds (the time spelled otherwise) and another description: no new updater.
    same = {**autotune, FLUSH + "time": "60m"}
    rest = table_config(topic, same)
    rest["metadata"]["customConfigs"] = {"owner": "ingest team"}
    assert api.put("/tables/githubEvents", rest, format="json").status_code == 200

    committed = meta(zk, consuming_segment(zk, 0))
    next_name = commit(llc, zk, docs=60_000, size=1_000_000)
    # The learned ratio (0.05) is blended with this commit's (0.06) rather than started afresh.
    fresh = fresh_threshold(same, committed, 60_000, 1_000_000)
    got = meta(zk, next_name).flush_threshold_size
    assert got != fresh
    assert 50_000 < got < fresh
