"""Pinot's pause, resume and pauseStatus endpoints on a real ZooKeeper and Redis stream.

Servers here are registrations only (no consumers): commits are made by calling the controller's
commit steps directly, as a committing server's segmentCommitEnd would.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from rest_framework.test import APIClient

from tables.cluster import context
from tables.controller.force_commit import ForceCommitManager
from tables.controller.llc import CommittingSegment, LLCSegmentManager
from tables.controller.pause import PauseManager
from tables.controller.resources import ResourceManager
from tables.domain.idealstate import pause_state
from tables.domain.names import LLCSegmentName
from tables.domain.pause import parse_java_timestamp
from tables.domain.segment_metadata import SegmentZKMetadata
from tables.models import AuditEntry, DurableCounter
from tables.redisconn import get_redis
from tables.streams.redis_streams import RedisStreamProvider, RedisTopicAdmin
from tables.zk.records import read_record
from tests.cluster_fixtures import PATHS, load
from tests.console.test_force_commit import (  # shared helpers, not tests
    TABLE,
    _user,
    sent,
    sent_names,
    snapshot,
)
from tests.ingest_cluster import table_config

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]


@pytest.fixture
def operator(db, django_user_model) -> APIClient:
    return _user(django_user_model, "op", "operator")


@pytest.fixture
def table(servers, topic, zk) -> dict[int, str]:
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(table_config(topic))
    return consuming_by_partition()


@pytest.fixture
def ends(table, topic, settings) -> dict[int, int]:
    """Partition -> the stream's latest offset: where a commit of everything ends."""
    stream = RedisStreamProvider(get_redis(settings.REDIS_URL), topic)
    return {p: stream.latest_offset(p) for p in table}


def ideal():
    return read_record(context.current().client, PATHS.idealstate(TABLE)).record


def consuming_by_partition() -> dict[int, str]:
    out: dict[int, str] = {}
    for segment, replicas in ideal().map_fields.items():
        name = LLCSegmentName.parse(segment)
        if name is not None and "CONSUMING" in replicas.values():
            assert name.partition_group_id not in out, f"two CONSUMING segments: {segment}"
            out[name.partition_group_id] = segment
    return out


def meta(segment: str) -> SegmentZKMetadata:
    found = read_record(context.current().client, PATHS.segment(TABLE, segment))
    return SegmentZKMetadata.from_znrecord(found.record)


def commit(segment: str, end: int) -> str | None:
    """What a server's commit does in ZooKeeper; returns the next segment (None when paused)."""
    return LLCSegmentManager(context.current()).commit_segment_metadata(
        TABLE,
        CommittingSegment(segment, end, end, 0, 1, 1, 1, 100, f"http://c/{segment}", end, True),
    )


def test_pause_commits_every_consuming_segment_and_resume_continues(operator, table, ends, zk):
    reply = operator.post("/tables/githubEvents/pauseConsumption?comment=swap%20topic")
    assert reply.status_code == 200, reply.content
    body = reply.json()
    assert body["pauseFlag"] is True
    assert body["consumingSegments"] == sorted(table.values())
    assert (body["reasonCode"], body["comment"]) == ("ADMINISTRATIVE", "swap topic")
    record = ideal()
    state = json.loads(record.simple_fields["pauseState"])
    assert (state["paused"], state["comment"], state["timeInMillis"]) == (
        True,
        "swap topic",
        body["timestamp"],
    )
    assert record.simple_fields["isTablePaused"] == "true"
    assert sent_names(zk) == set(table.values())  # FORCE_COMMIT for every consuming segment
    (audit,) = AuditEntry.objects.all()
    assert (audit.action, audit.target, audit.result, audit.reason) == (
        "pause",
        TABLE,
        "OK",
        "swap topic",
    )
    assert audit.detail["consumingSegments"] == sorted(table.values())
    job = operator.get(f"/tables/forceCommitStatus/{audit.detail['jobId']}").json()
    assert job["numberOfSegmentsYetToBeCommitted"] == 4

    # A repeated pause writes nothing and sends nothing more.
    for server, waiting in sent(zk).items():
        for message in waiting:
            zk.delete(PATHS.message(server, message.id))
    again = operator.post("/tables/githubEvents/pauseConsumption?comment=again").json()
    assert again["timestamp"] == body["timestamp"]
    assert sent_names(zk) == set()

    # The servers commit at their offsets; paused, no next segment is made.
    for partition, segment in table.items():
        assert commit(segment, ends[partition]) is None
    status = operator.get("/tables/githubEvents/pauseStatus").json()
    assert (status["pauseFlag"], status["consumingSegments"]) == (True, [])
    assert consuming_by_partition() == {}

    # lastConsumed: one new segment per partition at the end offset, in the same IdealState write.
    reply = operator.post("/tables/githubEvents/resumeConsumption?comment=done")
    assert reply.status_code == 200, reply.content
    resumed = reply.json()
    assert resumed["pauseFlag"] is False
    fresh = consuming_by_partition()
    assert sorted(resumed["consumingSegments"]) == sorted(fresh.values())
    for partition, segment in fresh.items():
        name = LLCSegmentName.parse(segment)
        assert name.sequence_number == 1
        assert meta(segment).start_offset == str(ends[partition])
        assert meta(segment).custom_map == {}
    assert not pause_state(ideal()).paused
    audit = AuditEntry.objects.get(action="resume")
    assert audit.detail["dataLoss"] == 0
    assert {s["segment"] for s in audit.detail["segments"]} == set(fresh.values())


def test_resume_from_largest_records_the_skip(operator, table, ends, zk, settings, topic):
    operator.post("/tables/githubEvents/pauseConsumption")
    for partition, segment in table.items():
        commit(segment, ends[partition])
    RedisTopicAdmin(get_redis(settings.REDIS_URL)).produce(topic, 2, [b'{"id": "x"}'] * 5, 0)
    reply = operator.post("/tables/githubEvents/resumeConsumption?consumeFrom=LARGEST")
    assert reply.status_code == 200, reply.content
    fresh = consuming_by_partition()
    assert meta(fresh[2]).start_offset == str(ends[2] + 5)  # the 5 rows produced while paused
    assert meta(fresh[2]).custom_map == {
        "consumption.previousOffset": str(ends[2]),
        "consumption.startReason": "largest",
    }
    assert meta(fresh[0]).custom_map == {}  # nothing was skipped there
    (skip,) = [
        s for s in AuditEntry.objects.get(action="resume").detail["segments"] if s["skipped"]
    ]
    assert (skip["segment"], skip["skipped"], skip["startReason"]) == (fresh[2], 5, "largest")
    assert DurableCounter.value_of("llcStreamDataLoss", TABLE) == 0


def test_resume_past_dropped_offsets_counts_data_loss(operator, table, ends, zk, settings, topic):
    operator.post("/tables/githubEvents/pauseConsumption")
    for partition, segment in table.items():
        commit(segment, ends[partition])
    admin = RedisTopicAdmin(get_redis(settings.REDIS_URL))
    admin.produce(topic, 3, [b'{"id": "y"}'] * 6, 0)
    admin.trim_before(topic, 3, ends[3] + 3)  # retention drops 3 rows before they were consumed
    operator.post("/tables/githubEvents/resumeConsumption")
    fresh = consuming_by_partition()
    assert meta(fresh[3]).start_offset == str(ends[3] + 3)
    assert meta(fresh[3]).custom_map["consumption.startReason"] == "dataLoss"
    assert DurableCounter.value_of("llcStreamDataLoss", TABLE) == 3


def test_partition_pause_and_resume(operator, table, ends, zk):
    reply = operator.post("/tables/githubEvents/pauseConsumption?partitions=1,3")
    assert reply.status_code == 200, reply.content
    assert reply.json()["pauseFlag"] is False
    assert reply.json()["pausedPartitions"] == [1, 3]
    assert sent_names(zk) == {table[1], table[3]}
    for partition in (0, 1):
        nxt = commit(table[partition], ends[partition])
        assert (nxt is None) == (partition == 1)  # 0 goes on, 1 is paused
    assert set(consuming_by_partition()) == {0, 2, 3}
    operator.post("/tables/githubEvents/resumeConsumption?partitions=1")
    assert set(consuming_by_partition()) == {0, 1, 2, 3}
    status = operator.get("/tables/githubEvents/pauseStatus").json()
    assert status["pausedPartitions"] == [3]


def test_bad_requests_change_nothing(operator, table, zk, django_user_model):
    viewer = _user(django_user_model, "oncall", "viewer")
    before = snapshot(zk)
    base = "/tables/githubEvents"
    cases = [
        (operator, "/tables/nope/pauseConsumption", 404, "Table nope_REALTIME not found!"),
        (operator, "/tables/nope/resumeConsumption", 404, "Table nope_REALTIME not found!"),
        (operator, f"{base}/resumeConsumption?consumeFrom=earliest", 400, "consumeFrom"),
        (operator, f"{base}/pauseConsumption?batchSize=0", 400, "batchSize"),
        (operator, f"{base}/pauseConsumption?partitions=x", 400, "partition"),
        (viewer, f"{base}/pauseConsumption", 403, "may not perform 'pause'"),
        (viewer, f"{base}/resumeConsumption", 403, "may not perform 'resume'"),
    ]
    for client, url, status, message in cases:
        reply = client.post(url)
        assert reply.status_code == status, (url, reply.content)
        assert message in json.dumps(reply.json()), reply.json()
    assert snapshot(zk) == before
    results = sorted(AuditEntry.objects.values_list("action", "result", "status_code"))
    assert results.count(("pause", "DENIED", 403)) == 1
    assert results.count(("resume", "REJECTED", 400)) == 1
    assert viewer.get("/tables/githubEvents/pauseStatus").status_code == 200


def test_a_resume_landing_between_commit_steps_keeps_the_partition_consuming(table, ends, zk):
    """Step 2 ran while paused, step 3 after the resume: the next segment is still added."""
    ctx = context.current()
    pauses = PauseManager(ctx, ForceCommitManager(ctx, schedule=lambda run: None))
    pauses.pause("githubEvents")
    manager = LLCSegmentManager(ctx)
    original = manager._step3_idealstate

    def resume_then_step3(*args, **kwargs):
        pauses.resume("githubEvents")  # partition 0 still CONSUMING: it gets nothing new
        return original(*args, **kwargs)

    manager._step3_idealstate = resume_then_step3
    end = ends[0]
    committed = CommittingSegment(table[0], end, end, 0, 1, 1, 1, 100, "http://c/x", end)
    assert manager.commit_segment_metadata(TABLE, committed) is not None
    assert set(consuming_by_partition()) == {0, 1, 2, 3}


def test_a_resume_keeps_the_metadata_of_a_segment_a_paused_commit_cleaned_up(table, ends, zk):
    """A commit while paused makes its next segment (step 2) and deletes it again (step 3 found
    the table paused). A resume right after plans a segment of the same name (same sequence, same
    minute), finds it existing (adopted), and the commit's clean-up lands before the resume's
    IdealState write: the resume makes the metadata again, so no CONSUMING segment lacks it."""
    now = context.current()
    minute = (int(time.time()) // 60) * 60_000 + 1_000  # one minute for both: the same name
    ctx = context.ClusterContext(now.client, now.paths, now.redis_url, now_ms=lambda: minute)
    pauses = PauseManager(ctx, ForceCommitManager(ctx, schedule=lambda run: None))
    pauses.pause("githubEvents")
    manager = LLCSegmentManager(ctx)
    cleanups = []
    manager._drop_next = lambda *args: cleanups.append(args)  # the clean-up, held back
    end = ends[0]
    committed = CommittingSegment(table[0], end, end, 0, 1, 1, 1, 100, "http://c/x", end)
    assert manager.commit_segment_metadata(TABLE, committed) is None
    (cleanup,) = cleanups
    leftover = cleanup[1].segment_name  # step 2's segment, not in the IdealState
    original = pauses._create_metadata

    def create_then_clean_up(*args):
        created = original(*args)
        LLCSegmentManager._drop_next(manager, *cleanup)  # lands before the IdealState write
        return created

    pauses._create_metadata = create_then_clean_up
    pauses.resume("githubEvents")
    consuming = consuming_by_partition()
    assert consuming[0] == leftover  # the resume adopted the same name
    for segment in consuming.values():
        assert read_record(zk, PATHS.segment(TABLE, segment)) is not None, segment


def test_concurrent_pauses_and_resumes_end_consistent(table, ends, zk):
    """50 requests from 10 threads, commits racing them: the final flag is the one written last
    (largest stamp), and no partition ever has two CONSUMING segments."""
    ctx = context.current()
    manager = PauseManager(ctx, ForceCommitManager(ctx, schedule=lambda run: None))
    acknowledged: list[tuple[str, bool]] = []
    problems: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def operator_thread(index: int) -> None:
        for turn in range(5):
            try:
                if (index + turn) % 2:
                    details = manager.pause("githubEvents", comment=f"{index}/{turn}").details
                else:
                    details = manager.resume("githubEvents").details
            except Exception as exc:
                problems.append(repr(exc))
                continue
            stamp = parse_java_timestamp(str(details["timestamp"]))
            with lock:
                acknowledged.append((stamp, bool(details["pauseFlag"])))

    def committer() -> None:
        while not stop.is_set():
            try:
                for partition, segment in consuming_by_partition().items():
                    commit(segment, ends[partition])
            except AssertionError as exc:
                problems.append(str(exc))
            except Exception:
                pass

    racing = threading.Thread(target=committer)
    racing.start()
    threads = [threading.Thread(target=operator_thread, args=(i,)) for i in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stop.set()
    racing.join()
    assert problems == []
    assert len(acknowledged) == 50
    final = pause_state(ideal())
    last = max(acknowledged)
    assert parse_java_timestamp(final.time_in_millis) == last[0]
    assert final.paused is last[1]
    consuming = consuming_by_partition()  # asserts at most one per partition
    if not final.paused:
        assert set(consuming) == {0, 1, 2, 3}


def test_topic_swap_while_paused(operator, table, ends, zk, settings, django_user_model):
    """Pinot issue #7100: pause, point the table at another topic, resume on the new topic."""
    admin = _user(django_user_model, "root", "admin")
    config = ResourceManager(context.current()).get_table_config(TABLE).rest
    stream = config["ingestionConfig"]["streamIngestionConfig"]["streamConfigMaps"][0]
    new_topic = f"swapped-{table[0][-6:]}"
    topics = RedisTopicAdmin(get_redis(settings.REDIS_URL))
    topics.create_topic(new_topic, 4)
    offsets = topics.produce(new_topic, 1, [b'{"id": "n"}'] * 3, 0)
    try:
        stream["stream.redis.topic.name"] = new_topic
        before = snapshot(zk)
        # Not paused: refused (the consuming segments read the old topic), nothing written.
        reply = admin.put("/tables/githubEvents", config, format="json")
        assert reply.status_code == 400, reply.content
        assert "pause the table" in reply.json()["error"]
        assert operator.put("/tables/githubEvents", config, format="json").status_code == 403
        assert snapshot(zk) == before

        operator.post("/tables/githubEvents/pauseConsumption?comment=swap")
        for partition, segment in table.items():
            commit(segment, ends[partition])
        reply = admin.put("/tables/githubEvents?comment=new+topic", config, format="json")
        assert reply.status_code == 200, reply.content
        assert ResourceManager(context.current()).get_table_config(TABLE).topic_name == new_topic
        assert json.loads(ideal().simple_fields["streamChangedWhilePaused"])["to"] == (
            f"redis:{new_topic}"
        )

        # lastConsumed after a swap: every partition from the new topic's earliest offset.
        operator.post("/tables/githubEvents/resumeConsumption")
        fresh = consuming_by_partition()
        earliest = RedisStreamProvider(get_redis(settings.REDIS_URL), new_topic)
        for partition, segment in fresh.items():
            assert meta(segment).start_offset == str(earliest.earliest_offset(partition))
        assert meta(fresh[1]).start_offset == str(offsets[0])
        assert "streamChangedWhilePaused" not in ideal().simple_fields
        audits = AuditEntry.objects.filter(action="update_table").order_by("at")
        assert [(a.result, a.status_code, a.target) for a in audits] == [
            ("REJECTED", 400, TABLE),
            ("DENIED", 403, TABLE),
            ("OK", 200, TABLE),
        ]
    finally:
        topics.delete_topic(new_topic)
