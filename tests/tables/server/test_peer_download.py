"""Peer download on the server (issue 17; round 2 §B.2, §B.4, §B.5), real ZooKeeper and Redis.

Two real in-process `ServerInstance`s with their admin ports, no controller (the test writes what
the controller would: the segment's metadata, the IdealState flip, the ExternalView):
- a segment DONE with download URL "" goes ONLINE on the server that holds a copy; the other
  waits until the ExternalView shows the holder ONLINE, then fetches the copy from the holder's
  `GET /segments/{table}/{segment}` (cluster token; 401 without, 404 from a server holding none);
- a COMMITTING segment goes ONLINE with the committer's own build, and the other replica fetches
  it from that peer (no CRC to check yet);
- `POST .../uploadCommittedSegment` uploads the held copy to `<raw>/<segment>.tmp.<uuid>` and
  answers the ZK simple fields as the controller should write them (status DONE, CRC, the URI);
  ZooKeeper is not written; 400 for a bad `uploadTimeoutMs`, 401, 404;
- a segment nobody holds: the replicas wait, then go to ERROR past the table's download timeout.

The committer against the real completion endpoints (Django's test client standing for HTTP, the
in-process controller leading the table; the Spark build replaced by a tar): with the upload
failing (fault point) and a peer scheme, it commits `peer:///<segment>` (DONE, URL "", no
deep-store copy, `segmentMissingDeepStoreLink` not counted) and keeps its copy as its own build;
without a peer scheme the commit fails, and the next one (the fault is one-shot) uploads.
"""

from __future__ import annotations

import json
import logging
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings

from console.api import completion
from tables import builds
from tables.cluster import context
from tables.controller import completion_trust
from tables.controller.resources import ResourceManager
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentZKMetadata
from tables.domain.segment_states import SegmentState
from tables.models import DurableCounter
from tables.redisconn import get_redis
from tables.security import cluster_token
from tables.segments.segment_format import (
    CREATION_META,
    METADATA_FILE,
    format_properties,
    pack_creation_meta,
    pack_segment,
)
from tables.server.admin import AdminServer
from tables.server.committer import Committer
from tables.server.consumer import ConsumingSegment, PartitionStats, Phase, SegmentConsumer
from tables.server.instance import Replica, ServerInstance
from tables.server.local_segments import PAUSELESS_DOWNLOAD_TIMEOUT_KEY, LocalSegments
from tables.streams.redis_streams import RedisStreamProvider
from tables.zk import codec
from tables.zk.records import read_record, update_record
from tests.cluster_fixtures import PATHS, load
from tests.ingest_cluster import HOST, free_port, table_config
from tests.poll import wait_until
from tests.tables.leaders import lead_every_partition
from tests.tables.test_stream_data_loss import ThroughDjango, build_without_spark

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]
TABLE = "githubEvents_REALTIME"
CRC = 4_242_424
BUILT_CRC = 4242  # what `build_without_spark` writes
ME = "Controller_127.0.0.1_9000"


def _pauseless(topic: str, **stream: str) -> dict:
    rest = table_config(
        topic, **{"realtime.segment.flush.threshold.segment.rows": "1000"}, **stream
    )
    rest["segmentsConfig"]["peerSegmentDownloadScheme"] = "http"
    rest["ingestionConfig"]["streamIngestionConfig"]["pauselessConsumptionEnabled"] = True
    return rest


# --- two servers, no controller ---------------------------------------------------------------
@dataclass
class Peer:
    instance: ServerInstance
    admin: AdminServer
    port: int

    @property
    def id(self) -> str:
        return self.instance.instance_id

    def replica(self, segment: str) -> Replica | None:
        return (self.instance.replicas_of(TABLE) or {}).get(segment)

    def state(self, segment: str) -> SegmentState | None:
        replica = self.replica(segment)
        return None if replica is None else replica.state

    def waiting(self, segment: str) -> str:
        replica = self.replica(segment)
        return "" if replica is None else replica.waiting or ""


@pytest.fixture
def peers(cluster, topic, tmp_path: Path, request) -> Iterator[tuple[Peer, Peer]]:
    """githubEvents, pauseless, replication 2 with peer scheme http, on two in-process servers
    (every partition consuming on both); the download timeout (s) is the indirect parameter."""
    timeout = getattr(request, "param", "300")
    made: list[Peer] = []
    try:
        for index in range(2):
            port = free_port()
            instance = ServerInstance(
                f"Server_{HOST}_{port}",
                HOST,
                port,
                context.current,
                builds.deep_store,
                lambda *a: pytest.fail("nothing is built without a controller"),
                tmp_path / f"server{index}",
                hold_s=0.2,
                tick_s=0.5,
            )
            admin = AdminServer(instance, HOST, port, lambda: (b"", "text/plain"))
            admin.start()
            instance.start()
            made.append(Peer(instance, admin, port))
        for peer in made:
            wait_until(lambda p=peer: cluster.exists(PATHS.liveinstance(p.id)), what="live")
        manager = ResourceManager(context.current())
        manager.add_schema(load("githubEvents_schema.json"))
        manager.add_table(_pauseless(topic, **{PAUSELESS_DOWNLOAD_TIMEOUT_KEY: timeout}))

        def consuming() -> bool:
            ideal = manager.idealstate(TABLE)
            return len(ideal) == 4 and all(
                p.state(s) is SegmentState.CONSUMING for s in ideal for p in made
            )

        wait_until(consuming, what="every partition consuming on both servers")
        yield made[0], made[1]
    finally:
        for peer in made:
            peer.instance.stop()
            peer.admin.stop()


def _segment(partition: int) -> str:
    ideal = ResourceManager(context.current()).idealstate(TABLE)
    return next(s for s in ideal if LLCSegmentName.parse(s).partition_group_id == partition)


def _meta(zk, segment: str) -> SegmentZKMetadata:
    return SegmentZKMetadata.from_znrecord(read_record(zk, PATHS.segment(TABLE, segment)).record)


def _write_meta(zk, meta: SegmentZKMetadata) -> None:
    update_record(zk, PATHS.segment(TABLE, meta.segment_name), lambda _old: meta.to_znrecord())


def _tar(tmp_path: Path, segment: str, crc: int = CRC) -> Path:
    folder = tmp_path / "built" / segment
    folder.mkdir(parents=True)
    properties = {"segment.name": segment, "segment.total.docs": "1", "segment.end.time": "9"}
    (folder / METADATA_FILE).write_text(format_properties(properties))
    (folder / CREATION_META).write_bytes(pack_creation_meta(crc, 1))
    tar = tmp_path / f"{segment}.tar.gz"
    pack_segment(folder, tar)
    return tar


def _keep(peer: Peer, segment: str, tar: Path) -> None:
    """What a committer's step 4 leaves: its copy in its local store."""
    target = peer.instance.local.path(TABLE, segment)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tar, target)


def _online(zk, segment: str, peers: tuple[Peer, Peer]) -> None:
    def flip(record):
        out = record.copy()
        out.map_fields[segment] = {p.id: "ONLINE" for p in peers}
        return out

    update_record(zk, PATHS.idealstate(TABLE), flip)


def _external(zk, segment: str, states: dict[str, str]) -> None:
    path = PATHS.externalview(TABLE)
    if read_record(zk, path) is None:
        zk.create(
            path, codec.encode(read_record(zk, PATHS.idealstate(TABLE)).record), makepath=True
        )

    def view(record):
        out = record.copy()
        out.map_fields[segment] = dict(states)
        return out

    update_record(zk, path, view)


def _call(
    port: int, path: str, method: str = "GET", token: str | None = "default"
) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://{HOST}:{port}{path}", method=method)
    if method == "POST":
        request.data = b""
    if token is not None:
        request.add_header(
            "Authorization", f"Bearer {cluster_token() if token == 'default' else token}"
        )
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as refused:
        with refused:
            return refused.code, refused.read()


def _committed_to_peers(zk, tmp_path: Path, peers: tuple[Peer, Peer], partition: int) -> str:
    """Partition's segment DONE with download URL "" (end offset 2), the first server holding
    its copy; both replicas told ONLINE. Returns the segment once the holder is ONLINE."""
    holder, _other = peers
    segment = _segment(partition)
    tar = _tar(tmp_path, segment)
    _keep(holder, segment, tar)
    _write_meta(
        zk,
        _meta(zk, segment)
        .mark_committing("2")
        .mark_done(
            end_offset="2",
            start_time_ms=1,
            end_time_ms=9,
            total_docs=1,
            crc=CRC,
            data_crc=CRC,
            size_in_bytes=tar.stat().st_size,
            download_url="",
        ),
    )
    _online(zk, segment, peers)
    wait_until(lambda: holder.state(segment) is SegmentState.ONLINE, what="the holder ONLINE")
    return segment


def test_a_segment_only_peers_hold_is_fetched_from_the_peer_online_in_the_external_view(
    peers, zk, tmp_path
):
    holder, other = peers
    segment = _committed_to_peers(zk, tmp_path, peers, 0)
    wait_until(lambda: "a peer holding" in other.waiting(segment), what="the other waiting")
    assert other.state(segment) is SegmentState.CONSUMING
    assert not other.instance.local.has(TABLE, segment, None)

    path = f"/segments/{TABLE}/{segment}"
    assert _call(holder.port, path, token=None)[0] == 401
    assert _call(holder.port, path, token="not-the-token")[0] == 401
    assert _call(other.port, path)[0] == 404  # holds none
    assert _call(holder.port, f"/segments/{TABLE}/githubEvents__0__99__20240501T1030Z")[0] == 404
    status, body = _call(holder.port, path)
    assert status == 200 and body == holder.instance.local.path(TABLE, segment).read_bytes()

    _external(zk, segment, {holder.id: "ONLINE", other.id: "CONSUMING"})
    wait_until(lambda: other.state(segment) is SegmentState.ONLINE, what="fetched from the peer")
    assert other.instance.local.has(TABLE, segment, CRC)
    assert other.replica(segment).waiting is None


def test_upload_committed_segment_uploads_the_held_copy_and_answers_done_fields(
    peers, zk, tmp_path
):
    holder, other = peers
    segment = _committed_to_peers(zk, tmp_path, peers, 1)
    before = read_record(zk, PATHS.segment(TABLE, segment))
    upload = f"/segments/{TABLE}/{segment}/uploadCommittedSegment"

    assert _call(holder.port, f"{upload}?uploadTimeoutMs=30000", "POST", token=None)[0] == 401
    assert _call(other.port, f"{upload}?uploadTimeoutMs=30000", "POST")[0] == 404
    for bad in ("abc", "0", "-5"):
        status, body = _call(holder.port, f"{upload}?uploadTimeoutMs={bad}", "POST")
        assert status == 400 and b"uploadTimeoutMs" in body
    status, body = _call(holder.port, f"{upload}?uploadTimeoutMs=30000", "POST")
    assert status == 200, body
    fields = json.loads(body)
    assert fields["segment.realtime.status"] == "DONE"
    assert (fields["segment.crc"], fields["segment.realtime.endOffset"]) == (str(CRC), "2")
    assert fields["segment.total.docs"] == "1"
    store = builds.deep_store()
    key = store.key_for_uri(fields["segment.download.url"])
    assert key is not None and key.startswith(f"githubEvents/{segment}.tmp.")
    with store.open_read(key) as stream:
        assert stream.read() == holder.instance.local.path(TABLE, segment).read_bytes()
    assert read_record(zk, PATHS.segment(TABLE, segment)).version == before.version  # untouched


def test_a_committing_segment_goes_online_with_the_own_build_and_peers_fetch_it(
    peers, zk, tmp_path
):
    committer, other = peers
    segment = _segment(2)
    _keep(committer, segment, _tar(tmp_path, segment))
    assert committer.instance.local.mark_built(TABLE, segment) == CRC
    _write_meta(zk, _meta(zk, segment).mark_committing("3"))
    _online(zk, segment, peers)
    wait_until(lambda: committer.state(segment) is SegmentState.ONLINE, what="own build ONLINE")
    wait_until(lambda: "COMMITTING" in other.waiting(segment), what="the other waiting")

    _external(zk, segment, {committer.id: "ONLINE", other.id: "CONSUMING"})
    wait_until(lambda: other.state(segment) is SegmentState.ONLINE, what="fetched from the peer")
    assert other.instance.local.has(TABLE, segment, CRC)

    path = f"/segments/{TABLE}/{segment}/uploadCommittedSegment?uploadTimeoutMs=30000"
    status, body = _call(other.port, path, "POST")
    assert status == 200, body
    fields = json.loads(body)
    assert (fields["segment.realtime.status"], fields["segment.realtime.endOffset"]) == (
        "DONE",
        "3",
    )
    assert _meta(zk, segment).status == "COMMITTING"  # the controller writes it, not the server


@pytest.mark.parametrize("peers", ["2"], indirect=True)
def test_a_segment_nobody_holds_puts_the_replicas_in_error_past_the_timeout(peers, zk):
    segment = _segment(3)
    _write_meta(
        zk,
        _meta(zk, segment)
        .mark_committing("4")
        .mark_done(
            end_offset="4",
            start_time_ms=1,
            end_time_ms=2,
            total_docs=3,
            crc=CRC,
            data_crc=CRC,
            size_in_bytes=10,
            download_url="",
        ),
    )
    _online(zk, segment, peers)
    for peer in peers:
        wait_until(lambda p=peer: p.state(segment) is SegmentState.ERROR, what="ERROR")
        assert peer.replica(segment).error == (
            f"TimeoutError: Failed to download segment: {segment} after: 2000ms of retrying"
        )


# --- the committer against the real completion endpoints --------------------------------------
@pytest.fixture
def controller(settings, monkeypatch, tmp_path):
    """This process leads the table's completion; deep store and fault points of the test's own."""
    monkeypatch.setattr(completion_trust, "FLUSH_EVERY_S", 0)
    settings.CONTROLLER_INSTANCE_ID = ME
    settings.CONTROLLER_VIP_URL = "http://controller:9000"
    settings.DEEP_STORE_URI = (tmp_path / "deepstore").as_uri()
    settings.FAULT_INJECTION_DIR = str(tmp_path / "faults")
    (tmp_path / "faults").mkdir()
    completion._manager.cache_clear()
    yield tmp_path / "faults"
    completion._manager.cache_clear()


def _commit_once(zk, topic: str, tmp_path: Path, config: dict, peer_scheme: str | None):
    """Partition 0's segment (1 row, offset 1) committed by a real consumer and committer as its
    first replica; returns (segment, the committer's local store)."""
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    table = manager.add_table(config)
    lead_every_partition(zk, ME)
    segment = _segment(0)
    replica = sorted(manager.idealstate(TABLE)[segment])[0]
    local = LocalSegments(tmp_path / "local")
    committer = Committer(
        ThroughDjango(replica),
        builds.deep_store,
        build_without_spark(tmp_path),
        tmp_path / "work",
        poll_s=0.05,
        instance_id=replica,
        local=local,
        peer_scheme=lambda _table: peer_scheme,
    )
    spec = ConsumingSegment(
        TABLE, segment, topic, 0, 1, 1, 3_600_000, 0, pauseless=table.pauseless_enabled
    )
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
    return segment, local


@pytest.mark.django_db(transaction=True)
def test_a_failed_upload_commits_to_peers_with_a_peer_scheme(
    controller, servers, topic, zk, tmp_path
):
    (controller / "server.any.upload_fails").touch()
    segment, local = _commit_once(zk, topic, tmp_path, _pauseless(topic), "http")
    meta = _meta(zk, segment)
    assert (meta.status, meta.download_url, meta.crc, meta.end_offset) == (
        "DONE",
        "",
        BUILT_CRC,
        "2",
    )
    assert local.has(TABLE, segment, BUILT_CRC) and local.built_crc(TABLE, segment) == BUILT_CRC
    store = builds.deep_store()
    assert not store.exists(store.segment_key("githubEvents", segment))
    assert store.uploads("githubEvents") == []
    assert DurableCounter.value_of("segmentMissingDeepStoreLink", "githubEvents") == 0
    assert not (controller / "server.any.upload_fails").exists()  # tripped


@pytest.mark.django_db(transaction=True)
def test_a_failed_upload_without_a_peer_scheme_fails_the_commit(
    controller, servers, topic, zk, tmp_path, caplog
):
    config = table_config(topic)
    config["segmentsConfig"]["replication"] = "1"
    (controller / "server.any.upload_fails").touch()
    with caplog.at_level(logging.INFO, logger="tables.server.committer"):
        segment, local = _commit_once(zk, topic, tmp_path, config, None)
    failed = [r for r in caplog.records if "no peer download scheme" in r.getMessage()]
    assert len(failed) == 1  # the first commit failed; the next one (one-shot fault) uploaded
    meta = _meta(zk, segment)
    assert (
        meta.status == "DONE"
        and meta.download_url == f"http://controller:9000/segments/githubEvents/{segment}"
    )
    store = builds.deep_store()
    assert store.exists(store.segment_key("githubEvents", segment))
    assert local.has(TABLE, segment, BUILT_CRC)
