"""The committer's upload is a move of the build's hand-over inside the deep store (issue 18):
a real consumer and committer commit partition 0's segment through the real completion endpoints
(Django's test client standing for HTTP, this process leading the table, the Spark build
replaced by a tar published at the hand-over key) on a real file deep store, in blocking and in
pauseless mode. The committed object is the very file the build handed over (same inode: renamed
twice, copied never after the build), the committer keeps its own copy (another file, same
bytes), and nothing is left at the hand-over, staging or upload keys."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.conf import settings

from console.api import completion
from tables import builds
from tables.cluster import context
from tables.controller import completion_trust
from tables.controller.resources import ResourceManager
from tables.domain.segment_metadata import SegmentZKMetadata
from tables.redisconn import get_redis
from tables.server.committer import Committer
from tables.server.consumer import ConsumingSegment, PartitionStats, Phase, SegmentConsumer
from tables.server.local_segments import LocalSegments
from tables.streams.redis_streams import RedisStreamProvider
from tables.zk.records import read_record
from tests.cluster_fixtures import PATHS, load
from tests.ingest_cluster import table_config
from tests.poll import wait_until
from tests.tables.leaders import lead_every_partition
from tests.tables.test_stream_data_loss import ThroughDjango, build_without_spark

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db(transaction=True)]
TABLE = "githubEvents_REALTIME"
ME = "Controller_127.0.0.1_9000"
VIP = "http://controller:9000"


@pytest.fixture
def controller(settings, monkeypatch, tmp_path):
    """This process leads the table's completion, with a file deep store of the test's own."""
    monkeypatch.setattr(completion_trust, "FLUSH_EVERY_S", 0)
    settings.CONTROLLER_INSTANCE_ID = ME
    settings.CONTROLLER_VIP_URL = VIP
    settings.DEEP_STORE_URI = (tmp_path / "deepstore").as_uri()
    completion._manager.cache_clear()
    yield
    completion._manager.cache_clear()


def _config(topic: str, pauseless: bool) -> dict:
    rest = table_config(topic)  # replication 2: this consumer plays the first replica
    if pauseless:
        rest["segmentsConfig"]["peerSegmentDownloadScheme"] = "http"
        rest["ingestionConfig"]["streamIngestionConfig"]["pauselessConsumptionEnabled"] = True
    return rest


@pytest.mark.parametrize("pauseless", [False, True], ids=["blocking", "pauseless"])
def test_the_committed_object_is_the_builds_hand_over_moved(
    controller, servers, topic, zk, tmp_path, pauseless
):
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(_config(topic, pauseless))
    lead_every_partition(zk, ME)
    segment = next(s for s in manager.idealstate(TABLE) if s.startswith("githubEvents__0__"))
    replica = sorted(manager.idealstate(TABLE)[segment])[0]
    store = builds.deep_store()
    build = build_without_spark(tmp_path)
    handed: dict[str, int] = {}

    def submit(table, name, staging_key, start, end, handover_key):
        built = build(table, name, staging_key, start, end, handover_key)
        handed["inode"] = os.stat(store.path_for(handover_key)).st_ino
        return built

    local = LocalSegments(tmp_path / "local")
    calls = ThroughDjango(replica)
    committer = Committer(
        calls,
        builds.deep_store,
        submit,
        tmp_path / "work",
        poll_s=0.05,
        instance_id=replica,
        local=local,
        peer_scheme=lambda _table: "http" if pauseless else None,
    )
    spec = ConsumingSegment(TABLE, segment, topic, 0, 1, 1, 3_600_000, 0, pauseless=pauseless)
    consumer = SegmentConsumer(
        spec,
        RedisStreamProvider(get_redis(settings.REDIS_URL), topic),
        ThroughDjango(replica),
        committer,
        PartitionStats(TABLE, topic, 0),
        hold_s=0.2,
        fetch_timeout_ms=20,
        instance_id=replica,
    )
    consumer.start()
    try:
        wait_until(lambda: consumer.phase is Phase.COMMITTED, timeout=60, what="committed")
    finally:
        consumer.stop()
        consumer.join(10)

    meta = SegmentZKMetadata.from_znrecord(read_record(zk, PATHS.segment(TABLE, segment)).record)
    assert (meta.status, meta.download_url) == ("DONE", f"{VIP}/segments/githubEvents/{segment}")
    final = Path(store.path_for(store.segment_key("githubEvents", segment)))
    assert final.stat().st_ino == handed["inode"]  # the hand-over itself, never copied again
    kept = local.path(TABLE, segment)
    assert kept.stat().st_ino != final.stat().st_ino
    assert kept.read_bytes() == final.read_bytes()
    assert store.uploads("githubEvents") == []
    assert [f for f in Path(store.root, "_staging").rglob("*") if f.is_file()] == []
    # Pauseless: the consumer's segmentConsumed ran commit start (`commitStarted`), so the
    # committer sent none of its own; blocking mode sends it after the build.
    assert calls.sent == (
        ["segmentCommitEndWithMetadata"]
        if pauseless
        else ["segmentCommitStart", "segmentCommitEndWithMetadata"]
    )
