"""Offsets a consumer found trimmed from the stream reach the committed segment's metadata.

A real `SegmentConsumer` reads a real Redis stream (trimmed with XTRIM between two of its fetches)
and commits through the real `Committer` and completion endpoints (Django's test client stands
for HTTP; the Spark build is replaced by a tar with the two metadata files) to the in-process
`CompletionManager`, which leads the table, on the real ZooKeeper. The DONE metadata's
`custom.map` then declares the lost range and `llcStreamDataLoss` counts the segment. Commit-end
calls with a malformed or impossible `streamDataLoss` are refused and write nothing.
"""

from __future__ import annotations

import threading
import urllib.parse
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from console.api import completion
from tables import builds
from tables.cluster import context
from tables.controller import completion_trust
from tables.controller.resources import ResourceManager
from tables.domain.completion_response import Response
from tables.domain.ledger import LOST_OFFSETS_KEY
from tables.domain.segment_metadata import SegmentZKMetadata
from tables.ledger import verify_table
from tables.models import DurableCounter
from tables.redisconn import get_redis
from tables.security import cluster_token
from tables.segments.segment_format import format_properties, pack_creation_meta, pack_segment
from tables.server.committer import Committer
from tables.server.consumer import ConsumingSegment, PartitionStats, Phase, SegmentConsumer
from tables.server.protocol import CompletionClient, LeaderLocator, query_params
from tables.streams.base import MessageBatch
from tables.streams.redis_streams import RedisStreamProvider, RedisTopicAdmin
from tables.zk.records import read_record
from tests.cluster_fixtures import PATHS, load
from tests.ingest_cluster import table_config
from tests.poll import wait_until
from tests.tables.leaders import lead_every_partition

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db(transaction=True)]
TABLE = "githubEvents_REALTIME"
ME = "Controller_127.0.0.1_9000"


@pytest.fixture(autouse=True)
def controller(settings, monkeypatch, tmp_path):
    """This process leads the table's completion; refusals are counted at once; a deep store of
    the test's own."""
    monkeypatch.setattr(completion_trust, "FLUSH_EVERY_S", 0)
    settings.CONTROLLER_INSTANCE_ID = ME
    settings.CONTROLLER_VIP_URL = "http://controller:9000"
    settings.DEEP_STORE_URI = (tmp_path / "deepstore").as_uri()
    completion._manager.cache_clear()
    yield
    completion._manager.cache_clear()


@pytest.fixture
def table(servers, topic, zk) -> tuple[str, str, int]:
    """githubEvents (replication 1) led by this process: partition 0's segment, its replica and
    its start offset."""
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    config = table_config(topic)
    config["segmentsConfig"]["replication"] = "1"
    manager.add_table(config)
    lead_every_partition(zk, ME)  # this process: live, MASTER of every partition
    for segment, replicas in manager.idealstate(TABLE).items():
        if segment.startswith("githubEvents__0__"):
            start = manager.segment_metadata(TABLE, segment).start_offset
            return segment, next(iter(replicas)), int(start or 0)
    raise AssertionError("no segment for partition 0")


class ThroughDjango(CompletionClient):
    """The server's completion client, its HTTP calls made with Django's test client; `sent`
    lists the calls' types in order."""

    def __init__(self, instance_id: str) -> None:
        super().__init__(instance_id, LeaderLocator(context.current))
        self.http = Client(HTTP_AUTHORIZATION=f"Bearer {cluster_token()}")
        self.sent: list[str] = []

    def _send(self, table, msg_type, segment, offset, optional, body, content_type, timeout):
        self.sent.append(msg_type)
        query = urllib.parse.urlencode(query_params(self.instance_id, segment, offset, optional))
        url = f"/{msg_type}?{query}"
        if body is None:
            answer = self.http.get(url)
        else:
            answer = self.http.post(url, data=body, content_type=content_type)
        return Response.from_json(answer.json())


class Built:
    """A finished build (what the committer reads of a Celery result)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def ready(self) -> bool:
        return True

    def successful(self) -> bool:
        return True

    def get(self, timeout=None, propagate=True) -> dict[str, int]:
        return {"size_bytes": self.size}

    def revoke(self) -> None:
        raise AssertionError("a finished build is not revoked")


def build_without_spark(tmp_path: Path):
    """Publish a segment tar with the staged rows' count to the upload key, as the build does."""

    def submit(table, segment, staging_key, start, end, upload_key) -> Built:
        store = builds.deep_store()
        work = tmp_path / f"build-{uuid.uuid4().hex}"
        segment_dir = work / segment
        segment_dir.mkdir(parents=True)
        staged = store.download(staging_key, work / "rows.parquet")
        rows = pq.read_metadata(staged).num_rows
        properties = {"segment.total.docs": str(rows), "segment.start.time": "0"}
        (segment_dir / "metadata.properties").write_text(format_properties(properties))
        (segment_dir / "creation.meta").write_bytes(pack_creation_meta(4242, 1))
        size = pack_segment(segment_dir, work / "segment.tar.gz")
        store.publish(work / "segment.tar.gz", upload_key)
        return Built(size)

    return submit


class GatedStream(RedisStreamProvider):
    """The real Redis stream, fetched only with a permit (an empty poll without one)."""

    def __init__(self, topic: str) -> None:
        super().__init__(get_redis(settings.REDIS_URL), topic)
        self.permits = threading.Semaphore(0)

    def fetch(self, partition: int, start: int, most: int, timeout_ms: int) -> MessageBatch:
        if not self.permits.acquire(timeout=max(timeout_ms, 1) / 1000):
            return MessageBatch([], start, start, False)
        return super().fetch(partition, start, most, timeout_ms)


def _meta(zk, segment: str) -> SegmentZKMetadata:
    return SegmentZKMetadata.from_znrecord(read_record(zk, PATHS.segment(TABLE, segment)).record)


def test_a_trimmed_stream_is_declared_in_the_committed_metadata(table, topic, zk, tmp_path):
    segment, replica, start = table
    assert start == 1  # the `topic` fixture wrote offset 1 of partition 0
    admin = RedisTopicAdmin(get_redis(settings.REDIS_URL))
    stream = GatedStream(topic)
    client = ThroughDjango(replica)
    committer = Committer(client, builds.deep_store, build_without_spark(tmp_path), tmp_path)
    spec = ConsumingSegment(TABLE, segment, topic, 0, start, 1000, 3_600_000, 0)
    consumer = SegmentConsumer(
        spec,
        stream,
        client,
        committer,
        PartitionStats(TABLE, topic, 0),
        clock=lambda: 1.0,
        hold_s=0.2,
        fetch_timeout_ms=20,
        instance_id=replica,
    )
    admin.produce(topic, 0, [b"{}"] * 10, now_ms=0)  # offsets 2..11
    consumer.start()
    try:
        stream.permits.release()
        wait_until(lambda: consumer.next_offset == 12, what="offsets 1..11 read")
        admin.produce(topic, 0, [b"{}"] * 10, now_ms=0)  # 12..21
        admin.trim_before(topic, 0, 17)  # 12..16 dropped before the consumer read them
        stream.permits.release()
        wait_until(lambda: consumer.next_offset == 22, what="offsets 17..21 read")
        assert consumer.lost_ranges == [(12, 17)]
        consumer.force_commit()
        wait_until(lambda: consumer.phase is Phase.COMMITTED, what="the segment committed")
    finally:
        consumer.stop()
        consumer.join(10)

    done = _meta(zk, segment)
    assert (done.status, done.start_offset, done.end_offset) == ("DONE", "1", "22")
    assert done.total_docs == 16  # 1..11 and 17..21
    assert done.custom_map == {LOST_OFFSETS_KEY: "12-17"}
    assert DurableCounter.value_of("llcStreamDataLoss", "githubEvents") == 1
    assert verify_table(context.current(), TABLE).ok


def _commit_end(client: Client, tmp_path: Path, replica: str, segment: str, end: int, lost: str):
    store = builds.deep_store()
    upload = f"githubEvents/{segment}.tmp.{uuid.uuid4().hex}"
    local = tmp_path / "upload.tar.gz"
    local.write_bytes(b"tar!")
    store.publish(local, upload)
    files = {
        "metadata.properties": SimpleUploadedFile(
            "metadata.properties", format_properties({"segment.total.docs": "5"}).encode()
        ),
        "creation.meta": SimpleUploadedFile("creation.meta", pack_creation_meta(7, 1)),
    }
    query = urllib.parse.urlencode(
        {
            "instance": replica,
            "name": segment,
            "streamPartitionMsgOffset": end,
            "location": store.uri_for(upload),
            "streamDataLoss": lost,
        }
    )
    return client.post(f"/segmentCommitEndWithMetadata?{query}", files).json()


def _started(client: Client, replica: str, segment: str, end: int) -> None:
    """The protocol up to commit end: COMMIT, then COMMIT_CONTINUE."""
    params = {"instance": replica, "name": segment, "streamPartitionMsgOffset": end}
    consumed = client.get("/segmentConsumed", {**params, "reason": "rowLimit"}).json()
    assert consumed["status"] == "COMMIT"
    assert client.get("/segmentCommitStart", params).json()["status"] == "COMMIT_CONTINUE"


@pytest.fixture
def rows(table, topic) -> int:
    """Offsets 2..11 produced to partition 0; returns the end offset the tests commit at."""
    RedisTopicAdmin(get_redis(settings.REDIS_URL)).produce(topic, 0, [b"{}"] * 10, now_ms=0)
    return table[2] + 10


def test_a_malformed_declaration_is_refused_before_the_fsm_sees_it(table, rows, zk, tmp_path):
    segment, replica, _ = table
    client = Client(HTTP_AUTHORIZATION=f"Bearer {cluster_token()}")
    _started(client, replica, segment, rows)
    before = read_record(zk, PATHS.segment(TABLE, segment)).version
    for bad in ("5-3", "3-5,4-6", "x", f"3-{rows + 1}"):  # the last ends past the end offset
        assert _commit_end(client, tmp_path, replica, segment, rows, bad)["status"] == "FAILED"
    assert read_record(zk, PATHS.segment(TABLE, segment)).version == before
    # The FSM still waits for this commit end: a well-formed one commits.
    done = _commit_end(client, tmp_path, replica, segment, rows, "3-5")
    assert done["status"] == "COMMIT_SUCCESS"
    meta = _meta(zk, segment)
    assert (meta.status, meta.custom_map) == ("DONE", {LOST_OFFSETS_KEY: "3-5"})
    assert DurableCounter.value_of("llcStreamDataLoss", "githubEvents") == 1


def test_a_declaration_before_the_segment_aborts_the_commit_and_writes_nothing(
    table, rows, zk, tmp_path
):
    segment, replica, _ = table
    client = Client(HTTP_AUTHORIZATION=f"Bearer {cluster_token()}")
    _started(client, replica, segment, rows)
    before = read_record(zk, PATHS.segment(TABLE, segment)).version
    assert _meta(zk, segment).start_offset == "1"
    answer = _commit_end(client, tmp_path, replica, segment, rows, "0-1")  # before the segment
    assert answer["status"] == "FAILED"
    meta = _meta(zk, segment)
    assert (meta.status, meta.custom_map) == ("IN_PROGRESS", {})
    assert read_record(zk, PATHS.segment(TABLE, segment)).version == before
    assert DurableCounter.value_of("llcStreamDataLoss", "githubEvents") == 0
