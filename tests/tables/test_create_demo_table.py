"""`manage.py create_demo_table` against the real ZooKeeper and Redis: the topic, the schema and the
two replicated tables `make demo` runs on (githubEvents, and githubEventsPauseless on the same
topic with pauseless consumption); idempotent and never deleting (a lost topic is recreated past
every offset known to either table, each table's loss reported); `--wait` gives up clearly
without servers."""

from __future__ import annotations

import uuid
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from tables import live_state
from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.demo.seed import demo_schema, demo_table_config, recreate_topic
from tables.domain.segment_metadata import SegmentStatus
from tables.models import DurableCounter
from tables.redisconn import get_redis
from tables.streams.redis_streams import RedisTopicAdmin
from tables.zk.participants import instance_config, register_participant
from tables.zk.records import create_record
from tests.cluster_fixtures import PATHS, SERVERS

pytestmark = [pytest.mark.zk, pytest.mark.redis]

TABLE = "githubEvents_REALTIME"
PAUSELESS = "githubEventsPauseless_REALTIME"


@pytest.fixture
def admin() -> RedisTopicAdmin:
    return RedisTopicAdmin(get_redis(settings.REDIS_URL))


@pytest.fixture
def demo_topic(admin):
    name = f"demo-{uuid.uuid4().hex[:10]}"
    yield name
    admin.delete_topic(name)


def run(*args: str) -> str:
    out = StringIO()
    call_command("create_demo_table", *args, stdout=out)
    return out.getvalue()


def test_creates_the_topic_schema_and_replicated_table(servers, admin, demo_topic):
    output = run("--topic", demo_topic)

    assert f"created topic {demo_topic!r} with 4 partitions" in output
    assert admin.partition_count(demo_topic) == 4
    manager = ResourceManager(context.current())
    assert manager.list_schemas() == ["githubEvents"]
    config = manager.get_table_config("githubEvents")
    assert config.replication == 2
    assert config.stream_type == "redis"
    assert config.topic_name == demo_topic
    assert config.offset_reset == "smallest"
    assert config.stream_config["realtime.segment.flush.threshold.segment.rows"] == "500"
    assert config.stream_config["realtime.segment.flush.threshold.time"] == "30s"

    idealstate = manager.idealstate(TABLE)
    assert sorted(int(segment.split("__")[1]) for segment in idealstate) == [0, 1, 2, 3]
    for segment, replicas in idealstate.items():
        assert len(replicas) == 2 and set(replicas) <= set(SERVERS), segment
        assert set(replicas.values()) == {"CONSUMING"}
        meta = manager.segment_metadata(TABLE, segment)
        assert meta.status is SegmentStatus.IN_PROGRESS
        assert meta.flush_threshold_size == 500
        assert meta.start_offset == "1"  # smallest of an empty Redis partition

    # The pauseless twin: same schema, topic and thresholds, with Pinot's peer download rule.
    assert f"table {PAUSELESS} created: replication 2, pauseless, 4 CONSUMING" in output
    twin = manager.get_table_config(PAUSELESS)
    assert twin.pauseless_enabled
    assert (twin.replication, twin.peer_segment_download_scheme) == (2, "http")
    assert (twin.schema_name, twin.topic_name, twin.offset_reset) == (
        "githubEvents",
        demo_topic,
        "smallest",
    )
    assert twin.stream_config["realtime.segment.flush.threshold.segment.rows"] == "500"
    assert twin.stream_config["realtime.segment.flush.threshold.time"] == "30s"
    assert not config.pauseless_enabled
    assert len(manager.idealstate(PAUSELESS)) == 4
    assert manager.list_tables() == sorted([TABLE, PAUSELESS])

    twin_ideal = manager.idealstate(PAUSELESS)
    again = run("--topic", demo_topic)
    assert f"table {TABLE} already exists" in again
    assert f"table {PAUSELESS} already exists" in again
    assert manager.idealstate(TABLE) == idealstate
    assert manager.idealstate(PAUSELESS) == twin_ideal


def test_a_demo_of_before_gets_the_pauseless_table_added(servers, admin, demo_topic):
    """A demo that ran before the second table existed: the first is left alone, the second is
    created and reads the topic from its earliest offset."""
    admin.create_topic(demo_topic, 4)
    admin.produce(demo_topic, 1, [b'{"id": "1"}'] * 5, now_ms=0)
    manager = ResourceManager(context.current())
    manager.add_schema(demo_schema())
    manager.add_table(demo_table_config(demo_topic))

    output = run("--topic", demo_topic)

    assert f"table {TABLE} already exists (topic {demo_topic!r}); left as it is" in output
    assert f"table {PAUSELESS} created" in output
    starts = {
        manager.segment_metadata(PAUSELESS, segment).start_offset
        for segment in manager.idealstate(PAUSELESS)
    }
    assert starts == {"1"}


def run_both(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("create_demo_table", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def _trimmed_topic(admin: RedisTopicAdmin, topic: str, rows: int) -> None:
    """A 4-partition topic whose partitions held `rows` rows each, all trimmed away: a table
    created on it (offset reset smallest) starts every partition at offset `rows + 1`."""
    admin.create_topic(topic, 4)
    for partition in range(4):
        admin.produce(topic, partition, [b'{"id": "1"}'] * rows, now_ms=0)
        admin.trim_before(topic, partition, rows + 1)


@pytest.fixture
def live_keys(redis_client):
    yield
    redis_client.delete(*(live_state.key_for(PATHS.cluster, server) for server in SERVERS))


def _partition_live(partition: int, current: int, upstream: int) -> live_state.PartitionLive:
    return live_state.PartitionLive(
        table=TABLE,
        segmentName=f"githubEvents__{partition}__0__20260101T0000Z",
        partition=partition,
        consumerState="CONSUMING",
        phase="CONSUMING",
        currentOffset=current,
        upstreamOffset=upstream,
        recordsLag=upstream - current,
        availabilityLagMs=0,
        lastConsumedMs=None,
        rowsConsumed=current,
        rowsPerSecond=0.0,
        lostOffsets=0,
        updatedMs=0,
    )


@pytest.mark.django_db
def test_a_table_whose_topic_is_gone_is_kept_and_its_topic_recreated_past_every_known_offset(
    servers, admin, demo_topic, redis_client, live_keys
):
    _trimmed_topic(admin, demo_topic, 20)
    run("--topic", demo_topic)
    manager = ResourceManager(context.current())
    zk = context.current().client
    idealstate = manager.idealstate(TABLE)
    created = zk.exists(PATHS.idealstate(TABLE)).czxid
    segments = manager.segment_names(TABLE)
    # Two servers were consuming partition 0: one had read up to offset 41 of a stream that had
    # reached 56, the other was behind; partition 1's replica had read to 30 and seen nothing new.
    live_state.publish(
        redis_client, PATHS.cluster, SERVERS[0], [_partition_live(0, 41, 56)], ttl_s=60
    )
    live_state.publish(
        redis_client,
        PATHS.cluster,
        SERVERS[1],
        [_partition_live(0, 25, 50), _partition_live(1, 30, 30)],
        ttl_s=60,
    )
    admin.delete_topic(demo_topic)  # what a Redis that lost its data (no AOF left) shows

    output, errors = run_both("--topic", demo_topic)

    assert f"table {TABLE} already exists but its topic {demo_topic!r} was gone" in output
    assert "continuing at offsets p0=56 p1=30 p2=21 p3=21" in output
    assert f"tables reading it ({PAUSELESS}, {TABLE})" in output  # sorted
    assert f"44 offsets known lost in {PAUSELESS}, 15 offsets known lost in {TABLE}" in output
    assert f"DATA LOSS: table {TABLE} partition 0: topic {demo_topic!r} was gone" in errors
    assert "from offset 41 on that were not committed are lost (15 known" in errors
    assert "partition 2" in errors and "(0 known, any produced after offset 20 unknown)" in errors
    assert DurableCounter.value_of("llcStreamDataLoss", TABLE) == 15
    # The pauseless table's servers had read nothing past its segments' start (21): what the other
    # table's servers saw (p0 to 56, p1 to 30) is lost to it.
    assert f"DATA LOSS: table {PAUSELESS} partition 0" in errors
    assert "from offset 21 on that were not committed are lost (35 known" in errors
    assert DurableCounter.value_of("llcStreamDataLoss", PAUSELESS) == 44
    assert errors.count("DATA LOSS:") == 8
    # The table, its segments and its IdealState are the same znodes, unchanged.
    assert zk.exists(PATHS.idealstate(TABLE)).czxid == created
    assert manager.idealstate(TABLE) == idealstate
    assert manager.segment_names(TABLE) == segments
    # The topic is back, empty, every partition continuing where the cluster had got to.
    reader = admin.provider(demo_topic)
    assert admin.partition_count(demo_topic) == 4
    bounds = {p: (reader.earliest_offset(p), reader.latest_offset(p)) for p in range(4)}
    assert bounds == {0: (56, 56), 1: (30, 30), 2: (21, 21), 3: (21, 21)}
    assert admin.produce(demo_topic, 0, [b"{}", b"{}"], now_ms=0) == [56, 57]
    assert admin.produce(demo_topic, 2, [b"{}"], now_ms=0) == [21]
    # A consumer that had read to 41 is told that 41..55 are gone; one at 21 loses nothing.
    batch = reader.fetch(0, 41, 10, timeout_ms=0)
    assert batch.data_loss and batch.first_available_offset == 56
    assert [m.offset for m in batch.messages] == [56, 57]
    assert not reader.fetch(2, 21, 10, timeout_ms=0).data_loss

    again, errors = run_both("--topic", demo_topic)  # a restarted producer: nothing more happens

    assert f"table {TABLE} already exists (topic {demo_topic!r}); left as it is" in again
    assert f"table {PAUSELESS} already exists (topic {demo_topic!r}); left as it is" in again
    assert errors == ""
    assert DurableCounter.value_of("llcStreamDataLoss", TABLE) == 15
    assert DurableCounter.value_of("llcStreamDataLoss", PAUSELESS) == 44
    assert reader.latest_offset(0) == 58


@pytest.mark.django_db
def test_a_lost_topic_with_no_server_reporting_continues_at_the_segments_offsets(
    servers, admin, demo_topic
):
    _trimmed_topic(admin, demo_topic, 7)
    run("--topic", demo_topic)
    admin.delete_topic(demo_topic)

    output, errors = run_both("--topic", demo_topic)

    assert "continuing at offsets p0=8 p1=8 p2=8 p3=8" in output
    assert f"0 offsets known lost in {PAUSELESS}, 0 offsets known lost in {TABLE}" in output
    assert errors.count("DATA LOSS:") == 8  # four partitions of each table
    assert DurableCounter.value_of("llcStreamDataLoss", TABLE) == 0
    assert len(ResourceManager(context.current()).idealstate(TABLE)) == 4
    assert len(ResourceManager(context.current()).idealstate(PAUSELESS)) == 4


def test_recreate_topic_leaves_an_existing_topic_alone(admin, demo_topic, redis_client):
    admin.create_topic(demo_topic, 2)
    admin.produce(demo_topic, 0, [b"{}"] * 3, now_ms=0)

    assert not recreate_topic(redis_client, demo_topic, {0: 100}, 4)

    assert admin.partition_count(demo_topic) == 2
    assert admin.provider(demo_topic).latest_offset(0) == 4


def test_wait_returns_once_the_servers_are_live(servers, demo_topic):
    output = run("--wait", "--timeout", "10", "--topic", demo_topic)

    assert "3 of 3 servers tagged DefaultTenant_REALTIME live" in output
    assert f"table {TABLE} created: replication 2, 4 CONSUMING segments" in output
    assert f"table {PAUSELESS} created: replication 2, pauseless, 4 CONSUMING segments" in output


def test_an_existing_topic_is_grown_to_the_partitions(servers, admin, demo_topic):
    admin.create_topic(demo_topic, 2)

    output = run("--topic", demo_topic)

    assert f"topic {demo_topic!r}: partitions 2 -> 4" in output
    assert len(ResourceManager(context.current()).idealstate(TABLE)) == 4
    assert len(ResourceManager(context.current()).idealstate(PAUSELESS)) == 4


def test_wait_gives_up_with_too_few_live_servers(cluster, admin, demo_topic):
    register_participant(cluster, PATHS, SERVERS[0], "127.0.0.1", 7001, ["DefaultTenant_REALTIME"])
    # Tagged but not live: a config without a live instance does not count.
    offline = instance_config(SERVERS[1], "127.0.0.1", 7002, None, ["DefaultTenant_REALTIME"])
    create_record(cluster, PATHS.participant_config(SERVERS[1]), offline)

    with pytest.raises(CommandError, match=r"gave up after 0\.5 s: 1 of 3 servers tagged"):
        run("--wait", "--timeout", "0.5", "--topic", demo_topic)

    assert ResourceManager(context.current()).list_tables() == []
    assert not admin.topic_exists(demo_topic)


def test_wait_gives_up_on_a_cluster_never_initialised(zk, demo_topic):
    with pytest.raises(CommandError, match="not initialised yet"):
        run("--wait", "--timeout", "0.2", "--topic", demo_topic)
