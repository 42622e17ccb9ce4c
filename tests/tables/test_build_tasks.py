"""The Spark build and re-ingestion tasks, run by a real Celery spark worker on real services,
and batched builds (the first task builds every pending request in one batch).

The worker processes use the test database file, so these tests use transactional_db: the Job
rows the worker writes are visible here, and ours to the worker.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import uuid

import pytest
from celery.exceptions import TimeoutError as CeleryTimeout
from celery.result import AsyncResult
from django.conf import settings
from rest_framework.test import APIClient

from tables import builds
from tables.build_batches import BuildQueue, PendingBuild
from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.table_config import switch_stream_type
from tables.models import DurableCounter, Job
from tables.redisconn import get_redis
from tables.segments.builder import write_staging
from tables.streams.redis_streams import RedisTopicAdmin
from tables.tasks import spark_build_segment, spark_reingest_segment
from tests.cluster_fixtures import github_rows, load
from tests.poll import wait_until

pytestmark = [
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.spark,
    pytest.mark.celery,
    pytest.mark.django_db(transaction=True),
]
TASK_TIMEOUT = 300


@pytest.fixture
def zk(worker_zk):
    """The cluster fixtures build on `zk`: here, the chroot the workers read."""
    return worker_zk


@pytest.fixture
def github(servers, topic):
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(
        switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic)
    )
    return topic


def _segment() -> str:
    return f"githubEvents__0__{uuid.uuid4().int % 10**9}__20210721T0600Z"  # never an old one


def _stage(rows: list[bytes], tmp_path, name: str) -> str:
    local = tmp_path / f"{name}.parquet"
    write_staging(enumerate(rows, start=1), local)
    store = builds.deep_store()
    key = store.staging_key("githubEvents", name)
    store.publish(local, key)
    return key


def _settled(segments: list[str], count: int) -> list[Job]:
    """The `count` Job rows of `segments` once none is RUNNING: a build's result is handed over as
    soon as its segment is published, before the batch records its row."""

    def jobs() -> list[Job] | None:
        found = list(Job.objects.filter(segment__in=segments).order_by("id"))
        done = len(found) == count and all(j.status != Job.Status.RUNNING for j in found)
        return found if done else None

    return wait_until(jobs, timeout=60, what=f"{count} recorded builds of {segments}")


def _sha(key: str) -> str:
    with builds.deep_store().open_read(key) as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def test_a_build_publishes_the_segment_and_a_rerun_gives_the_same_bytes(
    celery_workers, github, tmp_path, admin_user
):
    segment = _segment()
    key = _stage(github_rows(), tmp_path, segment)
    first = spark_build_segment.delay("githubEvents", segment, key, 1, 801).get(TASK_TIMEOUT)
    assert first["rows"] == 800
    assert first["incomplete_rows"] == 0
    final = builds.deep_store().segment_key("githubEvents", segment)
    digest = _sha(final)

    second = spark_build_segment.delay("githubEvents", segment, key, 1, 801).get(TASK_TIMEOUT)
    assert second["crc"] == first["crc"]
    assert _sha(final) == digest
    jobs = _settled([segment], 2)
    assert [(j.kind, j.status, j.rows) for j in jobs] == [("BUILD", "SUCCEEDED", 800)] * 2
    assert jobs[0].bytes == first["size_bytes"]
    assert jobs[0].duration_ms > 0

    # A committer's build goes to a temporary key: only commit end makes it the segment.
    temporary = f"githubEvents/{segment}.tmp.{uuid.uuid4().hex}"
    upload = spark_build_segment.delay("githubEvents", segment, key, 1, 801, temporary)
    assert upload.get(TASK_TIMEOUT)["download_uri"] == builds.deep_store().uri_for(temporary)
    assert _sha(temporary) == digest

    api = APIClient()
    api.force_authenticate(admin_user)
    resp = api.get(f"/segments/githubEvents/{segment}")
    assert resp.status_code == 200
    assert hashlib.sha256(b"".join(resp.streaming_content)).hexdigest() == digest
    assert api.get(f"/segments/githubEvents/{_segment()}").status_code == 404


def test_a_failed_build_is_recorded_and_counted(celery_workers, github):
    segment = _segment()
    key = f"githubEvents_REALTIME-{github}-0"  # Pinot's client id: table, topic, partition
    before = DurableCounter.value_of(builds.BUILD_FAILURES, key)
    result = spark_build_segment.delay("githubEvents", segment, "_staging/missing.parquet", 1, 5)
    with pytest.raises(Exception) as failure:
        result.get(TASK_TIMEOUT)
    assert not isinstance(failure.value, CeleryTimeout)
    job = Job.objects.get(segment=segment)
    assert job.status == Job.Status.FAILED
    assert "missing.parquet" in job.error
    assert DurableCounter.value_of(builds.BUILD_FAILURES, key) == before + 1
    assert not builds.deep_store().exists(builds.deep_store().segment_key("githubEvents", segment))


def test_reingestion_reads_the_offset_range_from_the_stream(celery_workers, github, settings):
    admin = RedisTopicAdmin(get_redis(settings.REDIS_URL))
    offsets = admin.produce(github, 2, github_rows()[:300], now_ms=0)
    segment = "githubEvents__2__7__20210721T0600Z"
    result = spark_reingest_segment.delay("githubEvents", segment, offsets[0], offsets[-1] + 1).get(
        TASK_TIMEOUT
    )
    assert result["rows"] == 300
    job = Job.objects.get(segment=segment)
    assert (job.kind, job.status, job.rows) == ("REINGEST", "SUCCEEDED", 300)


def test_killing_the_worker_mid_build_leaves_nothing_and_the_task_completes(
    celery_workers, github, tmp_path
):
    # Enough rows that the build is still running when the kill lands.
    rows = [
        json.dumps(
            {"id": str(i), "type": "PushEvent", "created_at": "2021-07-21T10:00:00Z"}
        ).encode()
        for i in range(300_000)
    ]
    segment = _segment()
    key = _stage(rows, tmp_path, segment)
    final = builds.deep_store().segment_key("githubEvents", segment)
    result = spark_build_segment.delay("githubEvents", segment, key, 1, len(rows) + 1)

    wait_until(
        lambda: Job.objects.filter(segment=segment, status=Job.Status.RUNNING).exists(),
        timeout=120,
        what="the build to start",
    )
    for pid in celery_workers.child_pids("spark"):
        os.kill(pid, signal.SIGKILL)
    assert not builds.deep_store().exists(final)
    assert Job.objects.get(segment=segment).status == Job.Status.RUNNING  # it really was mid-build

    # acks_late + reject_on_worker_lost: the task is delivered again to a new pool process.
    outcome = result.get(TASK_TIMEOUT)
    assert outcome["rows"] == len(rows)
    assert builds.deep_store().exists(final)
    statuses = [job.status for job in _settled([segment], 2)]
    assert statuses == [Job.Status.ABANDONED, Job.Status.SUCCEEDED]


# --- batched builds: the first task builds every pending request in one batch; each request keeps
# its own outcome, bytes and Job row. The pending requests are registered first (as publishing
# their tasks would), so that the leader's batch is known; the batch stores their results; then
# their own tasks are published and return what the batch recorded, without building again.


def _build(segment: str, staging: str, end: int, output: str, task_id: str | None = None):
    return spark_build_segment.apply_async(
        args=("githubEvents", segment, staging, 1, end, output), task_id=task_id
    )


def test_a_batch_hands_its_own_segment_over_before_recording_it(github, tmp_path):
    """The batch's own request is handed over as soon as its segment is published, like the
    others' (here in this process, on its publisher thread), not only when its task returns."""
    from django.db import connection

    run = uuid.uuid4().int % 100_000
    segment = f"githubEvents__0__{run}__20210721T0600Z"
    staged = _stage(github_rows()[:50], tmp_path, f"{segment}.rows")
    task_id = f"own-{run}"
    queue = BuildQueue(get_redis(settings.REDIS_URL), settings.CLUSTER_NAME)
    queue.forget([b.task_id for b, _ in queue.pending()])  # what earlier tests left
    handed = {}

    def on_outcome(pairs):
        try:
            for handed_id, outcome in pairs:
                handed[handed_id] = (outcome, Job.objects.get(task_id=handed_id).status)
        finally:
            connection.close()  # this thread's

    output = f"githubEvents/{segment}.tmp.own"
    outcome = builds.build_segment(
        context.current(), "githubEvents", segment, staged, 1, 51, task_id, output, on_outcome
    )
    assert list(handed) == [task_id]
    early, status_then = handed[task_id]
    assert status_then == Job.Status.RUNNING  # before the batch recorded its Job row
    assert early == outcome and outcome.rows == 50
    assert Job.objects.get(task_id=task_id).status == Job.Status.SUCCEEDED


def test_pending_builds_are_built_in_one_batch_each_on_its_own(celery_workers, github, tmp_path):
    rows = github_rows()
    run = uuid.uuid4().int % 100_000  # an LLC sequence number
    parts = [rows[:300], rows[300:550], rows[550:]]
    segments = [f"githubEvents__{p}__{run}__20210721T0600Z" for p in range(4)]
    staged = [_stage(part, tmp_path, f"{s}.rows") for s, part in zip(segments, parts, strict=False)]
    staged.append(staged[0])  # segment 3: 300 rows claimed to span offsets [1, 101): refused
    ends = [301, 251, 251, 101]
    batched = [f"githubEvents/{s}.tmp.batch" for s in segments]
    alone = [f"githubEvents/{s}.tmp.alone" for s in segments]
    failures_key = f"githubEvents_REALTIME-{github}-3"
    failures_before = DurableCounter.value_of(builds.BUILD_FAILURES, failures_key)

    queue = BuildQueue(get_redis(settings.REDIS_URL), settings.CLUSTER_NAME)
    queue.forget([b.task_id for b, _ in queue.pending()])  # what earlier tests left
    ids = [f"batch-{run}-{i}" for i in range(4)]
    for i in range(1, 4):
        queue.register(
            PendingBuild(ids[i], "githubEvents", segments[i], staged[i], 1, ends[i], batched[i])
        )
    leader = _build(segments[0], staged[0], ends[0], batched[0], ids[0]).get(TASK_TIMEOUT)
    assert leader["rows"] == 300
    # The batch stored the others' results already: their committers need not wait for them.
    jobs = {j.task_id: j for j in _settled(segments, 4)}
    handed = [AsyncResult(i) for i in ids[1:]]
    wanted = ["SUCCESS", "SUCCESS", "FAILURE"]  # a failure: handed over once recorded
    wait_until(lambda: [r.state for r in handed] == wanted, timeout=60, what="handed over")
    assert handed[0].result["crc"] == jobs[ids[1]].details["crc"]

    assert {j.details["batch"]["size"] for j in jobs.values()} == {4}
    assert {j.details["batch"]["leader"] for j in jobs.values()} == {ids[0]}
    assert [jobs[i].status for i in ids] == ["SUCCEEDED"] * 3 + ["FAILED"]
    assert "outside" in jobs[ids[3]].error

    # Their own tasks return what the batch recorded, without building again.
    results = [_build(segments[i], staged[i], ends[i], batched[i], ids[i]) for i in range(1, 4)]
    for i, result in zip(range(1, 3), results, strict=False):
        outcome = result.get(TASK_TIMEOUT)
        assert outcome["job_id"] == jobs[ids[i]].pk and outcome["rows"] == ends[i] - 1
        assert outcome == handed[i - 1].result  # handed over before it was recorded: the same
        assert outcome["download_uri"] == builds.deep_store().uri_for(batched[i])
    with pytest.raises(Exception, match="outside"):
        results[2].get(TASK_TIMEOUT)
    wait_until(lambda: queue.pending() == [], timeout=60, what="the batched tasks ran")
    assert Job.objects.filter(task_id__in=ids).count() == 4
    assert DurableCounter.value_of(builds.BUILD_FAILURES, failures_key) == failures_before + 1

    # Each batched segment is byte for byte its build alone.
    for i in range(3):
        crc = _build(segments[i], staged[i], ends[i], alone[i]).get(TASK_TIMEOUT)["crc"]
        assert crc == jobs[ids[i]].details["crc"]
        assert _sha(alone[i]) == _sha(batched[i])
