"""Forged completion calls against a real cluster (a controller, three servers, the Spark worker).

While the servers consume, segmentConsumed calls that name an instance that is not live, a live
server that holds no replica of the segment, come without the cluster token, or report an offset
past the stream's end, all with an offset that would win the segment, are refused (401/403/400,
Pinot's FAILED body with a reason). They are counted per cause on the controller's /metrics and
logged once per cause; the partition keeps committing, and every produced row ends up in exactly
one committed segment (`verify_ledger --rows`).
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request

import pytest
from django.conf import settings

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.completion_trust import Cause
from tables.domain.names import LLCSegmentName
from tables.redisconn import get_redis
from tables.security import cluster_token
from tables.streams.redis_streams import RedisStreamProvider
from tests.cluster_fixtures import load
from tests.ingest_cluster import (
    HOST,
    IngestCluster,
    admin_get,
    all_committed,
    done_coverage,
    find_phase,
    produce,
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
REPEAT = 3  # each forged call is sent this often: counted every time, logged once


def _segment_consumed(
    cluster: IngestCluster, instance: str, segment: str, offset: int, token: str | None
) -> tuple[int, dict]:
    """One segmentConsumed straight to the controller: (HTTP status, JSON body)."""
    query = urllib.parse.urlencode(
        {
            "instance": instance,
            "name": segment,
            "streamPartitionMsgOffset": offset,
            "reason": "rowLimit",
            "rowCount": 1,
        }
    )
    request = urllib.request.Request(
        f"http://{HOST}:{cluster.controller_port}/segmentConsumed?{query}"
    )
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as refused:
        with refused:
            return refused.code, json.load(refused)


def _refusals(cluster: IngestCluster) -> dict[str, float]:
    """`pinot_controller_llcCompletionCallsRefused_Count` by cause (the controller's /metrics)."""
    text = admin_get(cluster.controller_port, "/metrics")
    found = re.findall(
        r'^pinot_controller_llcCompletionCallsRefused_Count\{cause="(\w+)"\} (\S+)$', text, re.M
    )
    return {cause: float(value) for cause, value in found}


def test_forged_segment_consumed_calls_are_refused_and_the_partition_keeps_committing(
    ingest, topic
):
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(
        table_config(
            topic,
            **{
                "realtime.segment.flush.threshold.segment.rows": "1500",
                "realtime.segment.flush.threshold.time": "20s",
            },
        )
    )
    producer = produce(topic, 12_000, rate=1_500)

    # A segment the servers are consuming right now, its replicas and a live server without one.
    _, item = wait_until(
        lambda: (hit := find_phase(ingest, TABLE, "CONSUMING")) and hit[1]["rows"] > 100 and hit,
        timeout=120,
        what="a replica consuming",
    )
    segment = item["segmentName"]
    partition = LLCSegmentName.parse(segment).partition_group_id
    replicas = sorted(manager.idealstate(TABLE)[segment])
    servers = {ingest.server_id(i) for i in range(3)}
    (outsider,) = servers - set(replicas)
    latest = RedisStreamProvider(get_redis(settings.REDIS_URL), topic).latest_offset(partition)
    done_before = done_coverage(TABLE).get(partition, (0, 0))[0]

    token = cluster_token()
    forged = {
        Cause.NOT_LIVE: ("Server_forged.example_7001", 10**12, token, 403),
        Cause.NOT_REPLICA: (outsider, 10**12, token, 403),
        Cause.NO_TOKEN: (replicas[0], 10**12, None, 401),
        Cause.OFFSET_PAST_END: (replicas[0], latest + 10**9, token, 400),
    }
    for _ in range(REPEAT):
        for cause, (instance, offset, key, http_status) in forged.items():
            status, body = _segment_consumed(ingest, instance, segment, offset, key)
            assert status == http_status, (cause, body)
            assert (body["status"], body["streamPartitionMsgOffset"]) == ("FAILED", None), body
            assert body["reason"], body

    # Counted per cause (the controller flushes its counts every few seconds), logged once each.
    wanted = {str(cause): float(REPEAT) for cause in forged}
    wait_until(
        lambda: {c: v for c, v in _refusals(ingest).items() if c in wanted} == wanted,
        timeout=60,
        what=f"refusals counted: {wanted}",
    )
    assert _refusals(ingest)["badToken"] == 0.0
    log = ingest.log("controller")
    for cause in forged:
        assert log.count(f"refused a completion call ({cause})") == 1, cause

    # The partition keeps committing: the forged segment and the next one become DONE.
    wait_until(
        lambda: done_coverage(TABLE).get(partition, (0, 0))[0] >= done_before + 2,
        timeout=300,
        interval=1,
        what=f"two more DONE segments of partition {partition}",
    )
    assert manager.segment_metadata(TABLE, segment).status == "DONE"

    output, _ = producer.communicate(timeout=300)
    assert producer.returncode == 0, output.decode(errors="replace")
    wait_until(
        lambda: all_committed(topic, TABLE), timeout=600, interval=1, what="all rows committed"
    )
    report = verify_rows(TABLE)
    assert "PROBLEM" not in report, report
