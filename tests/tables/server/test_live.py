"""The server's live-state publisher (`tables.server.live`) against the real Redis.

A real `ServerInstance` in this process consumes the githubEvents table's four partitions (no
controller: segments never complete); what the publisher puts in Redis is read back with
`tables.live_state` and compared with the server's own admin consumingSegmentsInfo. Expiry, stop,
a Redis that is away, and the wiring in `manage.py run_server` are checked from outside too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.retry import Retry

from tables import builds, live_state
from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.names import LLCSegmentName
from tables.redisconn import get_redis
from tables.server.admin import AdminServer
from tables.server.instance import ServerInstance
from tables.server.live import LivePublisher
from tables.streams.redis_streams import RedisTopicAdmin
from tests import envdefaults
from tests.cluster_fixtures import PATHS, github_rows, load
from tests.ingest_cluster import HOST, free_port, table_config
from tests.poll import wait_until

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]

TABLE = "githubEvents_REALTIME"
# The `topic` fixture wrote partition p's rows at offsets 1..p+1: the next offset is p+2.
NEXT = {p: p + 2 for p in range(4)}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Serving:
    instance: ServerInstance
    admin: AdminServer
    topic: str
    segments: dict[int, str]  # partition -> its consuming segment
    stopped: bool = False

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.instance.stop()


def _no_build(*args: object) -> None:
    raise AssertionError("nothing completes without a controller")


def _admin_json(port: int, path: str) -> object:
    with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=10) as reply:
        return json.loads(reply.read())


@pytest.fixture
def cluster_name(redis_client) -> Iterator[str]:
    """A cluster name of the test's own, so its live keys collide with nothing."""
    name = f"live-test-{uuid.uuid4().hex[:10]}"
    yield name
    keys = list(redis_client.scan_iter(match=f"{live_state.KEY_PREFIX}:{name}:*"))
    if keys:
        redis_client.delete(*keys)


@pytest.fixture
def serving(cluster, topic, tmp_path: Path) -> Iterator[Serving]:
    """The githubEvents table (replication 1, large segments) on one in-process server."""
    port, admin_port = free_port(), free_port()
    instance_id = f"Server_{HOST}_{port}"
    instance = ServerInstance(
        instance_id,
        HOST,
        port,
        context.current,
        builds.deep_store,
        _no_build,
        tmp_path / "server",
        admin_port=admin_port,
        hold_s=0.2,
        tick_s=0.5,
    )
    admin = AdminServer(instance, HOST, admin_port, lambda: (b"", "text/plain"))
    admin.start()
    instance.start()
    state = Serving(instance, admin, topic, {})
    try:
        wait_until(lambda: cluster.exists(PATHS.liveinstance(instance_id)), what="registered")
        manager = ResourceManager(context.current())
        manager.add_schema(load("githubEvents_schema.json"))
        config = table_config(topic, **{"realtime.segment.flush.threshold.segment.rows": "1000"})
        config["segmentsConfig"]["replication"] = "1"
        manager.add_table(config)
        for segment in manager.idealstate(TABLE):
            name = LLCSegmentName.parse(segment)
            assert name is not None
            state.segments[name.partition_group_id] = segment
        yield state
    finally:
        state.stop()
        admin.stop()


def _published_caught_up(client, cluster: str, instance: str) -> list | None:
    """What `instance` published, once it shows every partition read to its end."""
    items = live_state.read_server(client, cluster, instance)
    if items and {i.partition: i.currentOffset for i in items} == NEXT and len(items) == 4:
        return items
    return None


def test_published_figures_agree_with_the_admin_endpoint(serving, redis_client, cluster_name):
    instance = serving.instance
    publisher = LivePublisher(instance, redis_client, cluster_name, interval_s=0.2, ttl_s=30.0)
    publisher.start()
    try:
        items = wait_until(
            lambda: _published_caught_up(redis_client, cluster_name, instance.instance_id),
            what="every partition published caught up",
        )
        # The TTL is set on every publish.
        assert 0 < redis_client.pttl(publisher.key) <= 30_000
        by_partition = {item.partition: item for item in items}
        for partition, item in by_partition.items():
            assert item.table == TABLE
            assert item.segmentName == serving.segments[partition]
            assert (item.consumerState, item.phase) == ("CONSUMING", "CONSUMING")
            assert item.currentOffset == item.upstreamOffset == NEXT[partition]
            assert (item.recordsLag, item.availabilityLagMs) == (0, 0)
            assert item.rowsConsumed == partition + 1
            assert item.lostOffsets == 0
            assert item.lastConsumedMs is not None and item.lastConsumedMs > 0
            assert item.updatedMs >= item.lastConsumedMs

        # The same figures as the server's own consumingSegmentsInfo.
        admin = _admin_json(serving.admin.port, f"/tables/{TABLE}/consumingSegmentsInfo")
        assert len(admin) == 4
        for entry in admin:
            key = next(iter(entry["partitionToOffsetMap"]))
            item = by_partition[int(key)]
            offsets = entry["partitionOffsetInfo"]
            assert entry["segmentName"] == item.segmentName
            assert entry["consumerState"] == item.consumerState
            assert entry["lastConsumedTimestamp"] == item.lastConsumedMs
            assert offsets["currentOffsets"] == {key: str(item.currentOffset)}
            assert offsets["latestUpstreamOffsets"] == {key: str(item.upstreamOffset)}
            assert offsets["recordsLag"] == {key: str(item.recordsLag)}
            assert offsets["availabilityLagMs"] == {key: str(item.availabilityLagMs)}
    finally:
        publisher.stop()
    # Stopping deletes the key at once: the server does not wait for its TTL to vanish.
    assert not publisher.running
    assert redis_client.exists(publisher.key) == 0
    assert live_state.read_server(redis_client, cluster_name, instance.instance_id) is None


def test_rows_per_second_and_a_stopped_consumer(serving, redis_client, cluster_name):
    instance = serving.instance
    clock = FakeClock()
    publisher = LivePublisher(
        instance, redis_client, cluster_name, interval_s=60.0, ttl_s=30.0, clock=clock
    )
    stats = instance.stats
    wait_until(
        lambda: all(
            (TABLE, p) in stats and stats[(TABLE, p)].current_offset == NEXT[p] for p in range(4)
        ),
        what="every partition read",
    )
    first = publisher.collect()
    assert sorted(i.partition for i in first) == [0, 1, 2, 3]
    assert all(i.rowsPerSecond == 0.0 for i in first)  # no baseline yet

    producer = RedisTopicAdmin(get_redis(settings.REDIS_URL))
    producer.produce(serving.topic, 1, github_rows()[:6], now_ms=1_626_847_200_000)
    wait_until(lambda: stats[(TABLE, 1)].rows_consumed == 2 + 6, what="six more rows read")
    clock.now += 2.0
    rates = {i.partition: i.rowsPerSecond for i in publisher.collect()}
    assert rates == {0: 0.0, 1: 3.0, 2: 0.0, 3: 0.0}

    # publish_once writes what collect saw; a reader gets it back.
    assert publisher.publish_once()
    assert publisher.published == 1
    published = live_state.read_server(redis_client, cluster_name, instance.instance_id)
    assert published is not None and len(published) == 4

    # A stopped consumer (its replica still CONSUMING) reads NOT_CONSUMING, as admin.py says.
    serving.stop()
    after = publisher.collect()
    assert {(i.consumerState, i.phase) for i in after} == {("NOT_CONSUMING", "STOPPED")}


def test_a_server_that_stops_publishing_expires(redis_client, cluster_name, tmp_path):
    # The smallest real server: constructed, never started, so it hosts nothing.
    instance = ServerInstance(
        f"Server_{HOST}_{free_port()}",
        HOST,
        1,
        context.current,
        builds.deep_store,
        _no_build,
        tmp_path / "server",
    )
    publisher = LivePublisher(instance, redis_client, cluster_name, interval_s=60.0, ttl_s=0.5)
    assert publisher.publish_once()
    # Reporting, with nothing consumed: the empty marker.
    assert live_state.read_server(redis_client, cluster_name, instance.instance_id) == []
    # Nobody refreshes it (a killed server): it expires and reads as not reporting.
    wait_until(
        lambda: live_state.read_server(redis_client, cluster_name, instance.instance_id) is None,
        timeout=10,
        what="the key expired",
    )
    assert live_state.read_all(redis_client, cluster_name, [instance.instance_id]) == {
        instance.instance_id: None
    }


def test_redis_errors_are_retried_and_never_end_the_thread(redis_client, cluster_name, tmp_path):
    instance = ServerInstance(
        f"Server_{HOST}_{free_port()}",
        HOST,
        1,
        context.current,
        builds.deep_store,
        _no_build,
        tmp_path / "server",
    )
    # Without redis-py's own retries (three, with back-off: ~3 s a call): the publisher's count.
    away = redis.Redis(
        host=HOST,
        port=free_port(),
        socket_connect_timeout=1,
        socket_timeout=1,
        retry=Retry(NoBackoff(), 0),
    )
    publisher = LivePublisher(instance, away, cluster_name, interval_s=0.05, ttl_s=30.0)
    publisher.start()
    try:
        wait_until(lambda: publisher.failures >= 2, what="two failed publishes")
        assert publisher.running and publisher.published == 0
        # Redis is back: the next tick publishes.
        publisher.client = redis_client
        wait_until(lambda: publisher.published >= 1, what="a publish after Redis came back")
        assert live_state.read_server(redis_client, cluster_name, instance.instance_id) == []
    finally:
        publisher.stop()
    assert not publisher.running
    assert redis_client.exists(publisher.key) == 0


def test_run_server_publishes_and_deletes_its_key_on_sigterm(cluster, redis_client, tmp_path):
    instance_id = f"Server_{HOST}_{free_port()}"
    key = live_state.key_for(settings.CLUSTER_NAME, instance_id)
    env = {
        **os.environ,
        "ZK_HOSTS": settings.ZK_HOSTS,
        "DATABASE_URL": f"sqlite:///{os.environ['DATABASE_TEST_NAME']}",
        "SERVER_DATA_DIR": str(tmp_path / "servers"),
        "LIVE_PUBLISH_SECONDS": "0.2",
        "LIVE_STATE_TTL_SECONDS": "60",
    }
    log_path = tmp_path / "run_server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "run_server", "--instance", instance_id],
            cwd=envdefaults.ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(
            lambda: redis_client.exists(key) or proc.poll() is not None,
            timeout=60,
            what="the server's live key",
        )
        assert proc.poll() is None, log_path.read_text()
        assert live_state.read_server(redis_client, settings.CLUSTER_NAME, instance_id) == []
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log_path.read_text()
        # Gone at once, not after its 60 s TTL.
        assert redis_client.exists(key) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        redis_client.delete(key)


def test_phase_since_times_change_only_when_the_phase_does():
    """`phaseSinceMs` stays put while a phase lasts; `completingSinceMs` survives the HOLDING <->
    CATCHING_UP round trips of one completion and clears when the replica consumes again."""
    from types import SimpleNamespace

    publisher = LivePublisher(
        SimpleNamespace(instance_id="Server_x_1"),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        "c",
        interval_s=1.0,
        ttl_s=5.0,
    )
    key = (TABLE, "seg")

    def tick(phase: str, now_ms: int) -> tuple[str, int, int | None]:
        times = publisher._phase_times(key, phase, now_ms, replica_since_ms=900)
        publisher._phases = {key: times}
        return times

    assert tick("CONSUMING", 1000) == ("CONSUMING", 900, None)  # since the replica became CONSUMING
    assert tick("CONSUMING", 5000) == ("CONSUMING", 900, None)
    assert tick("HOLDING", 6000) == ("HOLDING", 6000, 6000)
    assert tick("HOLDING", 9000) == ("HOLDING", 6000, 6000)
    assert tick("CATCHING_UP", 10_000) == ("CATCHING_UP", 10_000, 6000)
    assert tick("HOLDING", 12_000) == ("HOLDING", 12_000, 6000)
    assert tick("CONSUMING", 20_000) == ("CONSUMING", 20_000, None)
