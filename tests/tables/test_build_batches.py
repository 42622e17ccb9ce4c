"""Batched builds on a real Celery spark worker: the first task builds every pending request in
one batch; each request keeps its own outcome, bytes and Job row.

The pending requests are registered first (as publishing their tasks would), so that the leader's
batch is known; the batch stores their results; then their own tasks are published and return
what the batch recorded, without building again.
"""

from __future__ import annotations

import hashlib
import uuid

import pytest
from celery.result import AsyncResult
from django.conf import settings

from tables import builds
from tables.build_batches import BuildQueue, PendingBuild
from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.table_config import switch_stream_type
from tables.models import DurableCounter, Job
from tables.redisconn import get_redis
from tables.segments.builder import write_staging
from tables.tasks import spark_build_segment
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
    return worker_zk


@pytest.fixture
def github(servers, topic):
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(
        switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic)
    )
    return topic


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


def _build(segment: str, staging: str, end: int, output: str, task_id: str | None = None):
    return spark_build_segment.apply_async(
        args=("githubEvents", segment, staging, 1, end, output), task_id=task_id
    )


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
    handed = [AsyncResult(i) for i in ids[1:]]
    assert [r.state for r in handed] == ["SUCCESS", "SUCCESS", "FAILURE"]
    assert handed[0].result["crc"] == Job.objects.get(task_id=ids[1]).details["crc"]

    jobs = {j.task_id: j for j in Job.objects.filter(task_id__in=ids)}
    assert {j.details["batch"]["size"] for j in jobs.values()} == {4}
    assert {j.details["batch"]["leader"] for j in jobs.values()} == {ids[0]}
    assert [jobs[i].status for i in ids] == ["SUCCEEDED"] * 3 + ["FAILED"]
    assert "outside" in jobs[ids[3]].error

    # Their own tasks return what the batch recorded, without building again.
    results = [_build(segments[i], staged[i], ends[i], batched[i], ids[i]) for i in range(1, 4)]
    for i, result in zip(range(1, 3), results, strict=False):
        outcome = result.get(TASK_TIMEOUT)
        assert outcome["job_id"] == jobs[ids[i]].pk and outcome["rows"] == ends[i] - 1
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
