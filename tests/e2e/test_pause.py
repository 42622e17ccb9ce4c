"""Pause and resume end to end (reference §4.4): a real controller, three servers, the Celery and
Spark workers, and a producer writing all along.

1. Pause while rows stream in: `pauseStatus` reaches `pauseFlag: true, consumingSegments: []`, the
   IdealState has no CONSUMING segment, and `verify_ledger --rows` passes.
2. Resume `lastConsumed`: the rows produced during the pause are consumed (none lost).
3. Pause, produce, resume `largest`: the rows in between are skipped, recorded in the new
   segments' metadata and the audit log, and the ledger excuses exactly them.
4. Pause, resume `smallest`: the new segments start at the stream's earliest offset and consume
   every row again, as Pinot's do.
"""

from __future__ import annotations

import signal

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from tables.controller import context
from tables.controller.resources import ResourceManager
from tables.domain.idealstate import InstanceState
from tables.domain.names import LLCSegmentName
from tables.models import AuditEntry
from tables.redisconn import get_redis
from tables.streams.redis_streams import RedisStreamProvider
from tests.cluster_fixtures import load
from tests.e2e.test_force_commit import _consuming_at, _operator
from tests.ingest_cluster import done_coverage, produce, table_config, verify_rows
from tests.poll import wait_until

pytestmark = [
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.celery,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]
TABLE = "githubEvents_REALTIME"


def _consuming() -> dict[int, str]:
    """Partition -> its segment with a CONSUMING replica in the IdealState (never two)."""
    out: dict[int, str] = {}
    for segment, replicas in ResourceManager(context.current()).idealstate(TABLE).items():
        name = LLCSegmentName.parse(segment)
        if name is not None and InstanceState.CONSUMING in replicas.values():
            assert name.partition_group_id not in out, f"two CONSUMING segments: {segment}"
            out[name.partition_group_id] = segment
    return out


def _latest(stream: RedisStreamProvider) -> dict[int, int]:
    return {p: stream.latest_offset(p) for p in range(4)}


def _pause_and_wait(api: APIClient, comment: str) -> dict:
    reply = api.post(f"/tables/githubEvents/pauseConsumption?comment={comment}")
    assert reply.status_code == 200, reply.content
    assert reply.json()["pauseFlag"] is True

    def done() -> dict | None:
        status = api.get("/tables/githubEvents/pauseStatus").json()
        return status if status["pauseFlag"] and status["consumingSegments"] == [] else None

    status = wait_until(done, timeout=300, interval=1, what="every consuming segment committed")
    assert _consuming() == {}
    return status


def _resume(api: APIClient, consume_from: str) -> dict[int, str]:
    reply = api.post(f"/tables/githubEvents/resumeConsumption?consumeFrom={consume_from}")
    assert reply.status_code == 200, reply.content
    assert reply.json()["pauseFlag"] is False
    fresh = _consuming()
    assert sorted(fresh) == [0, 1, 2, 3]
    return fresh


def _start(segment: str) -> int:
    meta = ResourceManager(context.current()).segment_metadata(TABLE, segment)
    return int(meta.start_offset or -1)


def test_pause_and_resume_under_steady_production(ingest, topic, django_user_model):
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(
        table_config(
            topic,
            **{
                "realtime.segment.flush.threshold.segment.rows": "100000",
                "realtime.segment.flush.threshold.time": "6h",
            },
        )
    )
    stream = RedisStreamProvider(get_redis(settings.REDIS_URL), topic)
    api = _operator(django_user_model)
    producer = produce(topic, 1_000_000, rate=200)  # steady, until stopped after the resume
    try:
        wait_until(
            lambda: all(stream.latest_offset(p) > 20 for p in range(4)),
            timeout=60,
            what="production under way",
        )
        # 1. Pause mid-stream.
        _pause_and_wait(api, "swap+topic")
        report = verify_rows(TABLE)
        assert "PROBLEM" not in report, report
        paused_at = _latest(stream)

        # 2. Resume where consumption stopped, while the producer still writes.
        wait_until(
            lambda: any(stream.latest_offset(p) > paused_at[p] for p in range(4)),
            timeout=60,
            what="rows produced during the pause",
        )
        fresh = _resume(api, "lastConsumed")
        resumed_at = _latest(stream)
        wait_until(
            lambda: all(stream.latest_offset(p) > resumed_at[p] for p in range(4)),
            timeout=60,
            what="rows produced after the resume",
        )
    finally:
        producer.send_signal(signal.SIGINT)  # the producer stops cleanly and says so
        output, _ = producer.communicate(timeout=60)
    assert b"interrupted" in output, output.decode(errors="replace")
    latest = _latest(stream)
    wait_until(lambda: _consuming_at(ingest, fresh, latest), timeout=180, what="caught up")
    _pause_and_wait(api, "check")
    report = verify_rows(TABLE)
    assert "PROBLEM" not in report, report
    coverage = done_coverage(TABLE)  # every row produced, the pause's included, is committed
    assert {p: coverage[p][1] for p in range(4)} == latest

    # 3. Rows produced while paused, then resume from largest: skipped, recorded, excused.
    more = produce(topic, 200, rate=2_000)
    more.communicate(timeout=120)
    before = _latest(stream)
    fresh = _resume(api, "largest")
    for partition, segment in fresh.items():
        assert _start(segment) == before[partition]
        custom = manager.segment_metadata(TABLE, segment).custom_map
        assert custom["consumption.skipReason"] == "largest"
        assert int(custom["consumption.skippedFrom"]) == latest[partition]
    audit = AuditEntry.objects.filter(action="resume").latest("at")
    assert sum(s["skipped"] for s in audit.detail["segments"]) == sum(
        before[p] - latest[p] for p in range(4)
    )
    _pause_and_wait(api, "after+largest")
    report = verify_rows(TABLE)
    assert "PROBLEM" not in report, report
    assert "skipped by a resume from largest" in report

    # 4. Resume from smallest: Pinot starts again at the earliest offset the stream holds.
    fresh = _resume(api, "smallest")
    for partition, segment in fresh.items():
        assert _start(segment) == stream.earliest_offset(partition)
    wait_until(lambda: _consuming_at(ingest, fresh, before), timeout=180, what="replayed")
