"""The mirror during a pauseless commit: `segmentsMissingDownloadUrl` counts COMMITTING segments
and DONE ones without a download URL, and the partition of a commit running in the background
reads COMMITTING, not stalled or not consuming (tables.mirror.tables, tables.mirror.partitions).

The znodes are written as the lead controller writes them (round 2 §B.2): commit start marks the
segment COMMITTING with its end offset, creates the next segment's metadata and flips the
IdealState in one write (the segment ONLINE, the next one CONSUMING); commit end marks it DONE,
with an empty download URL after a peer-download commit; the deep-store repair fills it later.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tables import live_state
from tables.cluster.context import ClusterContext
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentZKMetadata
from tables.domain.znrecord import ZNRecord
from tables.mirror.sync import sync_cluster
from tables.models import MirroredSegment, MirroredTable, PartitionStatus
from tables.zk.records import create_record, read_record, update_record
from tables.zk.zookeeper import ZooKeeperStore
from tests.cluster_fixtures import PATHS, SERVERS
from tests.tables.mirror.test_sync import (
    NOW,
    TABLE,
    CountingClient,
    _converge,
    _create,
    _publish,
    _segments,
)

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]
URL = "http://controller/segments/githubEvents/{}"


@pytest.fixture
def counting(zk):
    return CountingClient(zk)


@pytest.fixture
def ctx(servers, counting, settings):
    return ClusterContext(ZooKeeperStore(counting), PATHS, settings.REDIS_URL, now_ms=lambda: NOW)


@pytest.fixture
def live_keys(redis_client):
    yield
    for server in SERVERS:
        redis_client.delete(live_state.key_for(PATHS.cluster, server))


def _metadata(zk, segment: str, change) -> None:
    path = PATHS.segment(TABLE, segment)
    update_record(zk, path, lambda r: change(SegmentZKMetadata.from_znrecord(r)).to_znrecord())


def _commit_start(zk, segment: str, end: int) -> str:
    """COMMITTING + end offset, the next segment's metadata, one IdealState write."""
    _metadata(zk, segment, lambda m: m.mark_committing(str(end)))
    llc = LLCSegmentName.parse(segment)
    assert llc is not None
    following = str(
        LLCSegmentName.create(llc.table_name, llc.partition_group_id, llc.sequence_number + 1, NOW)
    )
    fields = {
        "segment.realtime.status": "IN_PROGRESS",
        "segment.start.offset": str(end),
        "segment.creation.time": str(NOW),
    }
    create_record(zk, PATHS.segment(TABLE, following), ZNRecord(following, simple_fields=fields))

    def flip(record: ZNRecord) -> ZNRecord:
        replicas = record.map_fields[segment]
        record.map_fields[segment] = {server: "ONLINE" for server in replicas}
        record.map_fields[following] = {server: "CONSUMING" for server in replicas}
        return record

    update_record(zk, PATHS.idealstate(TABLE), flip)
    return following


def _commit_end(zk, segment: str, end: int, url: str) -> None:
    def done(meta: SegmentZKMetadata) -> SegmentZKMetadata:
        return meta.mark_done(
            end_offset=str(end),
            start_time_ms=1_626_847_200_000,
            end_time_ms=1_626_850_800_000,
            total_docs=100,
            crc=123,
            data_crc=123,
            size_in_bytes=5_000,
            download_url=url,
        )

    _metadata(zk, segment, done)


def _missing() -> int:
    return MirroredTable.objects.get(name=TABLE).missing_download_url


def _partition(number: int) -> PartitionStatus:
    return PartitionStatus.objects.get(table__name=TABLE, partition=number)


@pytest.fixture
def committing(ctx, zk, topic, redis_client, live_keys):
    """Partition 1's first segment COMMITTING, the next one consuming on both replicas."""
    _create(ctx, topic)
    _converge(zk)
    sync_cluster(ctx, now_ms=NOW)
    segment = next(s for s in _segments(zk) if s.startswith("githubEvents__1__"))
    start = int(MirroredSegment.objects.get(name=segment).start_offset)
    following = _commit_start(zk, segment, start + 100)
    _converge(zk)
    replicas = MirroredSegment.objects.get(name=segment).ideal_states
    for server in replicas:
        _publish(
            redis_client,
            server,
            [{"segmentName": following, "partition": 1, "currentOffset": start + 150}],
        )
    return segment, following, start + 100


def test_a_pauseless_commit_is_counted_and_its_partition_reads_committing(ctx, zk, committing):
    segment, following, _end = committing

    report = sync_cluster(ctx, now_ms=NOW + 40_000)

    assert report.ok, report.lines()
    row = MirroredSegment.objects.get(name=segment)
    assert (row.status, row.download_url) == ("COMMITTING", "")
    assert set(row.ideal_states.values()) == {"ONLINE"}
    assert _missing() == 1
    status = _partition(1)
    assert status.consuming_segment == following
    assert (status.verdict, status.health) == ("COMMITTING", "GOOD")
    assert status.verdict_detail.startswith(f"{segment} COMMITTING for ")
    assert f"{following} consuming" in status.verdict_detail
    assert {_partition(p).verdict for p in (0, 2, 3)} != {"COMMITTING"}


def test_commit_end_without_a_download_url_still_counts_until_the_url_is_filled(
    ctx, zk, committing, counting
):
    segment, _following, end = committing
    sync_cluster(ctx, now_ms=NOW + 1000)

    _commit_end(zk, segment, end, "")  # a peer-download commit
    sync_cluster(ctx, now_ms=NOW + 2000)
    row = MirroredSegment.objects.get(name=segment)
    assert (row.status, row.download_url) == ("DONE", "")
    assert _missing() == 1
    assert _partition(1).verdict != "COMMITTING"

    # The deep-store repair fills the URL; the table is read again for another reason (a
    # partition paused): the DONE segment without a URL is read again with it.
    _metadata(zk, segment, lambda m: replace(m, download_url=URL.format(segment)))
    update_record(
        zk,
        PATHS.idealstate(TABLE),
        lambda r: ZNRecord(r.id, {**r.simple_fields, "note": "changed"}, r.map_fields),
    )
    counting.reset()
    sync_cluster(ctx, now_ms=NOW + 3000)
    assert segment in counting.segment_reads()
    assert MirroredSegment.objects.get(name=segment).download_url == URL.format(segment)
    assert _missing() == 0
    assert read_record(zk, PATHS.segment(TABLE, segment)).record.simple_fields[
        "segment.download.url"
    ] == URL.format(segment)


def test_the_url_filled_by_the_repair_alone_is_seen(ctx, zk, committing):
    segment, _following, end = committing
    _commit_end(zk, segment, end, "")
    sync_cluster(ctx, now_ms=NOW + 1000)
    assert _missing() == 1

    _metadata(zk, segment, lambda m: replace(m, download_url=URL.format(segment)))
    sync_cluster(ctx, now_ms=NOW + 2000)
    assert _missing() == 0
