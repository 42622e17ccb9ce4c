"""Re-ingestion end to end (round 2 §C): a COMMITTING segment whose only replica is in ERROR, with
its rows in the Redis topic, is re-ingested through a real server's `POST /reingestSegment/{seg}`:
the job runs the Spark task `tables.spark_reingest_segment` on the session's Celery spark worker,
then completes with `POST /segments/reingested` on the lead controller (the Django app served by
`live_server`, registered as the MASTER of every lead partition), which marks the segment DONE
with the CRC a normal build of the same rows gives (`tables.spark_build_segment` from staged rows)
and sends the replica its reset (ERROR -> OFFLINE)."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from console.api import completion
from tables import builds
from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentStatus, SegmentZKMetadata
from tables.domain.znrecord import ZNRecord
from tables.redisconn import get_redis
from tables.security import cluster_token
from tables.segments.builder import write_staging
from tables.server.admin import AdminServer
from tables.server.instance import ServerInstance
from tables.streams.redis_streams import RedisTopicAdmin
from tables.tasks import spark_build_segment
from tables.zk import messages
from tables.zk.participants import register_participant
from tables.zk.records import create_record, read_record, update_record
from tests.cluster_fixtures import PATHS, github_rows, load
from tests.ingest_cluster import HOST, admin_get, free_port, table_config
from tests.poll import wait_until
from tests.tables.leaders import lead_every_partition

pytestmark = [
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.spark,
    pytest.mark.celery,
    pytest.mark.django_db(transaction=True),
]
TABLE = "githubEvents_REALTIME"
REPLICA = "Server_127.0.0.1_7101"  # live, tagged for no table: the ERROR replica
TASK_TIMEOUT = 300
ROWS = 250


@pytest.fixture
def zk(worker_zk):
    """The cluster fixtures build on `zk`: here, the chroot the Celery workers read."""
    return worker_zk


@pytest.fixture
def controller(cluster, live_server, settings) -> str:
    """The Django app behind `live_server` as the lead controller of every table."""
    port = urllib.parse.urlsplit(live_server.url).port
    instance = lead_every_partition(cluster, f"Controller_{HOST}_{port}")
    settings.CONTROLLER_INSTANCE_ID = instance
    settings.CONTROLLER_VIP_URL = f"http://{HOST}:{port}"
    completion._manager.cache_clear()
    yield settings.CONTROLLER_VIP_URL
    completion._manager.cache_clear()


@pytest.fixture
def server(cluster, topic, controller, tmp_path: Path):
    """One in-process server serving githubEvents, its admin port with re-ingestion as run_server
    has it (the Spark task sent by name). Yields the admin port."""
    port = free_port()
    instance = ServerInstance(
        f"Server_{HOST}_{port}",
        HOST,
        port,
        context.current,
        builds.deep_store,
        lambda *a: pytest.fail("no build here"),
        tmp_path / "server",
        tick_s=0.5,
    )
    admin = AdminServer(instance, HOST, free_port(), lambda: (b"", "text/plain"))
    instance.start()
    admin.start()
    try:
        wait_until(lambda: cluster.exists(PATHS.liveinstance(instance.instance_id)), what="live")
        manager = ResourceManager(context.current())
        manager.add_schema(load("githubEvents_schema.json"))
        config = table_config(topic)
        config["segmentsConfig"]["replication"] = "1"
        manager.add_table(config)
        wait_until(lambda: instance.replicas_of(TABLE), what="the server serves the table")
        yield admin.port
    finally:
        admin.stop()
        instance.stop()


def _committing_segment(zk, topic: str, settings) -> tuple[str, list[int], list[bytes]]:
    """Partition 2 gets ROWS rows; a segment over exactly them, COMMITTING, in the IdealState on
    REPLICA, which the ExternalView shows in ERROR (what a failed pauseless build leaves)."""
    rows = github_rows()[:ROWS]
    offsets = RedisTopicAdmin(get_redis(settings.REDIS_URL)).produce(topic, 2, rows, now_ms=0)
    segment = str(LLCSegmentName.create("githubEvents", 2, 9, 1_626_847_200_000))
    meta = SegmentZKMetadata(
        segment,
        status=SegmentStatus.COMMITTING,
        start_offset=str(offsets[0]),
        end_offset=str(offsets[-1] + 1),
        num_replicas=1,
        creation_time=1_626_847_200_000,
    )
    create_record(zk, PATHS.segment(TABLE, segment), meta.to_znrecord())
    register_participant(zk, PATHS, REPLICA, HOST, 7101, ["elsewhere_REALTIME"])

    def place(record: ZNRecord) -> ZNRecord:
        out = record.copy()
        out.map_fields[segment] = {REPLICA: "ONLINE"}
        return out

    update_record(zk, PATHS.idealstate(TABLE), place)
    view = ZNRecord(id=TABLE, map_fields={segment: {REPLICA: "ERROR"}})
    create_record(zk, PATHS.externalview(TABLE), view)
    return segment, offsets, rows


def _post(port: int, segment: str) -> dict:
    request = urllib.request.Request(
        f"http://{HOST}:{port}/reingestSegment/{segment}", data=b'""', method="POST"
    )
    request.add_header("Authorization", f"Bearer {cluster_token()}")
    with urllib.request.urlopen(request, timeout=10) as reply:
        assert reply.status == 200
        return json.loads(reply.read())


def _normal_build_crc(segment: str, offsets: list[int], rows: list[bytes], tmp_path) -> int:
    """The CRC of the committer's build of the same rows at the same offsets."""
    local = tmp_path / "rows.parquet"
    write_staging(zip(offsets, rows, strict=True), local)
    store = builds.deep_store()
    staging = store.staging_key("githubEvents", f"{segment}.normal")
    store.publish(local, staging)
    output = f"githubEvents/{segment}.tmp.normal"
    try:
        outcome = spark_build_segment.delay(
            "githubEvents", segment, staging, offsets[0], offsets[-1] + 1, output
        ).get(TASK_TIMEOUT)
    finally:
        store.delete(staging)
        store.delete(output)
    assert outcome["rows"] == len(rows)
    return int(outcome["crc"])


def test_a_committing_segment_is_reingested_and_done(
    celery_workers, zk, topic, server, controller, settings, tmp_path
):
    segment, offsets, rows = _committing_segment(zk, topic, settings)

    job = _post(server, segment)
    assert job["segmentName"] == segment
    assert admin_get(server, "/reingestSegment/jobs") == [job]
    wait_until(
        lambda: admin_get(server, "/reingestSegment/jobs") == [],
        timeout=TASK_TIMEOUT,
        interval=0.5,
        what="the re-ingestion job to end",
    )

    found = read_record(zk, PATHS.segment(TABLE, segment))
    done = SegmentZKMetadata.from_znrecord(found.record)
    assert done.status is SegmentStatus.DONE, "the job ended without completing (see its log)"
    assert done.total_docs == ROWS
    assert done.end_offset == str(offsets[-1] + 1)
    assert done.download_url == f"{controller}/segments/githubEvents/{segment}"
    store = builds.deep_store()
    assert store.exists(store.segment_key("githubEvents", segment))
    assert done.size_in_bytes == store.size(store.segment_key("githubEvents", segment))

    resets = [
        messages.parse_state_transition(messages.read_message(zk, PATHS, REPLICA, msg_id))
        for msg_id in messages.message_ids(zk, PATHS, REPLICA)
    ]
    assert [(r.segment, r.from_state, r.to_state) for r in resets if r] == [
        (segment, "ERROR", "OFFLINE")
    ]

    assert done.crc == _normal_build_crc(segment, offsets, rows, tmp_path)
