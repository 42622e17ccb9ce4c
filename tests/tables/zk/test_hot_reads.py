"""The completion path's hot reads on the real ZooKeeper: the table config parsed once per version
and never answered from an older table of the same name, the tagged servers and the cluster config
following their znodes, and no round trip while nothing changed."""

from __future__ import annotations

import pytest

from tables.cluster import context
from tables.cluster.errors import NotFound
from tables.cluster.hot_reads import HotReads
from tables.controller.resources import ResourceManager
from tables.domain.healing import MAX_SEGMENT_COMPLETION_TIME_KEY
from tables.domain.table_config import switch_stream_type
from tables.zk.participants import register_participant
from tables.zk.records import update_record
from tables.zk.zookeeper import as_store
from tests.cluster_fixtures import PATHS, SERVERS, load
from tests.poll import wait_until

pytestmark = [pytest.mark.zk, pytest.mark.redis]
TABLE = "githubEvents_REALTIME"


FLUSH = "realtime.segment.flush.threshold.size"


def _config(topic: str, flush_rows: str) -> dict:
    config = switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic)
    config["ingestionConfig"]["streamIngestionConfig"]["streamConfigMaps"][0][FLUSH] = flush_rows
    return config


def _add_table(topic: str, flush_rows: str) -> None:
    """Through the process's own session (another session than the `zk` fixture's)."""
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(_config(topic, flush_rows))


def _flush_rows(hot: HotReads) -> str:
    return hot.table_config(TABLE).stream_config[FLUSH]


def test_nothing_changed_no_round_trip_and_one_parse(servers, topic, zk):
    _add_table(topic, "1000")
    hot = HotReads(as_store(zk), PATHS)
    first = hot.table_config(TABLE)
    assert hot.tagged_instances("DefaultTenant_REALTIME") == SERVERS
    calls = []
    original = zk._call  # every kazoo request goes through it

    def counting(request, async_object):
        calls.append(request)
        return original(request, async_object)

    zk._call = counting
    try:
        assert hot.table_config(TABLE) is first  # the same parse
        assert hot.tagged_instances("DefaultTenant_REALTIME") == SERVERS
    finally:
        zk._call = original
    assert calls == []


def test_a_new_version_or_a_new_table_of_the_same_name_is_read_again(servers, topic):
    _add_table(topic, "1000")
    hot = HotReads(context.current().client, PATHS)  # the writer's own session: never stale
    assert _flush_rows(hot) == "1000"
    ResourceManager(context.current()).update_table("githubEvents", _config(topic, "2000"))
    assert _flush_rows(hot) == "2000"
    ResourceManager(context.current()).delete_table("githubEvents")
    with pytest.raises(NotFound):
        hot.table_config(TABLE)
    _add_table(topic, "3000")
    assert _flush_rows(hot) == "3000"


def test_another_sessions_change_is_served_once_notified(servers, topic, zk):
    _add_table(topic, "1000")
    hot = HotReads(as_store(zk), PATHS)
    assert _flush_rows(hot) == "1000"
    ResourceManager(context.current()).update_table("githubEvents", _config(topic, "2000"))
    wait_until(lambda: _flush_rows(hot) == "2000", 10, what="the other session's change")


def test_tagged_instances_and_the_cluster_config_follow_their_znodes(servers, zk):
    hot = HotReads(as_store(zk), PATHS)
    assert hot.tagged_instances("other_REALTIME") == []
    assert hot.cluster_simple_field(MAX_SEGMENT_COMPLETION_TIME_KEY) is None
    register_participant(zk, PATHS, "Server_127.0.0.1_7009", "127.0.0.1", 7009, ["other_REALTIME"])
    assert hot.tagged_instances("other_REALTIME") == ["Server_127.0.0.1_7009"]

    def limit(record):
        out = record.copy()
        out.simple_fields[MAX_SEGMENT_COMPLETION_TIME_KEY] = "60000"
        return out

    update_record(zk, PATHS.cluster_config, limit)
    assert hot.cluster_simple_field(MAX_SEGMENT_COMPLETION_TIME_KEY) == "60000"
