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

import json
import signal
import threading
import urllib.error
import urllib.request

import pytest
from django.conf import settings
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.idealstate import InstanceState, pause_state
from tables.domain.names import LLCSegmentName
from tables.domain.pause import parse_java_timestamp
from tables.models import AuditEntry
from tables.redisconn import get_redis
from tables.streams.redis_streams import RedisStreamProvider
from tables.zk.records import read_record
from tests.accounts import grant
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
        assert custom["consumption.startReason"] == "largest"
        assert int(custom["consumption.previousOffset"]) == latest[partition]
    audit = AuditEntry.objects.filter(action="resume").latest("at")
    assert sum(s["skipped"] for s in audit.detail["segments"]) == sum(
        before[p] - latest[p] for p in range(4)
    )
    _pause_and_wait(api, "after+largest")
    report = verify_rows(TABLE)
    assert "PROBLEM" not in report, report
    assert "skipped by a resume from largest" in report

    # 4. Resume from smallest: Pinot starts again at the earliest offset the stream holds and
    # consumes every row again; the replay is recorded, so the ledger excuses exactly it.
    fresh = _resume(api, "smallest")
    for partition, segment in fresh.items():
        assert _start(segment) == stream.earliest_offset(partition)
        custom = manager.segment_metadata(TABLE, segment).custom_map
        assert custom == {
            "consumption.previousOffset": str(before[partition]),
            "consumption.startReason": "smallest",
        }
    wait_until(lambda: _consuming_at(ingest, fresh, before), timeout=180, what="replayed")
    _pause_and_wait(api, "after+smallest")
    report = verify_rows(TABLE)
    assert "PROBLEM" not in report, report
    assert "consumed again by a resume from smallest" in report
    assert "held twice because a resume from smallest" in report


def _post(port: int, token: str, path: str) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        method="POST",
        headers={"Authorization": f"Token {token}", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_fifty_concurrent_pause_and_resume_requests_end_consistent(
    ingest, topic, django_user_model
):
    """50 requests over HTTP to the controller from 10 threads while servers consume and commit
    (the pauses force commit them): the final state is the one written last (largest
    `timestamp` acknowledged) and no partition ever has two CONSUMING segments."""
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(table_config(topic))
    user = django_user_model.objects.create_user("storm", password="a-long-test-password")
    grant(user, "operator")
    token = Token.objects.create(user=user).key
    producer = produce(topic, 1_000_000, rate=200)
    acknowledged: list[tuple[int, bool]] = []
    problems: list[str] = []
    done = threading.Event()

    def watch_idealstate() -> None:
        while not done.is_set():
            try:
                _consuming()
            except AssertionError as exc:
                problems.append(str(exc))
                return

    def operator(index: int) -> None:
        for turn in range(5):
            verb = "pauseConsumption" if (index + turn) % 2 else "resumeConsumption"
            status, body = _post(ingest.controller_port, token, f"/tables/githubEvents/{verb}")
            if status != 200:
                problems.append(f"{verb}: {status} {body}")
                continue
            stamp = parse_java_timestamp(body["timestamp"])
            assert stamp is not None, body
            acknowledged.append((stamp, body["pauseFlag"]))

    watcher = threading.Thread(target=watch_idealstate)
    watcher.start()
    threads = [threading.Thread(target=operator, args=(i,)) for i in range(10)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        done.set()
        watcher.join()
        producer.send_signal(signal.SIGINT)
        producer.communicate(timeout=60)
    assert problems == []
    assert len(acknowledged) == 50
    last_stamp, last_flag = max(acknowledged)
    ctx = context.current()
    final = pause_state(read_record(ctx.client, ctx.paths.idealstate(TABLE)).record)
    assert parse_java_timestamp(final.time_in_millis) == last_stamp
    assert final.paused is last_flag
    if last_flag:  # every consuming segment commits and none starts again
        wait_until(lambda: _consuming() == {}, timeout=300, what="every segment committed")
    else:  # one consuming segment per partition, all of them consuming again
        wait_until(lambda: sorted(_consuming()) == [0, 1, 2, 3], timeout=120, what="consuming")
    report = verify_rows(TABLE)
    assert "PROBLEM" not in report, report
