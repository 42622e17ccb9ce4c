"""End to end with real processes: ZooKeeper, Redis, a controller, three servers, Celery workers
(Spark builds), a producer. 4 partitions x replication 2; every produced row must end in exactly
one committed segment (`verify_ledger --rows`)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import urllib.request

import pytest
from django.core.management import call_command

from tables.controller import context
from tables.controller.resources import ResourceManager
from tables.redisconn import get_redis
from tables.streams.redis_streams import RedisStreamProvider
from tests import envdefaults
from tests.cluster_fixtures import PATHS, load
from tests.ingest_cluster import IngestCluster, done_coverage, table_config
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


def _live(zk) -> set[str]:
    return set(zk.get_children(PATHS.liveinstances)) if zk.exists(PATHS.liveinstances) else set()


@pytest.fixture
def ingest(worker_zk, celery_workers, tmp_path):
    cluster = IngestCluster(celery_workers.zk_hosts, tmp_path / "servers")
    cluster.start_controller()
    for index in range(3):
        cluster.start_server(index)
    wanted = {cluster.controller_id, *(cluster.server_id(i) for i in range(3))}
    wait_until(lambda: wanted <= _live(worker_zk), timeout=90, what="controller and 3 servers live")
    try:
        yield cluster
    finally:
        cluster.stop()


def _produce(topic: str, count: int, rate: int) -> subprocess.Popen:
    schema = envdefaults.PINOT_FIXTURES / "githubEvents_schema.json"
    args = ["produce", "--topic", topic, "--partitions", "4", "--rate", str(rate)]
    args += ["--schema", str(schema), "--count", str(count)]
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=envdefaults.ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _all_committed(topic: str, settings) -> dict[int, tuple[int, int]] | None:
    provider = RedisStreamProvider(get_redis(settings.REDIS_URL), topic)
    latest = {p: provider.latest_offset(p) for p in range(4)}
    coverage = done_coverage(TABLE)
    if all(coverage.get(p, (0, 0))[1] == latest[p] for p in range(4)):
        return coverage
    return None


def test_200k_rows_every_row_in_exactly_one_committed_segment(ingest, worker_zk, topic, settings):
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
    producer = _produce(topic, ROWS, rate=5_000)
    output, _ = producer.communicate(timeout=300)
    assert producer.returncode == 0, output.decode(errors="replace")

    coverage = wait_until(
        lambda: _all_committed(topic, settings), timeout=900, interval=1, what="all rows committed"
    )
    assert all(coverage[p][0] >= 5 for p in range(4)), coverage

    out = io.StringIO()
    call_command("verify_ledger", TABLE, "--rows", stdout=out)
    assert "PROBLEM" not in out.getvalue(), out.getvalue()

    # Every committed segment ends ONLINE on its two replicas (the servers fetched their copies).
    def all_online() -> bool:
        view = manager.externalview(TABLE)
        done = [
            s for s in manager.segment_names(TABLE) if manager.segment_metadata(TABLE, s).end_offset
        ]
        return all(sorted(view.get(s, {}).values()) == ["ONLINE", "ONLINE"] for s in done)

    wait_until(all_online, timeout=120, interval=0.5, what="committed segments ONLINE x2")

    # Each server's admin endpoint reports its consuming segments and Pinot-named metrics.
    port = ingest.server_ports["server0"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        metrics = reply.read().decode()
    assert "pinot_server_realtimeRowsConsumed_Count{partition=" in metrics
    with urllib.request.urlopen(
        f"http://127.0.0.1:{port}/tables/{TABLE}/consumingSegmentsInfo", timeout=10
    ) as reply:
        info = json.load(reply)
    assert all(item["consumerState"] in ("CONSUMING", "NOT_CONSUMING") for item in info)

    codes = ingest.stop()
    assert all(code == 0 for code in codes.values()), codes
