"""Force commit end to end (reference §4.5): a real controller, three servers and the Spark worker.

Fewer rows than the flush threshold are produced and consumed; `POST forceCommit` (through the
API, as an operator) makes every CONSUMING segment commit at its current offset. The job's status
is polled until nothing is left to commit; then every segment is DONE with exactly the rows
produced, each partition has its next CONSUMING segment, and `verify_ledger --rows` passes. A
second force commit of one partition commits its new segment while it has no rows at all (Pinot
commits the empty segment), and the ledger still holds.
"""

from __future__ import annotations

import json
import re

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.names import LLCSegmentName
from tables.redisconn import get_redis
from tables.streams.redis_streams import RedisStreamProvider
from tests.accounts import grant
from tests.cluster_fixtures import load
from tests.ingest_cluster import (
    IngestCluster,
    produce,
    replicas_by_server,
    table_config,
    verify_rows,
)
from tests.poll import wait_until

pytestmark = [
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.celery,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]
TABLE = "githubEvents_REALTIME"
ROWS = 400  # far below the flush threshold: nothing commits unless forced


def _operator(django_user_model) -> APIClient:
    user = django_user_model.objects.create_user("op", password="a-long-test-password")
    grant(user, "operator")
    client = APIClient()
    client.force_authenticate(user)
    return client


def _segments(sequence: int) -> dict[int, str]:
    """Partition -> its segment with this sequence number, from the IdealState."""
    out = {}
    for segment in ResourceManager(context.current()).idealstate(TABLE):
        name = LLCSegmentName.parse(segment)
        if name is not None and name.sequence_number == sequence:
            out[name.partition_group_id] = segment
    return out


def _consuming_at(
    cluster: IngestCluster, segments: dict[int, str], offsets: dict[int, int]
) -> bool:
    """True once both replicas of every segment are CONSUMING and have read to `offsets`."""
    seen: dict[str, list[dict]] = {}
    for items in replicas_by_server(cluster, TABLE).values():
        for item in items:
            seen.setdefault(item["segmentName"], []).append(item)
    for partition, segment in segments.items():
        replicas = seen.get(segment, [])
        if len(replicas) != 2:
            return False
        wanted = str(offsets[partition])
        if any(i.get("phase") != "CONSUMING" or i.get("nextOffset") != wanted for i in replicas):
            return False
    return True


def _force_commit_and_wait(api: APIClient, query: str) -> dict:
    reply = api.post(f"/tables/githubEvents/forceCommit?{query}")
    assert reply.status_code == 200, reply.content
    body = reply.json()
    assert body["forceCommitStatus"] == body["jobMetaZKWriteStatus"] == "SUCCESS"

    def finished() -> dict | None:
        status = api.get(f"/tables/forceCommitStatus/{body['forceCommitJobId']}")
        assert status.status_code == 200, status.content
        data = status.json()
        return data if data["numberOfSegmentsYetToBeCommitted"] == 0 else None

    return wait_until(finished, timeout=300, interval=1, what="force commit finished")


def test_force_commit_commits_consuming_segments_and_the_next_ones_consume(
    ingest, topic, django_user_model
):
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
    producer = produce(topic, ROWS, rate=2_000)
    output, _ = producer.communicate(timeout=300)
    assert producer.returncode == 0, output.decode(errors="replace")
    stream = RedisStreamProvider(get_redis(settings.REDIS_URL), topic)
    latest = {p: stream.latest_offset(p) for p in range(4)}
    first = _segments(0)
    wait_until(lambda: _consuming_at(ingest, first, latest), timeout=120, what="every row consumed")

    api = _operator(django_user_model)
    status = _force_commit_and_wait(api, "comment=roll+over")
    assert status["segmentsYetToBeCommitted"] == []
    assert sorted(json.loads(status["segmentsForceCommitted"])) == sorted(first.values())

    produced = 0
    for partition, segment in first.items():
        meta = manager.segment_metadata(TABLE, segment)
        assert meta.status == "DONE"
        start, end = int(meta.start_offset or -1), int(meta.end_offset or -1)
        assert end == latest[partition]
        assert meta.total_docs == end - start  # every row of the partition, no more
        produced += end - start
    assert produced >= ROWS  # the `topic` fixture's own rows come on top
    # As in Pinot, a segment counts as committed once its metadata is DONE (the commit's step
    # 1); the IdealState (step 3, one group-committed write for the four) follows moments later.
    second = wait_until(
        lambda: found if len(found := _segments(1)) == 4 else None,
        timeout=30,
        what="the next segments in the IdealState",
    )
    ideal = manager.idealstate(TABLE)
    assert sorted(second) == [0, 1, 2, 3]
    for partition, segment in second.items():
        assert set(ideal[segment].values()) == {"CONSUMING"}
        assert set(ideal[first[partition]].values()) == {"ONLINE"}
        assert manager.segment_metadata(TABLE, segment).start_offset == str(latest[partition])
    logs = "".join(ingest.log(f"server{i}") for i in range(3))
    assert re.search(rf"FORCE_COMMIT \S+ of {TABLE}: forcing \[", logs)
    report = verify_rows(TABLE)
    assert "PROBLEM" not in report, report

    # Partition 0's new segment has no rows: force committed, it commits empty.
    wait_until(
        lambda: _consuming_at(ingest, {0: second[0]}, latest), timeout=120, what="next consuming"
    )
    _force_commit_and_wait(api, "partitions=0")
    empty = manager.segment_metadata(TABLE, second[0])
    assert empty.status == "DONE" and empty.total_docs == 0
    assert empty.start_offset == empty.end_offset == str(latest[0])
    third = wait_until(lambda: _segments(2) or None, timeout=30, what="partition 0's next")
    assert list(third) == [0]
    assert set(manager.idealstate(TABLE)[third[0]].values()) == {"CONSUMING"}
    report = verify_rows(TABLE)
    assert "PROBLEM" not in report, report
