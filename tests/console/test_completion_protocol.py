"""The completion endpoints at Pinot's paths, driving the FSM and the commit steps on real
ZooKeeper: a round of the protocol as two replicas and the lead controller play it."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from console.api import completion
from tables.controller import builds, context
from tables.controller.resources import ResourceManager
from tables.domain.leadership import LEAD_CONTROLLER_RESOURCE, partition_name
from tables.domain.segment_metadata import SegmentZKMetadata
from tables.domain.table_config import switch_stream_type
from tables.domain.znrecord import ZNRecord
from tables.segments.segment_format import format_properties, pack_creation_meta
from tables.zk.records import create_record, read_record, update_record
from tests.cluster_fixtures import PATHS, load

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]
TABLE = "githubEvents_REALTIME"
ME = "Controller_127.0.0.1_9000"


@pytest.fixture(autouse=True)
def fresh_manager(settings):
    """FSMs live in the process: each test starts with none."""
    settings.CONTROLLER_INSTANCE_ID = ME
    settings.CONTROLLER_VIP_URL = "http://controller:9000"
    completion._manager.cache_clear()
    yield
    completion._manager.cache_clear()


def _lead(zk, instance: str) -> None:
    """The leadControllerResource EXTERNALVIEW with `instance` MASTER of every partition."""
    view = ZNRecord(
        id=LEAD_CONTROLLER_RESOURCE,
        map_fields={partition_name(i): {instance: "MASTER"} for i in range(24)},
    )
    path = PATHS.externalview(LEAD_CONTROLLER_RESOURCE)
    if zk.exists(path):
        update_record(zk, path, lambda _: view)
    else:
        create_record(zk, path, view)


@pytest.fixture
def table(servers, topic, zk):
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    rest = switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic)
    rest["segmentsConfig"]["replication"] = "2"
    manager.add_table(rest)
    _lead(zk, ME)
    return zk


def _segment(zk, partition: int) -> tuple[str, list[str], int]:
    ideal = read_record(zk, PATHS.idealstate(TABLE)).record
    segment = next(
        s for s in sorted(ideal.map_fields) if s.startswith(f"githubEvents__{partition}__")
    )
    meta = SegmentZKMetadata.from_znrecord(read_record(zk, PATHS.segment(TABLE, segment)).record)
    return segment, sorted(ideal.map_fields[segment]), int(meta.start_offset)


def _consumed(client: Client, instance: str, segment: str, offset: int, reason: str = "rowLimit"):
    return client.get(
        "/segmentConsumed",
        {
            "instance": instance,
            "name": segment,
            "streamPartitionMsgOffset": offset,
            "reason": reason,
        },
    ).json()


def test_a_round_of_the_protocol_commits_the_segment(table):
    zk, client = table, Client()
    segment, (a, b), start = _segment(zk, 0)
    end = start + 100

    commit = _consumed(client, a, segment, end)
    assert commit == {
        "status": "COMMIT",
        "streamPartitionMsgOffset": str(end),
        "buildTimeSec": 126,
        "isSplitCommitType": True,
        "controllerVipUrl": "http://controller:9000",
    }
    catch_up = _consumed(client, b, segment, end - 10)
    assert (catch_up["status"], catch_up["streamPartitionMsgOffset"]) == ("CATCH_UP", str(end))

    params = {"instance": a, "name": segment, "streamPartitionMsgOffset": end}
    assert client.get("/segmentCommitStart", params).json()["status"] == "COMMIT_CONTINUE"

    # The committer's upload, at a temporary key of the deep store.
    store = builds.deep_store()
    upload = tmp_upload(store, segment)
    files = {
        "metadata.properties": properties_file(
            {
                "segment.total.docs": "100",
                "segment.start.time": "1626847200000",
                "segment.end.time": "1626850800000",
            }
        ),
        "creation.meta": creation_meta_file(pack_creation_meta(777, 1626847200000)),
    }
    query = "&".join(
        f"{k}={v}"
        for k, v in {**params, "location": store.uri_for(upload), "segmentSizeBytes": 4}.items()
    )
    done = client.post(f"/segmentCommitEndWithMetadata?{query}", files).json()
    assert done["status"] == "COMMIT_SUCCESS", done

    meta = SegmentZKMetadata.from_znrecord(read_record(zk, PATHS.segment(TABLE, segment)).record)
    assert (meta.status, meta.end_offset, meta.total_docs, meta.crc) == ("DONE", str(end), 100, 777)
    assert meta.download_url == f"http://controller:9000/segments/githubEvents/{segment}"
    assert store.exists(store.segment_key("githubEvents", segment))
    assert not store.exists(upload)
    ideal = read_record(zk, PATHS.idealstate(TABLE)).record
    assert set(ideal.map_fields[segment].values()) == {"ONLINE"}
    assert any(s.startswith("githubEvents__0__1__") for s in ideal.map_fields)

    # The FSM is gone; a new one starts COMMITTED from ZooKeeper:
    # KEEP at the end offset, else DISCARD.
    assert _consumed(client, b, segment, end)["status"] == "KEEP"
    assert _consumed(client, b, segment, end - 5)["status"] == "DISCARD"


def test_a_controller_that_does_not_lead_the_table_says_not_leader(table):
    segment, (a, _), start = _segment(table, 1)
    _lead(table, "Controller_elsewhere_9000")
    assert _consumed(Client(), a, segment, start + 1)["status"] == "NOT_LEADER"


def test_a_process_that_is_not_a_controller_never_runs_fsms(table, settings):
    segment, (a, _), start = _segment(table, 1)
    settings.CONTROLLER_INSTANCE_ID = ""  # a web worker: not a controller
    completion._manager.cache_clear()
    assert _consumed(Client(), a, segment, start + 1)["status"] == "NOT_LEADER"


def test_missing_or_malformed_parameters_fail(table):
    segment, (a, _), _ = _segment(table, 2)
    failed = {
        "status": "FAILED",
        "streamPartitionMsgOffset": None,
        "buildTimeSec": -1,
        "isSplitCommitType": True,
    }
    client = Client()
    assert client.get("/segmentConsumed", {"instance": a, "name": segment}).json() == failed
    bad = {"instance": a, "name": segment, "streamPartitionMsgOffset": "abc"}
    assert client.get("/segmentCommitStart", bad).json() == failed
    unknown = {
        "instance": a,
        "name": "githubEvents__9__0__20210101T0000Z",
        "streamPartitionMsgOffset": 1,
    }
    assert client.get("/segmentConsumed", unknown).json() == failed


def test_a_replica_that_stops_consuming_is_taken_offline(table):
    segment, (a, b), start = _segment(table, 3)
    params = {"instance": a, "name": segment, "streamPartitionMsgOffset": start, "reason": "x"}
    assert Client().get("/segmentStoppedConsuming", params).json()["status"] == "PROCESSED"
    replicas = read_record(table, PATHS.idealstate(TABLE)).record.map_fields[segment]
    assert replicas == {a: "OFFLINE", b: "CONSUMING"}


def tmp_upload(store, segment: str) -> str:
    key = f"githubEvents/{segment}.tmp.{uuid.uuid4().hex}"
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "upload.tar.gz"
        local.write_bytes(b"tar!")
        store.publish(local, key)
    return key


def properties_file(values: dict[str, str]):
    return SimpleUploadedFile("metadata.properties", format_properties(values).encode())


def creation_meta_file(data: bytes):
    return SimpleUploadedFile("creation.meta", data)
