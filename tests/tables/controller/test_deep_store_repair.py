"""The healer's deep-store upload repair (round 2 §B.4, §B.5) on the real ZooKeeper, deep store
and database, against a real HTTP endpoint standing in for a server's admin port that does what
a server's `uploadCommittedSegment` does (publishes a tar at `<raw>/<segment>.tmp.<uuid>` in the
deep store and answers the ZK fields `uploaded_metadata` makes), or misbehaves on demand:
- a DONE segment with download URL "" gets its copy moved to `<raw>/<segment>.tar.gz` and its URL
  (and a differing CRC) filled, compare-and-set; `llcSegmentsDeepStoreUploadRetrySuccess` counts;
- a pauseless COMMITTING segment held ONLINE adopts the server's fields (DONE) past the guard only,
  and leaves `committingSegments`;
- a refusal, an answer pointing outside the segment's uploads, no ONLINE replica, a segment
  repaired meanwhile: a waiting note, nothing written, `...RetryError` counted (not for the last);
- the healing manager runs the step;
- commit end: a blank location counts `segmentMissingDeepStoreLink`, a `peer://` one does not.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from console.api import completion
from tables import builds
from tables.cluster import context
from tables.cluster.context import ClusterContext
from tables.controller import completion_trust
from tables.controller.deep_store_repair import DeepStoreRepairer
from tables.controller.healing import RealtimeSegmentValidationManager
from tables.controller.healing_report import HealingReport
from tables.controller.llc import COMMITTING_SEGMENTS, change_committing
from tables.controller.resources import ResourceManager
from tables.domain.deep_store_repairs import uploaded_metadata
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentZKMetadata
from tables.domain.table_config import TableConfig
from tables.models import DurableCounter
from tables.security import cluster_token
from tables.segments.segment_format import (
    CREATION_META,
    METADATA_FILE,
    format_properties,
    pack_creation_meta,
    pack_segment,
)
from tables.zk import codec
from tables.zk.records import read_record, update_record
from tests.cluster_fixtures import PATHS, load
from tests.ingest_cluster import table_config
from tests.tables.leaders import lead_every_partition

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]
TABLE = "githubEvents_REALTIME"
RAW = "githubEvents"
VIP = "http://controller:9000"
CRC = 555
SUCCESS, ERROR = "llcSegmentsDeepStoreUploadRetrySuccess", "llcSegmentsDeepStoreUploadRetryError"


class AdminPort:
    """A server's admin port as the test plays it: uploads `tar` like a server, records the
    requests; `status` other than 200 refuses, `answer` (fields -> fields) distorts the answer,
    `meanwhile` runs while the request is handled."""

    def __init__(self, ctx: ClusterContext, tar: Path) -> None:
        self.ctx, self.tar = ctx, tar
        self.status = 200
        self.answer: Callable[[dict[str, str]], dict[str, str]] = lambda fields: fields
        self.meanwhile: Callable[[], None] = lambda: None
        self.requests: list[tuple[str, str | None]] = []
        port = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                port.requests.append((self.path, self.headers.get("Authorization")))
                status, body = port.handle(self.path)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def handle(self, path: str) -> tuple[int, object]:
        self.meanwhile()
        if self.status != 200:
            return self.status, {"code": self.status, "error": "refused by the test"}
        segment = urllib.parse.unquote(path.split("?")[0].split("/")[3])
        store = builds.deep_store()
        key = f"{RAW}/{segment}.tmp.{uuid.uuid4()}"
        uri = store.publish(self.tar, key)
        found = read_record(self.ctx.client, self.ctx.paths.segment(TABLE, segment))
        done = uploaded_metadata(
            SegmentZKMetadata.from_znrecord(found.record),
            total_docs=7,
            start_time_ms=1,
            end_time_ms=2,
            crc=CRC,
            size_bytes=self.tar.stat().st_size,
            download_url=uri,
        )
        return 200, self.answer(dict(done.to_znrecord().simple_fields))


@pytest.fixture
def ctx(servers, zk, settings, tmp_path) -> ClusterContext:
    settings.DEEP_STORE_URI = (tmp_path / "deepstore").as_uri()
    settings.CONTROLLER_VIP_URL = VIP
    return ClusterContext(zk, PATHS, settings.REDIS_URL)


@pytest.fixture
def admin_port(ctx, tmp_path) -> Iterator[AdminPort]:
    folder = tmp_path / "built" / "segment"
    folder.mkdir(parents=True)
    (folder / METADATA_FILE).write_text(format_properties({"segment.total.docs": "7"}))
    (folder / CREATION_META).write_bytes(pack_creation_meta(CRC, 1))
    pack_segment(folder, tmp_path / "segment.tar.gz")
    port = AdminPort(ctx, tmp_path / "segment.tar.gz")
    port.thread.start()
    try:
        yield port
    finally:
        port.server.shutdown()
        port.server.server_close()
        port.thread.join()


def _create(ctx, topic: str, *, pauseless: bool) -> TableConfig:
    rest = table_config(topic)
    rest["segmentsConfig"]["peerSegmentDownloadScheme"] = "http"
    rest["ingestionConfig"]["streamIngestionConfig"]["pauselessConsumptionEnabled"] = pauseless
    manager = ResourceManager(ctx)
    manager.add_schema(load("githubEvents_schema.json"))
    return manager.add_table(rest)


def _segment(zk, partition: int) -> tuple[str, list[str]]:
    ideal = read_record(zk, PATHS.idealstate(TABLE)).record.map_fields
    segment = next(
        s for s in sorted(ideal) if LLCSegmentName.parse(s).partition_group_id == partition
    )
    return segment, sorted(ideal[segment])


def _meta(zk, segment: str) -> SegmentZKMetadata:
    return SegmentZKMetadata.from_znrecord(read_record(zk, PATHS.segment(TABLE, segment)).record)


def _committed(
    zk, segment: str, replicas: list[str], port: int, *, status: str = "DONE", crc: int = CRC
) -> None:
    """The segment committed (DONE with URL "", or COMMITTING), ONLINE on `replicas` in both
    views, their admin endpoint at `port`."""
    meta = _meta(zk, segment).mark_committing("2")
    if status == "DONE":
        meta = meta.mark_done(
            end_offset="2",
            start_time_ms=1,
            end_time_ms=2,
            total_docs=7,
            crc=crc,
            data_crc=crc,
            size_in_bytes=10,
            download_url="",
        )
    update_record(zk, PATHS.segment(TABLE, segment), lambda _old: meta.to_znrecord())
    for path in (PATHS.idealstate(TABLE), PATHS.externalview(TABLE)):
        if read_record(zk, path) is None:
            zk.create(path, codec.encode(read_record(zk, PATHS.idealstate(TABLE)).record))

        def online(record):
            out = record.copy()
            out.map_fields[segment] = dict.fromkeys(replicas, "ONLINE")
            return out

        update_record(zk, path, online)

    def point(record):
        out = record.copy()
        out.simple_fields["adminPort"] = str(port)
        return out

    for instance in replicas:
        update_record(zk, PATHS.participant_config(instance), point)


def _guard(zk, ms: int) -> None:
    def change(record):
        out = record.copy()
        out.simple_fields["max.segment.completion.time.millis"] = str(ms)
        return out

    update_record(zk, PATHS.cluster_config, change)


def _repair(ctx, config: TableConfig, now_ms: int | None = None) -> HealingReport:
    if now_ms is not None:
        ctx = ClusterContext(ctx.client, ctx.paths, ctx.redis_url, lambda: now_ms)
    report = HealingReport(TABLE, uuid.uuid4().hex[:8], "test", 0)
    DeepStoreRepairer(ctx, builds.deep_store, choose=lambda servers: servers[0]).repair(
        config, report
    )
    return report


def _mtime(zk, segment: str) -> int:
    return read_record(zk, PATHS.segment(TABLE, segment)).mtime_ms


def test_a_done_segment_without_url_gets_the_servers_copy_and_its_url(ctx, zk, topic, admin_port):
    config = _create(ctx, topic, pauseless=False)
    segment, replicas = _segment(zk, 0)
    _committed(zk, segment, replicas, admin_port.port)
    before = _meta(zk, segment)

    report = _repair(ctx, config)

    (action,) = report.actions
    assert (action.kind, action.segment, action.instances) == (
        "deepStoreUploaded",
        segment,
        (replicas[0],),
    )
    assert report.waiting == [] and report.error is None
    ((path, auth),) = admin_port.requests
    assert path == f"/segments/{TABLE}/{segment}/uploadCommittedSegment?uploadTimeoutMs=60000"
    assert auth == f"Bearer {cluster_token()}"
    after = _meta(zk, segment)
    assert after.download_url == f"{VIP}/segments/{RAW}/{segment}"
    assert after.to_znrecord() == _with_url(before, after.download_url)  # only the URL changed
    store = builds.deep_store()
    with store.open_read(store.segment_key(RAW, segment)) as stream:
        assert stream.read() == admin_port.tar.read_bytes()
    assert store.uploads(RAW) == []
    assert DurableCounter.value_of(SUCCESS, RAW) == 1
    assert DurableCounter.value_of(ERROR, RAW) == 0
    assert _repair(ctx, config).actions == []  # repaired: no longer a candidate


def _with_url(meta: SegmentZKMetadata, url: str):
    record = meta.to_znrecord()
    record.simple_fields["segment.download.url"] = url
    return record


def test_a_differing_crc_is_taken_from_the_servers_copy(ctx, zk, topic, admin_port):
    config = _create(ctx, topic, pauseless=False)
    segment, replicas = _segment(zk, 1)
    _committed(zk, segment, replicas, admin_port.port, crc=999)
    assert [a.kind for a in _repair(ctx, config).actions] == ["deepStoreUploaded"]
    after = _meta(zk, segment)
    assert (after.crc, after.data_crc, after.total_docs) == (CRC, CRC, 7)


def test_a_committing_segment_adopts_the_servers_fields_past_the_guard(ctx, zk, topic, admin_port):
    config = _create(ctx, topic, pauseless=True)
    segment, replicas = _segment(zk, 2)
    _committed(zk, segment, replicas, admin_port.port, status="COMMITTING")
    change_committing(ctx.client, TABLE, PATHS.pauseless_debug(TABLE), segment, True)
    _guard(zk, 60_000)
    mtime = _mtime(zk, segment)

    early = _repair(ctx, config, now_ms=mtime + 60_000)
    assert early.actions == [] and admin_port.requests == []
    (note,) = early.waiting
    assert note.startswith(f"{segment} is COMMITTING without a deep-store copy")
    assert "max.segment.completion.time.millis" in note

    report = _repair(ctx, config, now_ms=mtime + 60_001)
    assert [a.kind for a in report.actions] == ["deepStoreUploaded", "committingSegmentsSynced"]
    after = _meta(zk, segment)
    assert (after.status, after.crc, after.total_docs) == ("DONE", CRC, 7)
    assert (after.start_offset, after.end_offset) == (_meta(zk, segment).start_offset, "2")
    assert after.download_url == f"{VIP}/segments/{RAW}/{segment}"
    found = read_record(zk, PATHS.pauseless_debug(TABLE))
    assert found.record.list_fields[COMMITTING_SEGMENTS] == []


def test_a_done_segment_in_a_pauseless_table_waits_for_the_guard(ctx, zk, topic, admin_port):
    config = _create(ctx, topic, pauseless=True)
    segment, replicas = _segment(zk, 3)
    _committed(zk, segment, replicas, admin_port.port)
    report = _repair(ctx, config)  # the default guard, 5 minutes
    assert report.actions == [] and len(report.waiting) == 1 and admin_port.requests == []
    report = _repair(ctx, config, now_ms=_mtime(zk, segment) + 300_001)
    assert [a.kind for a in report.actions] == ["deepStoreUploaded"]


@pytest.mark.parametrize(
    ("misbehave", "reason"),
    [
        ("refuse", "answered HTTP 500"),
        ("elsewhere", "not an upload of it"),
        ("other offsets", "endOffset"),
        ("nobody online", "no server holds it ONLINE"),
    ],
)
def test_a_failed_upload_is_a_note_and_an_error_count(
    ctx, zk, topic, admin_port, misbehave, reason
):
    config = _create(ctx, topic, pauseless=True)
    segment, replicas = _segment(zk, 0)
    _committed(zk, segment, replicas, admin_port.port, status="COMMITTING")
    if misbehave == "refuse":
        admin_port.status = 500
    elif misbehave == "elsewhere":
        admin_port.answer = lambda f: {**f, "segment.download.url": f"{f['segment.download.url']}x"}
    elif misbehave == "other offsets":
        admin_port.answer = lambda f: {**f, "segment.realtime.endOffset": "3"}
    else:
        update_record(
            zk,
            PATHS.externalview(TABLE),
            lambda r: _with_states(r, segment, dict.fromkeys(replicas, "ERROR")),
        )
        _committed_done = _meta(zk, segment).mark_done(
            end_offset="2",
            start_time_ms=1,
            end_time_ms=2,
            total_docs=7,
            crc=CRC,
            data_crc=CRC,
            size_in_bytes=10,
            download_url="",
        )
        update_record(zk, PATHS.segment(TABLE, segment), lambda _o: _committed_done.to_znrecord())
    before = read_record(zk, PATHS.segment(TABLE, segment))

    report = _repair(ctx, config, now_ms=before.mtime_ms + 300_001)

    assert report.actions == [] and report.error is None
    (note,) = report.waiting
    assert "deep-store upload failed" in note and reason in note, note
    assert read_record(zk, PATHS.segment(TABLE, segment)).version == before.version
    store = builds.deep_store()
    # An upload of the segment the repair did not move is deleted; what a server put elsewhere
    # is never touched (an orphan the upload sweeper removes once old).
    assert len(store.uploads(RAW)) == (1 if misbehave == "elsewhere" else 0)
    assert not store.exists(store.segment_key(RAW, segment))
    assert (DurableCounter.value_of(ERROR, RAW), DurableCounter.value_of(SUCCESS, RAW)) == (1, 0)


def _with_states(record, segment: str, states: dict[str, str]):
    out = record.copy()
    out.map_fields[segment] = states
    return out


def test_a_segment_repaired_meanwhile_is_left_alone(ctx, zk, topic, admin_port):
    config = _create(ctx, topic, pauseless=False)
    segment, replicas = _segment(zk, 1)
    _committed(zk, segment, replicas, admin_port.port)

    def someone_else_repairs() -> None:
        update_record(
            zk,
            PATHS.segment(TABLE, segment),
            lambda r: _with_url(SegmentZKMetadata.from_znrecord(r), "http://elsewhere/s"),
        )

    admin_port.meanwhile = someone_else_repairs
    report = _repair(ctx, config)
    assert report.actions == []
    assert report.waiting == [f"{segment}: repaired meanwhile; the upload is dropped"]
    assert _meta(zk, segment).download_url == "http://elsewhere/s"
    store = builds.deep_store()
    assert store.uploads(RAW) == [] and not store.exists(store.segment_key(RAW, segment))
    assert (DurableCounter.value_of(ERROR, RAW), DurableCounter.value_of(SUCCESS, RAW)) == (0, 0)


def test_the_healing_manager_runs_the_repair(ctx, zk, topic, admin_port):
    _create(ctx, topic, pauseless=False)
    segment, replicas = _segment(zk, 2)
    _committed(zk, segment, replicas, admin_port.port)
    healer = RealtimeSegmentValidationManager(ctx, deep_store=builds.deep_store)
    report = healer.run_table(TABLE, run_id="r1", trigger="test")
    assert report.error is None
    assert [a.segment for a in report.actions if a.kind == "deepStoreUploaded"] == [segment]
    assert _meta(zk, segment).download_url == f"{VIP}/segments/{RAW}/{segment}"


def test_stale_committing_entries_are_dropped(ctx, zk, topic, admin_port):
    config = _create(ctx, topic, pauseless=True)
    done, _ = _segment(zk, 0)
    consuming, _ = _segment(zk, 1)
    path = PATHS.pauseless_debug(TABLE)
    gone = "githubEvents__3__9__20240501T1030Z"
    for segment in (done, consuming, gone):
        change_committing(ctx.client, TABLE, path, segment, True)
    meta = _meta(zk, done).mark_committing("2")
    meta = meta.mark_done(
        end_offset="2",
        start_time_ms=1,
        end_time_ms=2,
        total_docs=1,
        crc=1,
        data_crc=1,
        size_in_bytes=1,
        download_url="http://c/s",
    )
    update_record(zk, PATHS.segment(TABLE, done), lambda _o: meta.to_znrecord())
    report = _repair(ctx, config)
    (action,) = report.actions
    assert action.kind == "committingSegmentsSynced"
    assert done in action.detail and gone in action.detail
    assert read_record(zk, path).record.list_fields[COMMITTING_SEGMENTS] == [consuming]


# --- commit end: peer:// and blank locations ---------------------------------------------------
@pytest.fixture
def leading(settings, monkeypatch, servers, zk, topic, tmp_path):
    """A blocking table (replication 1) whose completion this process leads."""
    monkeypatch.setattr(completion_trust, "FLUSH_EVERY_S", 0)
    settings.CONTROLLER_INSTANCE_ID = "Controller_127.0.0.1_9000"
    settings.CONTROLLER_VIP_URL = VIP
    settings.DEEP_STORE_URI = (tmp_path / "deepstore").as_uri()
    completion._manager.cache_clear()
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    config = table_config(topic)
    config["segmentsConfig"]["replication"] = "1"
    manager.add_table(config)
    lead_every_partition(zk, "Controller_127.0.0.1_9000")
    yield zk
    completion._manager.cache_clear()


def _commit_with(zk, partition: int, location: str) -> tuple[str, dict]:
    segment, (replica,) = _segment(zk, partition)
    end = partition + 2  # the `topic` fixture's rows: offsets 1..partition+1
    client = Client(HTTP_AUTHORIZATION=f"Bearer {cluster_token()}")
    params = {"instance": replica, "name": segment, "streamPartitionMsgOffset": end}
    assert client.get("/segmentConsumed", {**params, "reason": "rowLimit"}).json()["status"] == (
        "COMMIT"
    )
    assert client.get("/segmentCommitStart", params).json()["status"] == "COMMIT_CONTINUE"
    files = {
        "metadata.properties": SimpleUploadedFile(
            "metadata.properties", format_properties({"segment.total.docs": "1"}).encode()
        ),
        "creation.meta": SimpleUploadedFile("creation.meta", pack_creation_meta(CRC, 1)),
    }
    query = urllib.parse.urlencode({**params, "location": location})
    return segment, client.post(f"/segmentCommitEndWithMetadata?{query}", files).json()


@pytest.mark.django_db(transaction=True)
def test_a_blank_location_counts_a_missing_deep_store_link_and_peer_does_not(leading):
    zk = leading
    segment, answer = _commit_with(zk, 0, f"peer:///{_segment(zk, 0)[0]}")
    assert answer["status"] == "COMMIT_SUCCESS"
    assert (_meta(zk, segment).status, _meta(zk, segment).download_url) == ("DONE", "")
    assert DurableCounter.value_of("segmentMissingDeepStoreLink", RAW) == 0

    segment, answer = _commit_with(zk, 1, " ")
    assert answer["status"] == "COMMIT_SUCCESS"
    assert (_meta(zk, segment).status, _meta(zk, segment).download_url) == ("DONE", "")
    assert DurableCounter.value_of("segmentMissingDeepStoreLink", RAW) == 1
