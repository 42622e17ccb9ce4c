"""`manage.py create_demo_table` against the real ZooKeeper and Redis: the topic, the schema and the
replicated table `make demo` runs on; idempotent; `--wait` gives up clearly without servers."""

from __future__ import annotations

import uuid
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from tables.controller import context
from tables.controller.resources import ResourceManager
from tables.domain.segment_metadata import SegmentStatus
from tables.redisconn import get_redis
from tables.streams.redis_streams import RedisTopicAdmin
from tables.zk.participants import instance_config, register_participant
from tables.zk.records import create_record
from tests.cluster_fixtures import PATHS, SERVERS

pytestmark = [pytest.mark.zk, pytest.mark.redis]

TABLE = "githubEvents_REALTIME"


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

    again = run("--topic", demo_topic)
    assert f"table {TABLE} already exists" in again
    assert manager.idealstate(TABLE) == idealstate


def test_a_table_whose_topic_is_gone_is_created_afresh(servers, admin, demo_topic):
    run("--topic", demo_topic)
    zk = context.current().client
    first = zk.exists(PATHS.idealstate(TABLE)).czxid
    admin.delete_topic(demo_topic)  # what a restart of the demo's Redis (no persistence) leaves

    output = run("--topic", demo_topic)

    assert f"its topic {demo_topic!r} is gone" in output
    assert f"created topic {demo_topic!r} with 4 partitions" in output
    assert zk.exists(PATHS.idealstate(TABLE)).czxid != first  # a new IdealState znode
    manager = ResourceManager(context.current())
    assert len(manager.idealstate(TABLE)) == 4
    assert manager.get_table_config(TABLE).topic_name == demo_topic


def test_wait_returns_once_the_servers_are_live(servers, demo_topic):
    output = run("--wait", "--timeout", "10", "--topic", demo_topic)

    assert "3 of 3 servers tagged DefaultTenant_REALTIME live" in output
    assert f"table {TABLE} created: replication 2, 4 CONSUMING segments" in output


def test_an_existing_topic_is_grown_to_the_partitions(servers, admin, demo_topic):
    admin.create_topic(demo_topic, 2)

    output = run("--topic", demo_topic)

    assert f"topic {demo_topic!r}: partitions 2 -> 4" in output
    assert len(ResourceManager(context.current()).idealstate(TABLE)) == 4


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
