"""`POST /segments/reingested?tableName=<raw>` (round 2 §C.3) on real ZooKeeper and the test deep
store: the cluster token (401), Pinot's header checks (400 each), no ZK metadata (404), a segment
not COMMITTING (409), and a completion: the rebuilt tar moved from its upload key to the final key,
COMMITTING -> DONE with the tar's CRC, times, docs, size and download URL (end offset kept), the
segment out of `committingSegments`, and every replica reset (ERROR -> OFFLINE messages); each
request counts in the `reingestedSegmentUploadsInProgress` gauge while it runs."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from console.api import completion
from console.api import reingested as reingested_view
from monitoring.in_progress import count_in_progress, key_for
from tables import build_backoffs, builds
from tables.cluster import context
from tables.controller import completion_trust
from tables.controller.resources import ResourceManager
from tables.domain.segment_metadata import SegmentStatus, SegmentZKMetadata
from tables.domain.table_config import switch_stream_type
from tables.domain.znrecord import ZNRecord
from tables.redisconn import get_redis
from tables.security import cluster_token
from tables.segments.segment_format import format_properties, pack_creation_meta
from tables.zk import messages
from tables.zk.records import create_record, read_record, update_record
from tests.cluster_fixtures import PATHS, load
from tests.tables.leaders import lead_every_partition

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]
TABLE = "githubEvents_REALTIME"
ME = "Controller_127.0.0.1_9000"
VIP = "http://controller:9000"
CRC = 2_718_281_828
TAR = b"a rebuilt segment tar"


@pytest.fixture(autouse=True)
def controller_settings(settings, monkeypatch):
    # Refusals (the 401s) are counted at once in the test's own transaction: a flushing thread
    # would add them to a later test's counts.
    monkeypatch.setattr(completion_trust, "FLUSH_EVERY_S", 0)
    settings.CONTROLLER_INSTANCE_ID = ME
    settings.CONTROLLER_VIP_URL = VIP
    completion._manager.cache_clear()
    yield
    completion._manager.cache_clear()


@pytest.fixture
def committing(servers, topic, zk) -> tuple[str, list[str]]:
    """githubEvents (replication 2); partition 0's segment COMMITTING at [start, start + 100),
    in committingSegments, both replicas ERROR in the ExternalView. (segment, replicas)"""
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    rest = switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic)
    rest["segmentsConfig"]["replication"] = "2"
    manager.add_table(rest)
    lead_every_partition(zk, ME)
    ideal = read_record(zk, PATHS.idealstate(TABLE)).record
    segment = next(s for s in sorted(ideal.map_fields) if s.startswith("githubEvents__0__"))
    replicas = sorted(ideal.map_fields[segment])
    path = PATHS.segment(TABLE, segment)
    meta = SegmentZKMetadata.from_znrecord(read_record(zk, path).record)
    end = str(int(meta.start_offset) + 100)
    update_record(zk, path, lambda _r: meta.mark_committing(end).to_znrecord())
    create_record(
        zk,
        PATHS.pauseless_debug(TABLE),
        ZNRecord(id=TABLE, list_fields={"committingSegments": [segment, "other"]}),
    )
    view = ZNRecord(id=TABLE, map_fields={segment: dict.fromkeys(replicas, "ERROR")})
    create_record(zk, PATHS.externalview(TABLE), view)
    return segment, replicas


def _upload(segment: str) -> str:
    """The server's rebuilt tar at an upload key; its key."""
    key = f"githubEvents/{segment}.tmp.{uuid.uuid4().hex}"
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "segment.tar.gz"
        local.write_bytes(TAR)
        builds.deep_store().publish(local, key)
    return key


def _post(
    segment: str,
    token: str | None = "cluster",
    upload_type: str | None = "METADATA",
    download_uri: str | None = "",
    copy: str | None = "true",
):
    headers = {}
    if token:
        headers["Authorization"] = f"Bearer {cluster_token() if token == 'cluster' else token}"
    for name, value in (
        ("UPLOAD_TYPE", upload_type),
        ("DOWNLOAD_URI", download_uri),
        ("COPY_SEGMENT_TO_DEEP_STORE", copy),
    ):
        if value is not None:
            headers[name] = value
    properties = {
        "segment.name": segment,
        "segment.total.docs": "100",
        "segment.start.time": "1626847200000",
        "segment.end.time": "1626850800000",
    }
    files = {
        "metadata.properties": SimpleUploadedFile(
            "metadata.properties", format_properties(properties).encode()
        ),
        "creation.meta": SimpleUploadedFile("creation.meta", pack_creation_meta(CRC, 1)),
    }
    return Client().post("/segments/reingested?tableName=githubEvents", files, headers=headers)


def _meta(zk, segment: str) -> SegmentZKMetadata:
    return SegmentZKMetadata.from_znrecord(read_record(zk, PATHS.segment(TABLE, segment)).record)


def _resets(zk, instance: str) -> list[tuple[str, str, str]]:
    out = []
    for msg_id in messages.message_ids(zk, PATHS, instance):
        record = messages.read_message(zk, PATHS, instance, msg_id)
        request = messages.parse_state_transition(record)
        if request is not None:
            out.append((request.segment, request.from_state, request.to_state))
    return out


@pytest.mark.parametrize("token", [None, "not-the-token"])
def test_without_the_cluster_token_it_is_401(zk, committing, token):
    segment, _ = committing
    resp = _post(segment, token=token, download_uri=_upload(segment))
    assert resp.status_code == 401
    assert _meta(zk, segment).status is SegmentStatus.COMMITTING


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({"upload_type": None}, "Reingestion upload type must be METADATA"),
        ({"upload_type": "SEGMENT"}, "Reingestion upload type must be METADATA"),
        ({"download_uri": ""}, "DOWNLOAD_URI is required"),
        ({"download_uri": None}, "DOWNLOAD_URI is required"),
        ({"copy": "false"}, "COPY_SEGMENT_TO_DEEP_STORE must be true"),
        ({"copy": None}, "COPY_SEGMENT_TO_DEEP_STORE must be true"),
    ],
)
def test_pinots_header_checks_are_400(zk, committing, headers, message):
    segment, _ = committing
    upload = _upload(segment)
    resp = _post(segment, **{"download_uri": upload, **headers})
    assert resp.status_code == 400
    assert resp.json()["code"] == 400 and resp.json()["error"].startswith(message)
    assert _meta(zk, segment).status is SegmentStatus.COMMITTING
    assert builds.deep_store().exists(upload)


def test_an_upload_not_in_the_deep_store_is_400(zk, committing):
    segment, _ = committing
    resp = _post(segment, download_uri=f"githubEvents/{segment}.tmp.{uuid.uuid4().hex}")
    assert resp.status_code == 400
    assert _meta(zk, segment).status is SegmentStatus.COMMITTING


def test_a_segment_without_zk_metadata_is_404(zk, committing):
    segment = "githubEvents__0__99__20240501T1030Z"
    resp = _post(segment, download_uri=_upload(segment))
    assert resp.status_code == 404
    assert resp.json()["error"] == f"Segment ZK metadata not found for segment: {segment}"


def test_a_segment_not_committing_is_409(zk, committing):
    ideal = read_record(zk, PATHS.idealstate(TABLE)).record
    segment = next(s for s in sorted(ideal.map_fields) if s.startswith("githubEvents__1__"))
    upload = _upload(segment)
    resp = _post(segment, download_uri=upload)
    assert resp.status_code == 409
    assert "must be in COMMITTING status" in resp.json()["error"]
    assert _meta(zk, segment).status is SegmentStatus.IN_PROGRESS
    assert builds.deep_store().exists(upload)


def test_a_reingested_segment_is_done_and_its_replicas_reset(zk, committing):
    segment, replicas = committing
    before = _meta(zk, segment)
    store = builds.deep_store()
    upload = _upload(segment)

    for server in replicas:  # both builds failed deterministically: a back-off record
        build_backoffs.record_failure(
            TABLE, segment, fingerprint="f", error="ValueError: x", server=server, now_ms=0
        )
    build_backoffs.record_failure(
        TABLE,
        "githubEvents__1__0__20240501T1030Z",
        fingerprint="f",
        error="E",
        server="s",
        now_ms=0,
    )

    resp = _post(segment, download_uri=store.uri_for(upload))
    assert resp.status_code == 200, resp.content
    assert resp.json()["status"] == (
        f"Successfully uploaded reingested segment: {segment} of table: {TABLE}"
    )
    final = store.segment_key("githubEvents", segment)
    assert not store.exists(upload)
    with store.open_read(final) as stream:
        assert stream.read() == TAR

    done = _meta(zk, segment)
    assert done.status is SegmentStatus.DONE
    assert (done.crc, done.data_crc, done.total_docs) == (CRC, CRC, 100)
    assert (done.start_time, done.end_time) == (1626847200000, 1626850800000)
    assert done.size_in_bytes == len(TAR)
    assert done.download_url == f"{VIP}/segments/githubEvents/{segment}"
    assert done.end_offset == before.end_offset
    debug = read_record(zk, PATHS.pauseless_debug(TABLE)).record
    assert debug.list_fields["committingSegments"] == ["other"]
    for instance in replicas:
        assert _resets(zk, instance) == [(segment, "ERROR", "OFFLINE")]
    # The re-ingested build is the segment's successful one: its back-off record goes, and
    # only its.
    assert [(r.table, r.segment) for r in build_backoffs.rows()] == [
        (TABLE, "githubEvents__1__0__20240501T1030Z")
    ]

    again = _post(segment, download_uri=_upload(segment))
    assert again.status_code == 409  # DONE now


def test_each_request_counts_in_the_uploads_in_progress_gauge_while_it_runs(
    zk, committing, settings, monkeypatch
):
    """Pinot's `reingestedSegmentUploadsInProgress`: 1 while a completion runs (read from Redis,
    as every controller's /metrics reads it), 0 once it answered, whatever the answer."""
    segment, _ = committing
    redis = get_redis(settings.REDIS_URL)
    redis.delete(key_for(settings.CLUSTER_NAME))  # this slot's Redis: nobody else's leases
    seen: list[int] = []
    complete = reingested_view.complete_reingested_segment

    def counting(*args, **kwargs):
        seen.append(count_in_progress(redis, settings.CLUSTER_NAME))
        return complete(*args, **kwargs)

    monkeypatch.setattr(reingested_view, "complete_reingested_segment", counting)

    assert _post(segment, download_uri=_upload(segment)).status_code == 200
    assert _post(segment, download_uri=_upload(segment)).status_code == 409
    assert seen == [1, 1]
    assert count_in_progress(redis, settings.CLUSTER_NAME) == 0
