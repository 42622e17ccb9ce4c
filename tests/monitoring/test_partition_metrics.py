"""The controller-side /metrics families that tell the truth per partition
(`monitoring.partition_metrics`) and the servers each tag needs: the most advanced replica's and
the stream's offsets (each row once), paused partitions (table pause and pausedPartitions) with
their lag labelled, replicas up against the table's replication, live servers per tag. Mirror
rows are written straight into the database, as in test_controller_metrics.py."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.utils import timezone

from monitoring import stream_offsets
from tables.models import MirroredInstance, MirroredSegment, PartitionStatus
from tables.redisconn import get_redis
from tables.streams.redis_streams import RedisTopicAdmin
from tests.ingest_cluster import table_config
from tests.monitoring.test_controller_metrics import (
    labels,
    make_table,
    mirror_leadership,  # noqa: F401 - the autouse fixture: leadership from the mirror only
    samples,
    scrape,
)

pytestmark = pytest.mark.django_db

TAG = "DefaultTenant_REALTIME"
S1, S2, S3 = (f"Server_127.0.0.1_{port}" for port in (8098, 8099, 8100))


def _server(name: str, live: bool, tags: list[str]) -> None:
    MirroredInstance.objects.create(
        name=name, kind="SERVER", live=live, tags=tags, last_synced=timezone.now()
    )


def _partition(
    table, partition: int, consuming: str, replicas: dict, offsets=(None, None), latest: str = ""
) -> None:
    current, upstream = offsets
    PartitionStatus.objects.create(
        table=table,
        partition=partition,
        consuming_segment=consuming,
        latest_segment=latest or consuming,
        replicas=replicas,
        current_offset=current,
        upstream_offset=upstream,
        records_lag=(upstream - current) if upstream is not None else 0,
        verdict="OK",
        last_synced=timezone.now(),
    )


@pytest.fixture
def two_partitions():
    """Replication 3 on three servers, one of them dead (its view still says CONSUMING);
    partition 1 paused on its own (pausedPartitions) and without a CONSUMING segment."""
    _server(S1, True, [TAG])
    _server(S2, True, [TAG])
    _server(S3, False, [TAG])
    table = make_table("events", tenant=TAG, replication=3, paused_partitions=[1])
    states = {S1: {"state": "CONSUMING"}, S2: {"state": "OFFLINE"}, S3: {"state": "CONSUMING"}}
    _partition(table, 0, "events__0__4__20240101T0000Z", states, (1200, 1250))
    online = {server: {"state": "ONLINE"} for server in (S1, S2, S3)}
    _partition(table, 1, "", online, (900, 2900))
    return table


def test_partition_figures_count_each_row_once_and_tell_paused_from_stalled(client, two_partitions):
    got = samples(scrape(client))
    p0 = labels(table="events", tableType="REALTIME", partition="0")
    p1 = labels(table="events", tableType="REALTIME", partition="1")
    table = labels(table="events", tableType="REALTIME")

    assert got["pinot_console_partition_consumed_offset"] == {p0: 1200, p1: 900}
    assert got["pinot_console_partition_upstream_offset"] == {p0: 1250, p1: 2900}
    # The partition-level pause: its own gauge, the table's count, and its lag reported as
    # waiting rows labelled paused="true" (the other partition's is paused="false").
    assert got["pinot_console_partition_paused"] == {p0: 0, p1: 1}
    assert got["pinot_console_paused_partitions"] == {table: 1}
    assert got["pinot_controller_tableConsumptionPaused_Value"] == {table: 0}
    assert got["pinot_controller_maxRecordsLag_Value"] == {
        labels(**dict(p0), paused="false"): 50,
        labels(**dict(p1), paused="true"): 2000,
    }
    # Partition 1 has no CONSUMING segment: counted (the mirror's own count leaves it out),
    # so the missing-consuming alert must leave paused partitions out itself.
    assert got["pinot_controller_missingConsumingSegmentTotalCount_Value"] == {table: 1}
    # S3 is dead (its CONSUMING is a stale view), S2 is OFFLINE: one replica of three is up.
    assert got["pinot_console_partition_replicas_up"] == {p0: 1, p1: 2}
    assert got["pinot_console_partition_replicas_expected"] == {p0: 3, p1: 3}
    assert got["pinot_console_servers_live"] == {labels(tag=TAG): 2}
    assert got["pinot_console_servers_needed"] == {labels(tag=TAG): 3}


def test_a_paused_table_pauses_every_partition(client, two_partitions):
    two_partitions.paused = True
    two_partitions.save(update_fields=["paused"])

    got = samples(scrape(client))

    p0 = labels(table="events", tableType="REALTIME", partition="0")
    p1 = labels(table="events", tableType="REALTIME", partition="1")
    assert got["pinot_console_partition_paused"] == {p0: 1, p1: 1}
    assert got["pinot_console_paused_partitions"] == {
        labels(table="events", tableType="REALTIME"): 2
    }
    assert {dict(k)["paused"] for k in got["pinot_controller_maxRecordsLag_Value"]} == {"true"}


def test_a_tag_without_live_servers_reads_0(client):
    make_table("events", tenant=TAG, replication=2)
    make_table("other", tenant="Other_REALTIME", replication=1)
    _server(S1, False, [TAG])

    got = samples(scrape(client))

    assert got["pinot_console_servers_live"] == {
        labels(tag=TAG): 0,
        labels(tag="Other_REALTIME"): 0,
    }
    assert got["pinot_console_servers_needed"] == {
        labels(tag=TAG): 2,
        labels(tag="Other_REALTIME"): 1,
    }


def _segment(table, name: str, partition: int, status: str, start: int, end: int | None) -> None:
    MirroredSegment.objects.create(
        table=table,
        name=name,
        partition=partition,
        sequence=0,
        display_state="ONLINE" if end is not None else "CONSUMING",
        status=status,
        start_offset=str(start),
        end_offset="" if end is None else str(end),
        last_synced=timezone.now(),
    )


@pytest.mark.redis
def test_quiet_partitions_read_the_stream_paused_ones_report_the_rows_waiting(client, topic):
    """Partition 1 is paused (its last segment DONE at offset 1), partition 0 has a consuming
    segment that no replica reports on (servers down or deaf): both take the stream's latest
    offset, and where consumption stands or resumes from the segment metadata."""
    table = make_table("events", config=table_config(topic), paused_partitions=[1])
    _segment(table, "events__0__0__20240101T0000Z", 0, "IN_PROGRESS", 0, None)
    _segment(table, "events__1__0__20240101T0000Z", 1, "DONE", 0, 1)
    _partition(table, 0, "events__0__0__20240101T0000Z", {})
    _partition(table, 1, "", {}, latest="events__1__0__20240101T0000Z")
    admin = RedisTopicAdmin(get_redis(settings.REDIS_URL))
    latest = admin.produce(topic, 1, [b'{"id": "2"}'] * 5, now_ms=0)[-1] + 1
    stream_offsets.forget()

    got = samples(scrape(client))

    p0 = labels(table="events", tableType="REALTIME", partition="0")
    p1 = labels(table="events", tableType="REALTIME", partition="1")
    assert got["pinot_console_partition_consumed_offset"] == {p0: 0, p1: 1}
    upstream = got["pinot_console_partition_upstream_offset"]
    assert upstream[p1] == latest and upstream[p0] >= 1
    assert got["pinot_controller_maxRecordsLag_Value"] == {
        labels(**dict(p0), paused="false"): upstream[p0],
        labels(**dict(p1), paused="true"): latest - 1,
    }
    assert got["pinot_controller_maxRecordAvailabilityLagMs_Value"] == {}  # no replica's time
