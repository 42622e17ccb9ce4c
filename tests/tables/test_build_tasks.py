"""The Spark build and re-ingestion tasks, run by a real Celery spark worker on real services.

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
from rest_framework.test import APIClient

from tables import builds
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
    return f"githubEvents__0__{uuid.uuid4().int % 1000}__20210721T0600Z"


def _stage(rows: list[bytes], tmp_path, name: str) -> str:
    local = tmp_path / f"{name}.parquet"
    write_staging(enumerate(rows, start=1), local)
    store = builds.deep_store()
    key = store.staging_key("githubEvents", name)
    store.publish(local, key)
    return key


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
    jobs = Job.objects.filter(segment=segment).order_by("id")
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
    statuses = list(
        Job.objects.filter(segment=segment).order_by("id").values_list("status", flat=True)
    )
    assert statuses == [Job.Status.ABANDONED, Job.Status.SUCCEEDED]
