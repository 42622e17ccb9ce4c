"""End to end with real processes (a controller, three servers, the Celery Spark worker): a table
that unnests `payload.commits` (complexTypeConfig.fieldsToUnnest) commits its segments, each with
one row per commit (one when the array is empty or missing), and `verify_ledger --rows` proves
every produced offset is in exactly one committed segment, counting offsets, not rows."""

from __future__ import annotations

import json
import re

import pytest
from django.conf import settings

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.redisconn import get_redis
from tables.streams.redis_streams import RedisTopicAdmin
from tests.cluster_fixtures import load
from tests.ingest_cluster import all_committed, table_config, verify_rows
from tests.poll import wait_until

pytestmark = [
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.celery,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]
TABLE = "githubEvents_REALTIME"
PER_PARTITION = 24


def message(partition: int, index: int) -> bytes:
    """A PushEvent with 0, 1 or 3 commits, or an event without `payload.commits`."""
    created = f"2021-07-21T06:{index % 60:02d}:00Z"
    row: dict = {"id": f"{partition}-{index}", "type": "PushEvent", "created_at": created}
    count = (0, 1, 3, None)[index % 4]
    if count is None:
        row["type"] = "CreateEvent"
    else:
        row["payload"] = {"commits": [{"sha": f"{partition}-{index}-{c}"} for c in range(count)]}
    return json.dumps(row).encode()


def test_an_unnesting_table_commits_every_offset_once(ingest, topic):
    manager = ResourceManager(context.current())
    schema = load("githubEvents_schema.json")
    schema["dimensionFieldSpecs"].append({"name": "payload.commits.sha", "dataType": "STRING"})
    manager.add_schema(schema)
    config = table_config(
        topic,
        **{
            "realtime.segment.flush.threshold.segment.rows": "10",
            "realtime.segment.flush.threshold.time": "15s",
        },
    )
    config["ingestionConfig"]["complexTypeConfig"] = {"fieldsToUnnest": ["payload.commits"]}
    manager.add_table(config)
    admin = RedisTopicAdmin(get_redis(settings.REDIS_URL))
    batches = {p: [message(p, i) for i in range(PER_PARTITION)] for p in range(4)}
    admin.produce_many(topic, batches, now_ms=0)

    wait_until(
        lambda: all_committed(topic, TABLE), timeout=300, interval=1, what="all rows committed"
    )
    report = verify_rows(TABLE)
    assert "PROBLEM" not in report, report
    # The topic fixture's 1..4 messages per partition have no commits: one row each.
    offsets = sum(p + 1 + PER_PARTITION for p in range(4))
    rows = sum(p + 1 for p in range(4)) + 4 * (PER_PARTITION // 4) * (1 + 1 + 3 + 1)
    first = report.splitlines()[0]
    assert re.search(rf": ok: .* {rows} rows checked$", first), report
    assert rows > offsets and "several rows per offset excused" in report

    docs = sum(
        manager.segment_metadata(TABLE, s).total_docs or 0
        for s in manager.segment_names(TABLE)
        if manager.segment_metadata(TABLE, s).end_offset
    )
    assert docs == rows  # total_docs counts rows, as Pinot's segment.total.docs
