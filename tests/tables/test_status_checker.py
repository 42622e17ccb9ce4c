"""The SegmentStatusChecker over the database mirror (`tables.status_checker`, the task's body):
what it reads from the mirror rows and the stream, and the rows it writes."""

from __future__ import annotations

import time

import pytest

from tables.domain.periods import SEGMENT_STATUS_CHECKER, TASK_ERROR_COUNTER, TASK_RUN_COUNTER
from tables.domain.table_config import switch_stream_type
from tables.models import DurableCounter, MirroredInstance, TableStatusCheck
from tables.periodic_runs import check_status
from tables.status_checker import check_tables
from tests.cluster_fixtures import load
from tests.console import mirror_factory as mf

pytestmark = pytest.mark.django_db

NOW = int(time.time() * 1000)
MINUTE = 60_000
WAIT_MS = 10 * MINUTE
OLD = NOW - 30 * MINUTE
A, B = "Server_a_8001", "Server_b_8002"


def _table(raw: str = "events", **fields):
    fields.setdefault("idealstate_version", 3)
    fields.setdefault("replication", 2)
    return mf.table(raw, **fields)


def _segment(owner, partition: int, sequence: int, state: str, **fields):
    replicas = {A: state, B: state}
    fields.setdefault("ideal_states", replicas)
    fields.setdefault("external_states", dict(fields["ideal_states"]))
    fields.setdefault("metadata_mtime_ms", OLD)
    fields.setdefault("creation_time_ms", OLD)
    return mf.segment(owner, partition, sequence, display_state=state, **fields)


@pytest.fixture
def servers_up() -> None:
    mf.instance(A)
    mf.instance(B)


def test_the_mirror_gives_every_gauge_and_the_details(servers_up):
    events = _table()
    _segment(events, 0, 0, "ONLINE", end_offset="100")
    _segment(events, 0, 1, "CONSUMING", metadata_mtime_ms=NOW - MINUTE)
    _segment(events, 1, 0, "ONLINE", end_offset="100", external_states={A: "ERROR", B: "ONLINE"})
    _segment(events, 2, 0, "ONLINE", end_offset="50", metadata_mtime_ms=NOW - 12 * MINUTE)
    # The servers last reported partition 1's stream at 100: caught up, not missing.
    mf.partition(events, 1, upstream_offset=100)

    summary = check_tables(NOW, WAIT_MS, "redis://unused")

    assert summary.checked == ["events_REALTIME"]
    row = TableStatusCheck.objects.get(table=events)
    assert row.segments_in_error_state == 1
    assert row.percent_segments_available == 100
    assert row.segments_with_less_replicas == 1
    assert (row.number_of_replicas, row.percent_of_replicas) == (1, 50)
    assert row.table_consumption_paused is False
    # No stream in the table config: partition 2 (ONLINE, offsets unknown) counts from its mtime.
    assert row.missing_consuming_total == 1
    assert row.missing_consuming_new_partitions == 0
    assert row.missing_consuming_max_minutes == 12
    assert row.stream_known is False
    assert row.details["errorReplicas"] == [[mf.llc_name("events", 1, 0), A]]
    assert row.details["missingConsumingPartitions"] == [2]
    assert abs(row.checked_at.timestamp() * 1000 - NOW) < 1000


def test_disabled_servers_do_not_serve(servers_up):
    events = _table()
    _segment(events, 0, 0, "ONLINE")
    mf.instance("Server_c_8003")
    MirroredInstance.objects.filter(name=B).update(enabled=False)
    check_tables(NOW, WAIT_MS, "redis://unused")
    row = TableStatusCheck.objects.get(table=events)
    assert (row.segments_with_less_replicas, row.number_of_replicas) == (1, 1)


def test_a_table_without_idealstate_loses_its_check_and_one_table_can_be_checked_alone():
    gone = _table("gone")
    kept = _table("kept", paused=True)
    _segment(kept, 0, 0, "ONLINE")
    check_tables(NOW, WAIT_MS, "redis://unused")
    assert TableStatusCheck.objects.filter(table=gone).exists()  # no segments: Pinot's defaults
    empty = TableStatusCheck.objects.get(table=gone)
    assert (empty.percent_segments_available, empty.missing_consuming_total) == (100, None)

    gone.idealstate_version = -1
    gone.save()
    summary = check_tables(NOW + 1000, WAIT_MS, "redis://unused", table="gone")
    assert summary.removed == ["gone_REALTIME"] and summary.checked == []
    assert not TableStatusCheck.objects.filter(table=gone).exists()
    assert TableStatusCheck.objects.get(table=kept).table_consumption_paused is True


@pytest.mark.redis
def test_the_stream_is_asked_for_its_partitions_and_largest_offsets(servers_up, topic, settings):
    """The topic has 4 partitions; partition p holds p + 1 rows at offsets 1.. (next: p + 2)."""
    config = switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic)
    events = _table("githubEvents", config=config)
    _segment(events, 0, 0, "CONSUMING")
    _segment(events, 1, 0, "ONLINE", end_offset="3")  # caught up: the next offset is 3
    behind = NOW - 25 * MINUTE - 10_000
    _segment(events, 2, 0, "ONLINE", end_offset="2", creation_time_ms=behind)  # 2 rows wait
    # Partition 3 has no segment at all: a new partition.
    check_tables(NOW, WAIT_MS, settings.REDIS_URL)
    row = TableStatusCheck.objects.get(table=events)
    assert row.stream_known is True
    assert (row.missing_consuming_total, row.missing_consuming_new_partitions) == (2, 1)
    assert row.missing_consuming_max_minutes == 25
    assert row.details["missingConsumingPartitions"] == [2, 3]


def test_the_task_body_counts_its_runs_by_task_name(servers_up):
    _segment(_table(), 0, 0, "ONLINE")
    before = DurableCounter.value_of(TASK_RUN_COUNTER, SEGMENT_STATUS_CHECKER)
    assert check_status()["checked"] == 1
    assert check_status("events")["checked"] == 1
    assert DurableCounter.value_of(TASK_RUN_COUNTER, SEGMENT_STATUS_CHECKER) == before + 2
    assert DurableCounter.value_of(TASK_ERROR_COUNTER, SEGMENT_STATUS_CHECKER) == 0


def test_without_the_stream_the_mirrors_partition_count_finds_new_partitions(servers_up):
    """The stream cannot be read here (no stream config): the partition count the mirror sync
    last read stands in, so a partition with no segment yet still counts as new."""
    events = _table(stream_partitions=3)
    _segment(events, 0, 0, "CONSUMING")
    _segment(events, 1, 0, "ONLINE", end_offset="40", creation_time_ms=NOW - 9 * MINUTE)
    mf.partition(events, 1, upstream_offset=None)  # nobody consumes it: its end is unknown
    check_tables(NOW, WAIT_MS, "redis://unused")
    row = TableStatusCheck.objects.get(table=events)
    assert row.stream_known is True
    assert (row.missing_consuming_total, row.missing_consuming_new_partitions) == (2, 1)
    assert row.missing_consuming_max_minutes == 30  # partition 1 by its mtime (OLD): fallback
    assert row.details["missingConsumingPartitions"] == [1, 2]
