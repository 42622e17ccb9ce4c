"""The completion endpoints at Pinot's paths, driving the FSM and the commit steps on real
ZooKeeper: a round of the protocol as two replicas and the lead controller play it; and the calls
the controller refuses (no or a bad cluster token, an instance that is not live or holds no replica,
an offset past the stream's end), which change neither the FSMs nor ZooKeeper."""

from __future__ import annotations

import logging
import tempfile
import uuid
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from console.api import completion
from monitoring.controller_metrics import DEFINITIONS, REFUSED_COUNTER
from tables import builds
from tables.cluster import context
from tables.controller import completion as completion_manager
from tables.controller import completion_trust
from tables.controller.resources import ResourceManager
from tables.domain.completion_trust import Cause, refusal_counter_name
from tables.domain.idealstate import with_paused_partitions
from tables.domain.leadership import LEAD_CONTROLLER_RESOURCE, partition_name
from tables.domain.segment_metadata import SegmentZKMetadata
from tables.domain.table_config import switch_stream_type
from tables.domain.znrecord import ZNRecord
from tables.models import DurableCounter
from tables.redisconn import get_redis
from tables.security import cluster_token
from tables.segments.segment_format import format_properties, pack_creation_meta
from tables.streams.redis_streams import RedisTopicAdmin
from tables.zk.records import create_record, read_record, update_record
from tables.zk.zookeeper import raw
from tests.cluster_fixtures import PATHS, SERVERS, load
from tests.poll import wait_until
from tests.tables.leaders import lead_every_partition

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]
TABLE = "githubEvents_REALTIME"
ME = "Controller_127.0.0.1_9000"
ROWS = 200  # produced to every partition, so the offsets the tests report exist in the stream


@pytest.fixture(autouse=True)
def fresh_manager(settings, monkeypatch):
    """FSMs live in the process: each test starts with none. Refusals are counted at once, in
    the test's own database transaction (no flushing thread)."""
    monkeypatch.setattr(completion_trust, "FLUSH_EVERY_S", 0)
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
def table(servers, topic, zk, settings):
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    rest = switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic)
    rest["segmentsConfig"]["replication"] = "2"
    manager.add_table(rest)
    lead_every_partition(zk, ME)  # ME live (its LIVEINSTANCE) and MASTER of every partition
    _produce(settings, topic, ROWS)
    return zk


def _produce(settings, topic: str, rows: int) -> None:
    admin = RedisTopicAdmin(get_redis(settings.REDIS_URL))
    admin.produce_many(topic, {p: [b'{"id": "2"}'] * rows for p in range(4)}, now_ms=0)


def server_client() -> Client:
    """A test client that calls as the cluster's servers do: with the cluster token."""
    return Client(HTTP_AUTHORIZATION=f"Bearer {cluster_token()}")


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
    zk, client = table, server_client()
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


def test_calls_after_the_first_read_liveness_and_replicas_from_memory(table, monkeypatch):
    """Each call runs in a new ClusterContext (a new store around the process's kazoo client);
    the caller check's watched reads still serve the second replica's call without a round trip
    for LIVEINSTANCES or the IdealState, and leave no further watcher on them. (The manager is
    installed as run_controller does, leadership answered from memory, as its LeadFollower
    answers it.)"""
    manager = completion_manager.CompletionManager(
        context.current, ME, "http://controller:9000", builds.deep_store, leads=lambda _: True
    )
    monkeypatch.setattr(completion_manager, "_installed", manager)
    client = server_client()
    segment, (a, b), start = _segment(table, 1)
    assert _consumed(client, a, segment, start + 50)["status"] == "COMMIT"
    controller = raw(context.current().client)  # the process's own session, as the views use
    # kazoo keys requests and watchers by the full path, its chroot included
    watched = tuple(controller.chroot + p for p in (PATHS.liveinstances, PATHS.idealstate(TABLE)))

    def watchers() -> dict[str, int]:
        return {
            p: len(controller._child_watchers[p]) + len(controller._data_watchers[p])
            for p in watched
        }

    before, paths = watchers(), []
    original = controller._call  # every kazoo request goes through it

    def counting(request, async_object):
        paths.append(getattr(request, "path", None))
        return original(request, async_object)

    controller._call = counting
    try:
        assert _consumed(client, b, segment, start + 50)["status"] == "HOLD"  # a is committing
    finally:
        controller._call = original
    assert not set(paths) & set(watched), paths  # (before the fix: both, twice each)
    assert watchers() == before


def test_the_caller_check_remembers_which_partitions_the_idealstate_pauses(table):
    """The pause hint the commit steps use (no read of its own): what the last IdealState the
    caller check parsed says, partition by partition."""
    client = server_client()
    check = completion.manager().caller_check
    ctx = context.current()
    assert not check.looks_paused(ctx, TABLE, 2)  # nothing parsed yet: no hint
    update_record(table, PATHS.idealstate(TABLE), lambda r: with_paused_partitions(r, {2}))
    segment, (a, _), start = _segment(table, 2)
    wait_until(
        lambda: (
            _consumed(client, a, segment, start + 5)["status"] != "FAILED"
            and check.looks_paused(ctx, TABLE, 2)
        ),
        10,
        what="the paused IdealState parsed by the caller check",
    )
    assert not check.looks_paused(ctx, TABLE, 1)


def test_a_controller_that_does_not_lead_the_table_says_not_leader(table):
    segment, (a, _), start = _segment(table, 1)
    _lead(table, "Controller_elsewhere_9000")
    assert _consumed(server_client(), a, segment, start + 1)["status"] == "NOT_LEADER"


def test_a_process_that_is_not_a_controller_never_runs_fsms(table, settings):
    segment, (a, _), start = _segment(table, 1)
    settings.CONTROLLER_INSTANCE_ID = ""  # a web worker: not a controller
    completion._manager.cache_clear()
    assert _consumed(server_client(), a, segment, start + 1)["status"] == "NOT_LEADER"


def test_missing_or_malformed_parameters_fail(table):
    segment, (a, _), _ = _segment(table, 2)
    failed = {
        "status": "FAILED",
        "streamPartitionMsgOffset": None,
        "buildTimeSec": -1,
        "isSplitCommitType": True,
    }
    client = server_client()
    assert client.get("/segmentConsumed", {"instance": a, "name": segment}).json() == failed
    bad = {"instance": a, "name": segment, "streamPartitionMsgOffset": "abc"}
    assert client.get("/segmentCommitStart", bad).json() == failed
    malformed = {"instance": a, "name": "not-a-segment", "streamPartitionMsgOffset": 1}
    assert client.get("/segmentConsumed", malformed).json() == failed
    # A segment the IdealState does not list: nobody holds a replica of it.
    unknown = {
        "instance": a,
        "name": "githubEvents__9__0__20210101T0000Z",
        "streamPartitionMsgOffset": 1,
    }
    answer = client.get("/segmentConsumed", unknown)
    assert answer.status_code == 403
    assert answer.json() == {**failed, "reason": answer.json()["reason"]}
    assert "holds no replica" in answer.json()["reason"]


def test_a_replica_that_stops_consuming_is_taken_offline(table):
    segment, (a, b), start = _segment(table, 3)
    params = {"instance": a, "name": segment, "streamPartitionMsgOffset": start, "reason": "x"}
    assert server_client().get("/segmentStoppedConsuming", params).json()["status"] == "PROCESSED"
    replicas = read_record(table, PATHS.idealstate(TABLE)).record.map_fields[segment]
    assert replicas == {a: "OFFLINE", b: "CONSUMING"}


# --- refused calls -------------------------------------------------------------------------------

ENDPOINTS = [
    ("get", "/segmentConsumed", {"reason": "rowLimit", "rowCount": 10}),
    ("get", "/segmentStoppedConsuming", {"reason": "forged"}),
    ("get", "/segmentCommitStart", {"rowCount": 10}),
    ("get", "/extendBuildTime", {"extraTimeSec": 600}),
    ("post", "/segmentCommitEndWithMetadata", {"location": "file:///tmp/forged.tar.gz"}),
]


def _call_all(client: Client, instance: str, segment: str, offset: int) -> list:
    """Every completion endpoint once, as `instance` reporting `offset`; the answers."""
    answers = []
    for method, path, extra in ENDPOINTS:
        params = {"instance": instance, "name": segment, "streamPartitionMsgOffset": offset}
        params |= extra
        if method == "get":
            answers.append(client.get(path, params))
        else:
            query = "&".join(f"{k}={v}" for k, v in params.items())
            files = {
                "metadata.properties": properties_file({"segment.total.docs": "1"}),
                "creation.meta": creation_meta_file(pack_creation_meta(1, 1)),
            }
            answers.append(client.post(f"{path}?{query}", files))
    return answers


def _snapshot(zk, segment: str) -> tuple:
    """What a call could change: the IdealState, the segment's and the table's segment znodes
    (versions included), and the controller's FSMs."""
    ideal = read_record(zk, PATHS.idealstate(TABLE))
    meta = read_record(zk, PATHS.segment(TABLE, segment))
    return (
        ideal.version,
        ideal.record,
        meta.version,
        meta.record,
        sorted(zk.get_children(PATHS.segments(TABLE))),
        sorted(completion.manager()._fsms),
    )


def _latest(settings, topic: str, partition: int) -> int:
    return RedisTopicAdmin(get_redis(settings.REDIS_URL)).provider(topic).latest_offset(partition)


def _assert_refused(answers: list, http_status: int, cause: Cause) -> None:
    for answer in answers:
        assert answer.status_code == http_status, (answer.request["PATH_INFO"], answer.content)
        body = answer.json()
        assert (body["status"], body["streamPartitionMsgOffset"], body["buildTimeSec"]) == (
            "FAILED",
            None,
            -1,
        )
        assert body["reason"]
    assert DurableCounter.value_of(refusal_counter_name(cause)) == len(answers)


def _real_replica_still_commits(segment: str, replica: str, offset: int) -> None:
    """The forged calls left no trace: the real replica's own report wins."""
    answer = _consumed(server_client(), replica, segment, offset)
    assert (answer["status"], answer["streamPartitionMsgOffset"]) == ("COMMIT", str(offset))


def test_calls_without_a_token_are_refused_with_401(table, settings, topic):
    segment, (a, _), start = _segment(table, 0)
    before = _snapshot(table, segment)
    answers = _call_all(Client(), a, segment, start + 5)
    _assert_refused(answers, 401, Cause.NO_TOKEN)
    assert all(answer["WWW-Authenticate"] == "Bearer" for answer in answers)
    assert _snapshot(table, segment) == before
    _real_replica_still_commits(segment, a, start + 5)


def test_calls_with_a_wrong_token_are_refused_with_401(table, settings, topic):
    segment, (a, _), start = _segment(table, 0)
    before = _snapshot(table, segment)
    wrong = _call_all(Client(HTTP_AUTHORIZATION="Bearer not-the-token"), a, segment, start + 5)
    basic = _call_all(Client(HTTP_AUTHORIZATION="Basic dXNlcjpwdw=="), a, segment, start + 5)
    _assert_refused(wrong + basic, 401, Cause.BAD_TOKEN)
    assert _snapshot(table, segment) == before
    _real_replica_still_commits(segment, a, start + 5)


def test_an_instance_that_is_not_live_is_refused_with_403_and_logged_once(table, caplog):
    segment, (a, _), start = _segment(table, 1)
    latest = start + ROWS  # within the stream: only the instance is wrong
    before = _snapshot(table, segment)
    with caplog.at_level(logging.WARNING, logger="tables.controller.completion_trust"):
        answers = _call_all(server_client(), "Server_forged_6666", segment, latest)
    _assert_refused(answers, 403, Cause.NOT_LIVE)
    assert _snapshot(table, segment) == before
    logged = [r for r in caplog.records if "refused a completion call" in r.getMessage()]
    assert len(logged) == 1, [r.getMessage() for r in logged]
    assert "instanceNotLive" in logged[0].getMessage()
    _real_replica_still_commits(segment, a, start + 5)


def test_a_live_instance_without_a_replica_is_refused_with_403(table):
    segment, replicas, start = _segment(table, 2)
    (outsider,) = set(SERVERS) - set(replicas)
    assert table.exists(PATHS.liveinstance(outsider))
    before = _snapshot(table, segment)
    _assert_refused(
        _call_all(server_client(), outsider, segment, start + 5), 403, Cause.NOT_REPLICA
    )
    assert _snapshot(table, segment) == before
    _real_replica_still_commits(segment, replicas[0], start + 5)


def test_an_offset_past_the_streams_end_is_refused_with_400(table, settings, topic):
    segment, (a, b), _ = _segment(table, 3)
    latest = _latest(settings, topic, 3)
    before = _snapshot(table, segment)
    _assert_refused(_call_all(server_client(), a, segment, latest + 1), 400, Cause.OFFSET_PAST_END)
    assert _snapshot(table, segment) == before

    # The latest offset is cached; an offset above it is checked against the stream again.
    _real_replica_still_commits(segment, a, latest)
    _produce(settings, topic, 50)
    assert _consumed(server_client(), b, segment, latest + 50)["status"] == "HOLD"
    past = server_client().get(
        "/segmentConsumed",
        {"instance": b, "name": segment, "streamPartitionMsgOffset": latest + 51},
    )
    assert past.status_code == 400


def test_refusals_are_exposed_per_cause_on_metrics(table):
    segment, replicas, start = _segment(table, 2)
    (outsider,) = set(SERVERS) - set(replicas)
    _consumed(Client(), replicas[0], segment, start + 1)
    _consumed(server_client(), outsider, segment, start + 1)
    _consumed(server_client(), outsider, segment, start + 1)
    text = Client().get("/metrics").content.decode()
    name = DEFINITIONS[REFUSED_COUNTER].name
    found = {
        line.split("{")[1].split("}")[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(f"{name}{{")
    }
    assert found == {f'cause="{cause}"': 0.0 for cause in Cause} | {
        'cause="noToken"': 1.0,
        'cause="notReplica"': 2.0,
    }


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


def test_a_first_report_at_the_streams_end_wins_at_once(table, settings, topic):
    """No replica can be past the partition's latest offset: the first one there (a pause, a
    force commit of an idle table) is told COMMIT at once instead of HOLD, and the other one is
    told it is not the committer (`committerChosen`: it need not ask again soon)."""
    zk, client = table, server_client()
    segment, (a, b), _ = _segment(zk, 1)
    latest = _latest(settings, topic, 1)
    first = _consumed(client, a, segment, latest, reason="forceCommitMessageReceived")
    assert first["status"] == "COMMIT"
    other = _consumed(client, b, segment, latest, reason="forceCommitMessageReceived")
    assert (other["status"], other.get("committerChosen")) == ("HOLD", True)

    # One offset short of the end: nothing is decided before the other replica reports.
    segment, (a, b), _ = _segment(zk, 2)
    latest = _latest(settings, topic, 2)
    behind = _consumed(client, a, segment, latest - 1, reason="forceCommitMessageReceived")
    assert (behind["status"], behind.get("committerChosen")) == ("HOLD", None)
    ahead = _consumed(client, b, segment, latest, reason="forceCommitMessageReceived")
    assert ahead["status"] == "COMMIT"
