"""Fixtures for a small real cluster: initialised in the test's ZooKeeper chroot, three servers
registered (tag DefaultTenant_REALTIME), a 4-partition Redis topic, Pinot's fixture files."""

from __future__ import annotations

import json
import uuid

import pytest

from tables.redisconn import get_redis
from tables.streams.redis_streams import RedisTopicAdmin
from tables.zk.cluster import init_cluster
from tables.zk.participants import register_participant
from tables.zk.paths import ClusterPaths
from tests import envdefaults

PATHS = ClusterPaths("PinotCluster")
SERVERS = ["Server_127.0.0.1_7001", "Server_127.0.0.1_7002", "Server_127.0.0.1_7003"]


def load(name: str) -> dict:
    """A file of ../shared/fixtures/pinot, parsed."""
    return json.loads((envdefaults.PINOT_FIXTURES / name).read_text())


def github_rows() -> list[bytes]:
    """The 800 real githubEvents rows, one JSON message each, as written."""
    text = (envdefaults.PINOT_FIXTURES / "githubEvents_2021-07-21-few-hours.json").read_bytes()
    return [line for line in text.splitlines() if line.strip()]


@pytest.fixture
def cluster(zk):
    init_cluster(zk, PATHS)
    return zk


@pytest.fixture
def servers(cluster):
    for index, server in enumerate(SERVERS):
        register_participant(
            cluster, PATHS, server, "127.0.0.1", 7001 + index, ["DefaultTenant_REALTIME"]
        )
    return SERVERS


@pytest.fixture
def topic(settings):
    admin = RedisTopicAdmin(get_redis(settings.REDIS_URL))
    name = f"topic-{uuid.uuid4().hex[:10]}"
    admin.create_topic(name, 4)
    for partition in range(4):
        admin.produce(name, partition, [b'{"id": "1"}'] * (partition + 1), now_ms=0)
    yield name
    admin.delete_topic(name)
