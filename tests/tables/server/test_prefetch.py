"""A server's metadata prefetch (`tables.server.prefetch`) on a real ZooKeeper: the IdealState
watch sends the read of each new consuming segment of this instance, the transition takes the
answer once; nothing for other instances, known replicas, missing znodes, old reads, or a store
without asynchronous reads."""

from __future__ import annotations

import pytest

from tables.cluster.context import ClusterContext
from tables.domain.segment_metadata import SegmentZKMetadata
from tables.domain.znrecord import ZNRecord
from tables.server.prefetch import FRESH_S, MetadataPrefetch
from tables.zk.memory import MemoryStore
from tables.zk.paths import ClusterPaths
from tables.zk.records import create_record

pytestmark = pytest.mark.zk

PATHS = ClusterPaths("PrefetchCluster")
TABLE = "events_REALTIME"
ME, OTHER = "Server_a_1", "Server_b_2"
NEW = "events__0__1__20260101T0000Z"
KNOWN = "events__1__1__20260101T0000Z"
THEIRS = "events__2__1__20260101T0000Z"
NO_ZNODE = "events__3__1__20260101T0000Z"
ONLINE = "events__0__0__20260101T0000Z"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _meta(segment: str, start: int) -> ZNRecord:
    record = ZNRecord(segment)
    record.simple_fields.update(
        {"segment.realtime.status": "IN_PROGRESS", "segment.realtime.startOffset": str(start)}
    )
    return record


def _ideal() -> ZNRecord:
    record = ZNRecord(TABLE)
    record.map_fields.update(
        {
            NEW: {ME: "CONSUMING", OTHER: "CONSUMING"},
            KNOWN: {ME: "CONSUMING"},
            THEIRS: {OTHER: "CONSUMING"},
            NO_ZNODE: {ME: "CONSUMING"},
            ONLINE: {ME: "ONLINE"},
        }
    )
    return record


@pytest.fixture
def ctx(zk):
    context = ClusterContext(zk, PATHS, "redis://unused")
    for segment, start in ((NEW, 750), (KNOWN, 10), (THEIRS, 20), (ONLINE, 0)):
        create_record(context.client, PATHS.segment(TABLE, segment), _meta(segment, start))
    return context


def test_each_new_consuming_segment_of_this_instance_is_read_once(ctx):
    clock = Clock()
    prefetch = MetadataPrefetch(ME, lambda: ctx, lambda t, s: s != KNOWN, clock)
    prefetch.saw(TABLE, _ideal())
    assert prefetch.pending() == 2  # NEW and NO_ZNODE: not KNOWN, THEIRS or ONLINE
    prefetch.saw(TABLE, _ideal())  # the next change: the reads already sent are not sent again
    assert prefetch.pending() == 2
    found = prefetch.take(TABLE, NEW)
    assert isinstance(found, SegmentZKMetadata)
    assert (found.segment_name, found.start_offset) == (NEW, "750")
    assert prefetch.take(TABLE, NEW) is None  # once
    assert prefetch.take(TABLE, NO_ZNODE) is None  # the caller reads, and reports NotFound
    assert prefetch.take(TABLE, KNOWN) is None
    assert prefetch.pending() == 0


def test_an_old_read_is_not_used_and_is_dropped(ctx):
    clock = Clock()
    prefetch = MetadataPrefetch(ME, lambda: ctx, lambda t, s: True, clock)
    prefetch.saw(TABLE, _ideal())
    clock.now += FRESH_S + 0.1
    assert prefetch.take(TABLE, NEW) is None
    prefetch.saw(TABLE, None)  # a deleted IdealState: nothing
    prefetch.saw("other_REALTIME", ZNRecord("other_REALTIME"))  # drops the old reads
    assert prefetch.pending() == 0


def test_a_store_without_asynchronous_reads_prefetches_nothing():
    memory = ClusterContext(MemoryStore(), PATHS, "redis://unused")
    prefetch = MetadataPrefetch(ME, lambda: memory, lambda t, s: True)
    prefetch.saw(TABLE, _ideal())
    assert prefetch.pending() == 0
    assert prefetch.take(TABLE, NEW) is None
