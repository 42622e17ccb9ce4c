"""End to end with real processes: ZooKeeper, Redis, a controller, three servers, Celery workers
(Spark builds), a producer. 4 partitions x replication 2; every produced row must end in exactly
one committed segment (`verify_ledger --rows`)."""

from __future__ import annotations

import re

import pytest

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tests.cluster_fixtures import load
from tests.ingest_cluster import admin_get, all_committed, produce, table_config, verify_rows
from tests.poll import wait_until

pytestmark = [
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.celery,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]
TABLE = "githubEvents_REALTIME"
ROWS = 200_000
SEGMENT_ROWS = 5_000


def test_200k_rows_every_row_in_exactly_one_committed_segment(ingest, topic):
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(
        table_config(
            topic,
            **{
                "realtime.segment.flush.threshold.segment.rows": str(SEGMENT_ROWS),
                "realtime.segment.flush.threshold.time": "15s",
            },
        )
    )
    producer = produce(topic, ROWS, rate=5_000)
    output, _ = producer.communicate(timeout=300)
    assert producer.returncode == 0, output.decode(errors="replace")

    coverage = wait_until(
        lambda: all_committed(topic, TABLE), timeout=900, interval=1, what="all rows committed"
    )
    assert all(coverage[p][0] >= 5 for p in range(4)), coverage
    report = verify_rows(TABLE)
    assert "PROBLEM" not in report, report

    # Every committed segment ends ONLINE on its two replicas (the servers fetched their copies).
    def all_online() -> bool:
        view = manager.externalview(TABLE)
        done = [
            s for s in manager.segment_names(TABLE) if manager.segment_metadata(TABLE, s).end_offset
        ]
        return all(sorted(view.get(s, {}).values()) == ["ONLINE", "ONLINE"] for s in done)

    wait_until(all_online, timeout=120, interval=0.5, what="committed segments ONLINE x2")

    # The servers' admin endpoints: consuming segments and Pinot-named metrics.
    total = 0
    for index in range(3):
        port = ingest.server_ports[f"server{index}"]
        metrics = admin_get(port, "/metrics")
        consuming = r'^pinot_server_llcPartitionConsuming_Value\{[^}]*table="githubEvents"'
        assert re.search(consuming, metrics, re.M), metrics
        total += int(
            next(
                float(line.split()[-1])
                for line in metrics.splitlines()
                if line.startswith("pinot_server_realtimeRowsConsumed_Count ")
            )
        )
        info = admin_get(port, f"/tables/{TABLE}/consumingSegmentsInfo")
        assert info and all(item["consumerState"] == "CONSUMING" for item in info)
    assert total >= 2 * ROWS  # every row consumed by both replicas (plus re-reads, if any)

    codes = ingest.stop()
    assert all(code == 0 for code in codes.values()), codes
