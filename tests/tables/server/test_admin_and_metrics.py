"""A real `ServerInstance` in this process, on the real ZooKeeper and Redis, with no controller:
its consumers read their partitions, and the one that reaches its row limit keeps asking a
controller that is not there (NOT_SENT). Everything is checked from outside: the admin HTTP
(`/health`, `consumingSegmentsInfo`, `/metrics` with Pinot's names) and CURRENTSTATES in ZooKeeper.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitoring.server_metrics import server_registry
from tables import builds
from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.names import LLCSegmentName
from tables.redisconn import get_redis
from tables.server.admin import AdminServer
from tables.server.consumer import Phase
from tables.server.instance import ServerInstance
from tables.streams.redis_streams import RedisTopicAdmin
from tables.zk.records import read_record
from tests.cluster_fixtures import PATHS, github_rows, load
from tests.ingest_cluster import HOST, free_port, table_config
from tests.poll import wait_until

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]

RAW = "githubEvents"
TABLE = "githubEvents_REALTIME"
SEGMENT_ROWS = 10
# The `topic` fixture wrote partition p's rows at offsets 1..p+1; these are produced on top.
EXTRA = {0: 0, 1: 3, 2: 0, 3: 6}
ROWS = {p: p + 1 + EXTRA[p] for p in range(4)}  # p3: exactly its row limit of 10
NEXT = {p: 1 + ROWS[p] for p in range(4)}  # the next offset to consume (offsets start at 1)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@dataclass
class Serving:
    instance: ServerInstance
    admin: AdminServer
    topic: str
    segments: dict[int, str]  # partition -> its consuming segment
    builds_asked: list[tuple] = field(default_factory=list)
    stopped: bool = False

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.instance.stop()


def _get(port: int, path: str) -> tuple[int, str, bytes]:
    """(status, content type, body) of GET `path` on the admin server, errors included."""
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=10) as reply:
            return reply.status, reply.headers["Content-Type"], reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def _json(port: int, path: str) -> object:
    status, _, body = _get(port, path)
    assert status == 200, (path, status, body)
    return json.loads(body)


def _samples(port: int) -> Samples:
    status, content_type, body = _get(port, "/metrics")
    assert status == 200
    assert content_type.startswith("text/plain")
    out: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def _labels(topic: str | None, partition: int) -> frozenset[tuple[str, str]]:
    labels = {"table": RAW, "tableType": "REALTIME", "partition": str(partition)}
    if topic is not None:
        labels["topic"] = topic
    return frozenset(labels.items())


@pytest.fixture
def serving(cluster, topic, tmp_path: Path) -> Iterator[Serving]:
    """The githubEvents table (replication 1, 10-row segments) on one fresh in-process server."""
    port = free_port()
    instance_id = f"Server_{HOST}_{port}"
    asked: list[tuple] = []

    def submit_build(*args: object) -> None:
        asked.append(args)
        raise AssertionError("no build may be submitted without a controller's COMMIT")

    admin_port = free_port()
    instance = ServerInstance(
        instance_id,
        HOST,
        port,
        context.current,
        builds.deep_store,
        submit_build,
        tmp_path / "server",
        admin_port=admin_port,
        hold_s=0.2,
        tick_s=0.5,
    )
    registry = server_registry(instance)
    admin = AdminServer(
        instance, HOST, admin_port, lambda: (generate_latest(registry), CONTENT_TYPE_LATEST)
    )
    admin.start()
    instance.start()
    state = Serving(instance, admin, topic, {}, asked)
    try:
        # The instance registers itself (config with its tag, live instance) before the table
        # exists, so the table's assignment (replication 1) puts every partition on it.
        wait_until(lambda: cluster.exists(PATHS.liveinstance(instance_id)), what="registered")
        manager = ResourceManager(context.current())
        manager.add_schema(load("githubEvents_schema.json"))
        config = table_config(
            topic, **{"realtime.segment.flush.threshold.segment.rows": str(SEGMENT_ROWS)}
        )
        config["segmentsConfig"]["replication"] = "1"
        manager.add_table(config)
        for segment, replicas in manager.idealstate(TABLE).items():
            assert replicas == {instance_id: "CONSUMING"}
            name = LLCSegmentName.parse(segment)
            assert name is not None
            state.segments[name.partition_group_id] = segment
            assert manager.segment_metadata(TABLE, segment).flush_threshold_size == SEGMENT_ROWS
        assert sorted(state.segments) == [0, 1, 2, 3]
        producer = RedisTopicAdmin(get_redis(settings.REDIS_URL))
        rows = github_rows()
        for partition, count in EXTRA.items():
            if count:
                producer.produce(topic, partition, rows[:count], now_ms=1_626_847_200_000)
        yield state
    finally:
        state.stop()
        admin.stop()


def _all_read(serving: Serving) -> list[dict] | None:
    """The consumingSegmentsInfo once every partition has read all it will read and partition 3,
    at its row limit, stopped consuming; else None."""
    info = _json(serving.admin.port, f"/tables/{TABLE}/consumingSegmentsInfo")
    current = {
        p: o for item in info for p, o in item["partitionOffsetInfo"]["currentOffsets"].items()
    }
    if current != {str(p): str(NEXT[p]) for p in range(4)}:
        return None
    debug = {i["segmentName"]: i for i in _json(serving.admin.port, f"/debug/tables/{TABLE}")}
    return info if debug[serving.segments[3]].get("phase") == "HOLDING" else None


def test_admin_http_metrics_and_current_states_of_a_server_without_controller(serving, zk):
    port = serving.admin.port
    instance = serving.instance
    status, _, body = _get(port, "/health")
    assert (status, body) == (200, b"OK")

    info = wait_until(lambda: _all_read(serving), what="every partition read")
    assert [item["segmentName"] for item in info] == sorted(serving.segments.values())
    by_partition = {int(next(iter(item["partitionToOffsetMap"]))): item for item in info}
    for partition, item in by_partition.items():
        assert item["segmentName"] == serving.segments[partition]
        key, offset = str(partition), str(NEXT[partition])
        assert item["partitionToOffsetMap"] == {key: offset}
        assert item["partitionOffsetInfo"] == {
            "currentOffsets": {key: offset},
            "latestUpstreamOffsets": {key: offset},
            "recordsLag": {key: "0"},
            "availabilityLagMs": {key: "0"},
        }
        assert item["lastConsumedTimestamp"] > 0
    # Partition 3 reached its 10-row limit and holds, asking the controller; like Pinot, only a
    # failed or stopped consumer is NOT_CONSUMING (the gauge below tells holding apart).
    assert [by_partition[p]["consumerState"] for p in range(4)] == ["CONSUMING"] * 4
    assert _json(port, f"/tables/{RAW}/consumingSegmentsInfo") == info

    debug = {item["segmentName"]: item for item in _json(port, f"/debug/tables/{RAW}")}
    holding = debug[serving.segments[3]]
    assert (holding["phase"], holding["endReason"], holding["rows"]) == ("HOLDING", "rowLimit", 10)
    assert holding["currentState"] == "CONSUMING"
    assert debug[serving.segments[1]]["phase"] == "CONSUMING"

    status, content_type, body = _get(port, "/tables/noSuchTable/consumingSegmentsInfo")
    assert (status, content_type) == (404, "application/json")
    error = json.loads(body)
    assert error["code"] == 404 and "noSuchTable" in error["error"]
    assert _get(port, "/no/such/endpoint")[0] == 404

    # The holding consumer's answers are counted: NOT_SENT, since no controller leads the table.
    wait_until(lambda: instance.client.responses.get("NOT_SENT", 0) >= 2, what="NOT_SENT twice")
    samples = _samples(port)
    for partition in range(4):
        client_labels = _labels(serving.topic, partition)
        rows = samples[("pinot_server_realtimeRowsConsumed_Count", client_labels)]
        assert rows == ROWS[partition]
        consuming = samples[("pinot_server_llcPartitionConsuming_Value", client_labels)]
        assert consuming == (0 if partition == 3 else 1)
        assert samples[("pinot_server_segmentBuildFailure_Count", client_labels)] == 0
        partition_labels = _labels(None, partition)
        assert samples[("pinot_server_realtimeIngestionOffsetLag_Value", partition_labels)] == 0
        assert samples[("pinot_server_realtimeIngestionDelayMs_Value", partition_labels)] == 0
        upstream = samples[("pinot_server_realtimeIngestionUpstreamOffset_Value", partition_labels)]
        assert upstream == NEXT[partition]
        offset = samples[("pinot_server_realtimeIngestionConsumingOffset_Value", partition_labels)]
        assert offset == NEXT[partition]
    assert samples[("pinot_server_realtimeRowsConsumed_Count", frozenset())] == sum(ROWS.values())
    assert samples[("pinot_server_llcControllerResponseNotSent_Count", frozenset())] >= 2
    # Every protocol status has its meter, 0 until answered (a restart reads 0, not absent).
    assert samples[("pinot_server_llcControllerResponseCommitSuccess_Count", frozenset())] == 0

    # CURRENTSTATES/<session>/githubEvents_REALTIME: every segment CONSUMING.
    live = read_record(zk, PATHS.liveinstance(instance.instance_id)).record
    session = live.simple_fields["SESSION_ID"]
    assert session == instance.session
    states = read_record(zk, PATHS.currentstate(instance.instance_id, session, TABLE)).record
    assert states.map_fields == {
        segment: {"CURRENT_STATE": "CONSUMING"} for segment in serving.segments.values()
    }
    assert states.simple_fields["SESSION_ID"] == session
    assert states.simple_fields["STATE_MODEL_DEF"] == "SegmentOnlineOfflineStateModel"

    # Stopping ends every consumer; nothing was ever built.
    serving.stop()
    consumers = [r.consumer for r in instance.replicas[TABLE].values()]
    assert len(consumers) == 4
    assert all(c is not None and c.finished and c.phase is Phase.STOPPED for c in consumers)
    after = _json(port, f"/tables/{TABLE}/consumingSegmentsInfo")
    assert [item["consumerState"] for item in after] == ["NOT_CONSUMING"] * 4
    # No partition is consumed any more: its per-partition gauges go (no frozen lag series),
    # its rows-consumed meter stays.
    samples = _samples(port)
    for partition in range(4):
        labels = _labels(serving.topic, partition)
        assert ("pinot_server_llcPartitionConsuming_Value", labels) not in samples
        assert ("pinot_server_realtimeIngestionOffsetLag_Value", _labels(None, partition)) not in (
            samples
        )
        assert samples[("pinot_server_realtimeRowsConsumed_Count", labels)] == ROWS[partition]
    assert serving.builds_asked == []


def test_a_holding_partition_reports_rows_arriving_upstream(serving):
    port = serving.admin.port
    wait_until(lambda: _all_read(serving), what="every partition read")
    producer = RedisTopicAdmin(get_redis(settings.REDIS_URL))
    producer.produce(serving.topic, 3, github_rows()[:5], now_ms=1_626_847_200_000)
    latest = str(NEXT[3] + 5)

    def lag_reported() -> bool:
        info = _json(port, f"/tables/{TABLE}/consumingSegmentsInfo")
        item = next(i for i in info if i["segmentName"] == serving.segments[3])
        offsets = item["partitionOffsetInfo"]
        return offsets["latestUpstreamOffsets"] == {"3": latest} and offsets["recordsLag"] == {
            "3": "5"
        }

    wait_until(lag_reported, timeout=15, what="the holding partition's upstream rows")
    lag = _samples(port)[("pinot_server_realtimeIngestionOffsetLag_Value", _labels(None, 3))]
    assert lag == 5
