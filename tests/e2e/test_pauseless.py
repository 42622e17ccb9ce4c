"""Pauseless consumption end to end: a controller, three servers, the Celery workers (Spark builds)
and a producer as real processes; a pauseless table (4 partitions x replication 2, peer download
scheme http) ingests steadily and every row ends in exactly one committed segment
(`verify_ledger --rows`).

What makes it pauseless is checked in ZooKeeper: the next segment of a partition is created at the
previous one's commit START (its `segment.creation.time`), before the previous one turns DONE (the
metadata znode's mtime), so its replicas consume while the previous segment is built; in blocking
mode the next segment is only created after DONE.
"""

from __future__ import annotations

import itertools

import pytest

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentStatus
from tables.zk.records import read_record
from tests.cluster_fixtures import PATHS, load
from tests.ingest_cluster import all_committed, produce, table_config, verify_rows
from tests.poll import wait_until

pytestmark = [
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.celery,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]
TABLE = "githubEvents_REALTIME"
ROWS = 6_000
SEGMENT_ROWS = 300


def pauseless_config(topic: str) -> dict:
    rest = table_config(
        topic,
        **{
            "realtime.segment.flush.threshold.segment.rows": str(SEGMENT_ROWS),
            "realtime.segment.flush.threshold.time": "10s",
        },
    )
    rest["segmentsConfig"]["peerSegmentDownloadScheme"] = "http"
    stream = rest["ingestionConfig"]["streamIngestionConfig"]
    stream["pauselessConsumptionEnabled"] = True
    return rest


def started_before_done(zk, table: str) -> tuple[int, int]:
    """(pairs of consecutive segments where the next one was created before the previous one
    turned DONE, pairs in all)."""
    manager = ResourceManager(context.current())
    by_partition: dict[int, list[tuple[int, str]]] = {}
    for segment in manager.segment_names(table):
        name = LLCSegmentName.parse(segment)
        if name is not None:
            by_partition.setdefault(name.partition_group_id, []).append(
                (name.sequence_number, segment)
            )
    early = total = 0
    for segments in by_partition.values():
        ordered = [s for _, s in sorted(segments)]
        for previous, following in itertools.pairwise(ordered):
            meta = manager.segment_metadata(table, previous)
            if meta.status is not SegmentStatus.DONE:
                continue
            done_at = read_record(zk, PATHS.segment(table, previous)).mtime_ms
            created = manager.segment_metadata(table, following).creation_time
            total += 1
            early += int(created is not None and created < done_at)
    return early, total


def test_a_pauseless_table_ingests_every_row_once_and_consumes_during_builds(
    ingest, topic, worker_zk
):
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(pauseless_config(topic))
    producer = produce(topic, ROWS, rate=500)
    output, _ = producer.communicate(timeout=300)
    assert producer.returncode == 0, output.decode(errors="replace")

    coverage = wait_until(
        lambda: all_committed(topic, TABLE), timeout=600, interval=1, what="all rows committed"
    )
    assert all(coverage[p][0] >= 3 for p in range(4)), coverage
    report = verify_rows(TABLE)
    assert "PROBLEM" not in report, report

    early, total = started_before_done(worker_zk, TABLE)
    assert total >= 8 and early == total, (early, total)

    # Every committed segment ends ONLINE on both replicas (they waited for the download URL).
    def all_online() -> bool:
        view = manager.externalview(TABLE)
        done = [
            s
            for s in manager.segment_names(TABLE)
            if manager.segment_metadata(TABLE, s).status is SegmentStatus.DONE
        ]
        return all(sorted(view.get(s, {}).values()) == ["ONLINE", "ONLINE"] for s in done)

    wait_until(all_online, timeout=120, interval=0.5, what="committed segments ONLINE x2")
    codes = ingest.stop()
    assert all(code == 0 for code in codes.values()), codes
