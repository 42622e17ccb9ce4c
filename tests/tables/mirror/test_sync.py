"""The ZooKeeper -> database mirror (tables.mirror.sync) against the real ZooKeeper and Redis."""

from __future__ import annotations

import io
from collections import Counter

import pytest
from django.core.management import CommandError, call_command

from tables import live_state
from tables.cluster.context import ClusterContext
from tables.controller.llc import CommittingSegment, LLCSegmentManager
from tables.controller.resources import ResourceManager
from tables.domain.idealstate import PauseState, with_pause_state, with_paused_partitions
from tables.domain.leadership import lead_partition
from tables.domain.table_config import switch_stream_type
from tables.domain.znrecord import ZNRecord
from tables.mirror.sync import sync_cluster
from tables.models import (
    ConsumptionSample,
    LeadControllerPartition,
    MirroredInstance,
    MirroredSegment,
    MirroredTable,
    MirrorState,
    PartitionStatus,
)
from tables.zk import codec
from tables.zk.batch_reads import CheckVersions, MultiRead
from tables.zk.records import create_record, read_record, update_record
from tables.zk.zookeeper import ZooKeeperStore
from tests.cluster_fixtures import PATHS, SERVERS, load

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]
TABLE = "githubEvents_REALTIME"
OTHER = "otherEvents_REALTIME"
NOW = 1_714_563_100_000
COUNTED = {"get", "get_async", "get_children_async", "exists_async", "transaction"}


class CountingClient:
    """A kazoo client that counts the requests made through it (and the paths read); of the
    requests `tables.zk.batch_reads` sends, a multiRead counts as `multi_read` (with each of its
    paths) and a version check transaction as `transaction`."""

    def __init__(self, client) -> None:
        self._client = client
        self.calls: Counter[str] = Counter()
        self.paths: list[str] = []

    def __getattr__(self, name):
        attr = getattr(self._client, name)
        if name == "_call":
            return self._multi_read(attr)
        if name not in COUNTED:
            return attr

        def counted(*args, **kwargs):
            self.calls[name] += 1
            if args:
                self.paths.append(args[0])
            return attr(*args, **kwargs)

        return counted

    def _multi_read(self, call):
        def counted(request, answer):
            if isinstance(request, MultiRead):
                self.calls["multi_read"] += 1
                chroot = self._client.chroot
                self.paths.extend(p.removeprefix(chroot) for p in request.paths)
            elif isinstance(request, CheckVersions):
                self.calls["transaction"] += 1
            return call(request, answer)

        return counted

    def reset(self) -> None:
        self.calls.clear()
        self.paths.clear()

    def segment_reads(self, table: str = TABLE) -> list[str]:
        prefix = PATHS.segments(table) + "/"
        return sorted(p.removeprefix(prefix) for p in self.paths if p.startswith(prefix))


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


def _create(ctx, topic, name: str = "githubEvents") -> None:
    rest = switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic, {})
    rest["tableName"] = name
    rest["segmentsConfig"]["replication"] = "2"
    rest["segmentsConfig"]["schemaName"] = "githubEvents"
    manager = ResourceManager(ctx)
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(rest)


def _converge(zk, table: str = TABLE) -> None:
    """Write the ExternalView the servers would reach: the IdealState's map."""
    ideal = read_record(zk, PATHS.idealstate(table)).record
    view = ZNRecord(id=table, map_fields={s: dict(r) for s, r in ideal.map_fields.items()})
    if zk.exists(PATHS.externalview(table)) is None:
        create_record(zk, PATHS.externalview(table), view)
    else:
        update_record(zk, PATHS.externalview(table), lambda _: view)


def _segments(zk, table: str = TABLE) -> list[str]:
    return sorted(read_record(zk, PATHS.idealstate(table)).record.map_fields)


def _commit(ctx, segment: str, end: int) -> str:
    return LLCSegmentManager(ctx).commit_segment_metadata(
        "githubEvents",
        CommittingSegment(
            segment_name=segment,
            end_offset=end,
            total_docs=100,
            start_time_ms=1_626_847_200_000,
            end_time_ms=1_626_850_800_000,
            crc=123,
            data_crc=123,
            size_bytes=5_000,
            download_url=f"http://controller/segments/githubEvents/{segment}",
            row_count=100,
        ),
    )


def _publish(redis_client, server: str, items: list[dict]) -> None:
    base = {
        "table": TABLE,
        "consumerState": "CONSUMING",
        "phase": "CONSUMING",
        "upstreamOffset": None,
        "recordsLag": 0,
        "availabilityLagMs": 0,
        "lastConsumedMs": NOW - 1000,
        "rowsConsumed": 10,
        "rowsPerSecond": 5.0,
        "lostOffsets": 0,
        "updatedMs": NOW - 500,
    }
    live = [live_state.PartitionLive.from_dict({**base, **item}) for item in items]
    live_state.publish(redis_client, PATHS.cluster, server, live, ttl_s=600)


def test_a_full_sync_builds_every_mirror_row(ctx, zk, topic):
    _create(ctx, topic)
    _converge(zk)

    report = sync_cluster(ctx)

    assert report.ok, report.lines()
    assert (report.tables_seen, report.tables_changed, report.tables_created) == (1, 1, 1)
    assert report.segments_read == 4
    table = MirroredTable.objects.get(name=TABLE)
    assert (table.raw_name, table.table_type, table.tenant) == (
        "githubEvents",
        "REALTIME",
        "DefaultTenant_REALTIME",
    )
    assert (table.replication, table.stream_type, table.topic) == (2, "redis", topic)
    assert (table.num_partitions, table.segment_count, table.consuming_count) == (4, 4, 4)
    assert (table.error_segments, table.missing_consuming, table.percent_available) == (0, 0, 100)
    assert table.idealstate_version == zk.exists(PATHS.idealstate(TABLE)).version
    assert table.externalview_version == zk.exists(PATHS.externalview(TABLE)).version
    assert table.config_version == zk.exists(PATHS.table_config(TABLE)).version
    assert table.lead_partition == lead_partition("githubEvents") == 15
    assert table.config["tableName"] == TABLE
    segments = list(MirroredSegment.objects.filter(table=table))
    assert [(s.partition, s.sequence) for s in segments] == [(p, 0) for p in range(4)]
    assert {s.status for s in segments} == {"IN_PROGRESS"}
    assert {s.display_state for s in segments} == {"CONSUMING"}
    first = segments[0]
    assert first.start_offset != "" and first.metadata_version == 0
    assert set(first.ideal_states.values()) == {"CONSUMING"}
    assert first.external_states == first.ideal_states
    # No server published live state: the segments are new, so every partition reads as
    # starting (servers still picking them up), and as not reporting once the grace is over.
    partitions = list(PartitionStatus.objects.filter(table=table))
    assert [p.partition for p in partitions] == [0, 1, 2, 3]
    assert {p.verdict for p in partitions} == {"STARTING"}
    assert partitions[0].consuming_segment == first.name
    assert set(partitions[0].replicas) == set(first.ideal_states)
    assert (table.health, table.health_reason.split(":")[0]) == ("UPDATING", "partition 0")
    servers = list(MirroredInstance.objects.all())
    assert [s.name for s in servers] == SERVERS
    assert servers[0].kind == "SERVER" and servers[0].live and servers[0].port == 7001
    assert servers[0].tags == ["DefaultTenant_REALTIME"] and servers[0].session_id
    lead = list(LeadControllerPartition.objects.all())
    assert len(lead) == 24
    assert lead[15].tables == [TABLE] and lead[15].name == "leadControllerResource_15"
    state = MirrorState.objects.get(name="zk")
    assert state.error == "" and state.last_synced is not None
    assert state.tables_read == 1 and state.segments_read == 4

    sync_cluster(ctx, now_ms=first.creation_time_ms + 30_000)  # the grace's default is over
    partitions = list(PartitionStatus.objects.filter(table=table))
    assert {p.verdict for p in partitions} == {"NOT_REPORTING"}
    table.refresh_from_db()
    assert (table.health, table.health_reason.split(":")[0]) == ("WARNING", "partition 0")


def test_an_unchanged_resync_costs_one_probe_per_table_and_reads_no_metadata(
    ctx, zk, topic, counting
):
    _create(ctx, topic)
    _create(ctx, topic, "otherEvents")
    _converge(zk)
    _converge(zk, OTHER)
    sync_cluster(ctx, now_ms=NOW)
    counting.reset()

    report = sync_cluster(ctx, now_ms=NOW + 5000)

    assert report.ok, report.lines()
    assert (report.tables_seen, report.tables_unchanged, report.tables_changed) == (2, 2, 0)
    assert report.segments_read == 0 and counting.segment_reads() == []
    assert report.table_probes == 2
    assert counting.calls["transaction"] == 2  # one check transaction per table
    assert not any(p.startswith(PATHS.idealstate(TABLE)) for p in counting.paths)
    assert report.zk_round_trips == 2  # listings + probes, then instances + lead controller
    # Tables and instances are confirmed by the sync; segment and partition rows with their
    # table, not rewritten: they keep the time they were written (the first sync here).
    later = MirroredTable.objects.get(name=TABLE).last_synced
    assert later.timestamp() * 1000 == NOW + 5000
    assert {t.last_synced for t in MirroredTable.objects.all()} == {later}
    assert {i.last_synced for i in MirroredInstance.objects.all()} == {later}
    assert report.segments_written == 0
    assert {s.last_synced.timestamp() * 1000 for s in MirroredSegment.objects.all()} == {NOW}
    rewritten = PartitionStatus.objects.filter(last_synced=later).count()
    assert rewritten == report.partitions_written
    assert PartitionStatus.objects.exclude(last_synced=later).count() == (
        report.partitions - report.partitions_written
    )


def test_a_changed_idealstate_rereads_only_changed_and_unfinished_segments(
    ctx, zk, topic, counting
):
    _create(ctx, topic)
    _converge(zk)
    sync_cluster(ctx, now_ms=NOW)
    synced_at = MirroredTable.objects.get(name=TABLE).last_synced
    first = _segments(zk)
    committed = next(s for s in first if s.startswith("githubEvents__1__"))
    start = int(MirroredSegment.objects.get(name=committed).start_offset)
    following = _commit(ctx, committed, start + 100)
    counting.reset()

    report = sync_cluster(ctx, now_ms=NOW + 5000)

    # The new segment, the committed one, and the other three still IN_PROGRESS.
    assert counting.segment_reads() == sorted([*first, following])
    assert report.tables_changed == 1 and report.segments_read == 5
    done = MirroredSegment.objects.get(name=committed)
    assert (done.status, done.end_offset, done.total_docs) == ("DONE", str(start + 100), 100)
    assert done.display_state == "UPDATING"  # the ExternalView still says CONSUMING
    # Written rows carry this sync's time; the others keep the first sync's.
    later = MirroredTable.objects.get(name=TABLE).last_synced
    assert later > synced_at
    assert {s.name for s in MirroredSegment.objects.filter(last_synced=later)} == {
        committed,
        following,
    }
    assert MirroredSegment.objects.filter(last_synced=synced_at).count() == len(first) - 1
    assert MirroredSegment.objects.get(name=following).status == "IN_PROGRESS"
    assert PartitionStatus.objects.get(partition=1).consuming_segment == following
    # Nobody reports (no server runs): the new segments are starting, the table updating.
    assert PartitionStatus.objects.get(partition=1).verdict == "STARTING"
    assert MirroredTable.objects.get(name=TABLE).health == "UPDATING"

    _converge(zk)
    sync_cluster(ctx)
    assert MirroredSegment.objects.get(name=committed).display_state == "ONLINE"

    # A change that moves no segment: only the unfinished segments are read again.
    update_record(zk, PATHS.idealstate(TABLE), lambda r: with_paused_partitions(r, {3}))
    counting.reset()
    report = sync_cluster(ctx)
    unfinished = sorted(s for s in [*first, following] if s != committed)
    assert counting.segment_reads() == unfinished
    assert MirroredTable.objects.get(name=TABLE).paused_partitions == [3]


def test_deleted_segments_and_tables_lose_their_rows(ctx, zk, topic):
    _create(ctx, topic)
    _create(ctx, topic, "otherEvents")
    _converge(zk)
    sync_cluster(ctx)
    dropped = _segments(zk)[0]

    def drop(record):
        out = record.copy()
        del out.map_fields[dropped]
        return out

    update_record(zk, PATHS.idealstate(TABLE), drop)
    update_record(zk, PATHS.externalview(TABLE), drop)
    report = sync_cluster(ctx)
    assert report.segments_deleted == 1
    assert not MirroredSegment.objects.filter(name=dropped).exists()
    assert MirroredTable.objects.get(name=TABLE).segment_count == 3

    ResourceManager(ctx).delete_table("otherEvents")
    report = sync_cluster(ctx)
    assert report.tables_deleted == 1
    assert list(MirroredTable.objects.values_list("name", flat=True)) == [TABLE]
    assert not MirroredSegment.objects.filter(table__name=OTHER).exists()
    assert not PartitionStatus.objects.exclude(table__name=TABLE).exists()
    assert LeadControllerPartition.objects.get(partition_id=15).tables == [TABLE]


def test_the_pause_state_is_mirrored(ctx, zk, topic, settings):
    settings.TRIAGE_REPORT_GRACE_SECONDS = 0  # unreported partitions read as not reporting
    _create(ctx, topic)
    _converge(zk)
    pause = PauseState(paused=True, comment="topic swap", time_in_millis="2024-05-01 11:00:02.0")
    update_record(zk, PATHS.idealstate(TABLE), lambda r: with_pause_state(r, pause))

    sync_cluster(ctx)

    table = MirroredTable.objects.get(name=TABLE)
    assert (table.paused, table.pause_reason, table.pause_comment) == (
        True,
        "ADMINISTRATIVE",
        "topic swap",
    )
    assert table.pause_time == "2024-05-01 11:00:02.0"
    assert (table.health, table.missing_consuming) == ("PAUSED", 0)
    partition = PartitionStatus.objects.get(table=table, partition=0)
    assert (partition.verdict, partition.health) == ("PAUSED", "PAUSED")
    assert partition.verdict_detail == (
        "paused by topic swap since 2024-05-01 11:00:02.0, reason ADMINISTRATIVE"
    )

    resumed = PauseState(paused=False)
    update_record(
        zk,
        PATHS.idealstate(TABLE),
        lambda r: with_paused_partitions(with_pause_state(r, resumed), {2}),
    )
    sync_cluster(ctx)
    table.refresh_from_db()
    assert (table.paused, table.paused_partitions) == (False, [2])
    verdicts = dict(PartitionStatus.objects.values_list("partition", "verdict"))
    assert verdicts == {0: "NOT_REPORTING", 1: "NOT_REPORTING", 2: "PAUSED", 3: "NOT_REPORTING"}


def test_a_resumes_recorded_skip_is_mirrored_with_the_metadata(ctx, zk, topic):
    _create(ctx, topic)
    _converge(zk)
    segment = _segments(zk)[0]

    def skipped(record):
        out = record.copy()
        out.map_fields["custom.map"] = {
            "consumption.previousOffset": "3",
            "consumption.startReason": "largest",
        }
        return out

    update_record(zk, PATHS.segment(TABLE, segment), skipped)
    sync_cluster(ctx)
    mirrored = MirroredSegment.objects.get(name=segment).metadata
    assert mirrored["custom.map"] == (
        '{"consumption.previousOffset":"3","consumption.startReason":"largest"}'
    )
    assert mirrored["segment.realtime.status"] == "IN_PROGRESS"


def test_live_state_drives_the_partition_verdicts_and_samples(
    ctx, zk, topic, redis_client, live_keys, settings
):
    settings.STALLED_AFTER_SECONDS = 60
    settings.MIRROR_SAMPLE_SECONDS = 15
    settings.MIRROR_SAMPLE_RETENTION_SECONDS = 3600
    settings.TRIAGE_REPORT_GRACE_SECONDS = 0  # partition 3, unreported, is not reporting
    _create(ctx, topic)
    _converge(zk)
    ideal = read_record(zk, PATHS.idealstate(TABLE)).record.map_fields
    segment = {int(s.split("__")[1]): s for s in ideal}
    replicas = {p: sorted(ideal[s]) for p, s in segment.items()}
    published: dict[str, list[dict]] = {server: [] for server in SERVERS}

    def add(partition: int, **figures) -> None:
        for server in replicas[partition]:
            item = {"segmentName": segment[partition], "partition": partition, **figures}
            published[server].append(item)

    add(0, currentOffset=100, upstreamOffset=100)
    add(1, currentOffset=200, upstreamOffset=900_200, recordsLag=900_000)
    add(2, currentOffset=300, upstreamOffset=300, lostOffsets=7, holdReason="build failed: E")
    for server, items in published.items():
        _publish(redis_client, server, items)

    sync_cluster(ctx, now_ms=NOW)
    verdicts = dict(PartitionStatus.objects.values_list("partition", "verdict"))
    assert verdicts == {
        0: "CONSUMING",
        1: "LAGGING",
        2: "OFFSET_UNAVAILABLE",
        3: "NOT_REPORTING",
    }
    lagging = PartitionStatus.objects.get(partition=1)
    assert (lagging.current_offset, lagging.upstream_offset, lagging.records_lag) == (
        200,
        900_200,
        900_000,
    )
    assert lagging.replicas[replicas[1][0]]["currentOffset"] == 200
    assert lagging.replicas[replicas[1][0]]["state"] == "CONSUMING"
    assert lagging.replicas[replicas[1][0]]["holdReason"] is None
    held = PartitionStatus.objects.get(partition=2).replicas
    assert {held[server]["holdReason"] for server in replicas[2]} == {"build failed: E"}
    table = MirroredTable.objects.get(name=TABLE)
    assert (table.health, table.max_records_lag) == ("BAD", 900_000)
    assert table.rows_per_s == 15.0  # three partitions at 5 rows/s
    assert ConsumptionSample.objects.count() == 3

    # Two minutes later without progress: the lagging partition is stalled.
    sync_cluster(ctx, now_ms=NOW + 120_000)
    stalled = PartitionStatus.objects.get(partition=1)
    assert (stalled.verdict, stalled.stalled_s) == ("STALLED", 120)
    assert stalled.verdict_detail.startswith("stalled for 120 s")
    assert stalled.progressed_at.timestamp() * 1000 == NOW
    assert ConsumptionSample.objects.count() == 6
    sync_cluster(ctx, now_ms=NOW + 121_000)  # within MIRROR_SAMPLE_SECONDS: no new sample
    assert ConsumptionSample.objects.count() == 6

    sync_cluster(ctx, now_ms=NOW + 3_600_000 + 60_000)  # the first samples are past retention
    assert ConsumptionSample.objects.filter(sampled_at__lt=stalled.progressed_at).count() == 0
    assert ConsumptionSample.objects.count() == 6


def test_a_malformed_table_is_skipped_and_reported(ctx, zk, topic):
    _create(ctx, topic)
    _converge(zk)
    zk.create(PATHS.idealstate("broken_REALTIME"), b"{not json")

    report = sync_cluster(ctx)

    assert report.ok
    assert list(report.tables_failed) == ["broken_REALTIME"]
    assert list(MirroredTable.objects.values_list("name", flat=True)) == [TABLE]
    assert "broken_REALTIME" in MirrorState.objects.get(name="zk").error

    zk.set(PATHS.idealstate("broken_REALTIME"), codec.encode(ZNRecord(id="broken_REALTIME")))
    report = sync_cluster(ctx)
    assert report.tables_failed == {}
    assert MirroredTable.objects.filter(name="broken_REALTIME").exists()


def test_a_missing_cluster_is_an_error_not_a_crash(zk, settings):
    ctx = ClusterContext(zk, PATHS, settings.REDIS_URL)
    report = sync_cluster(ctx)
    assert not report.ok
    assert "not found" in report.error
    state = MirrorState.objects.get(name="zk")
    assert state.last_synced is None and "not found" in state.error


def test_an_empty_cluster_mirrors_nothing_but_the_lead_controller(cluster, settings):
    report = sync_cluster(ClusterContext(cluster, PATHS, settings.REDIS_URL))
    assert report.ok and report.tables_seen == 0
    assert MirroredTable.objects.count() == 0
    assert LeadControllerPartition.objects.count() == 24


def test_the_sync_zk_command_prints_the_report(servers, zk, topic, settings):
    settings.CLUSTER_NAME = PATHS.cluster
    _create(ClusterContext(zk, PATHS, settings.REDIS_URL), topic)
    out = io.StringIO()
    call_command("sync_zk", stdout=out)
    text = out.getvalue()
    assert "tables: 1 seen, 1 changed (1 new)" in text
    assert "segments: 4 metadata read" in text
    assert "duration:" in text

    for child in zk.get_children("/"):
        zk.delete(f"/{child}", recursive=True)
    with pytest.raises(CommandError, match="not found"):
        call_command("sync_zk", stdout=io.StringIO())
