"""A server's `pinot_server_pauselessConsumptionEnabled_Value{table,tableType,topic,partition}`,
from a real `ServerInstance` in this process on the real ZooKeeper and Redis (no controller: its
consumers read and never commit): two tables on one topic, one pauseless; each partition the
server consumes reads 1 for the pauseless table and 0 for the other, and a partition it stops
consuming (its table disabled) has no series, nor any other per-partition gauge (lag, delay,
offsets: no frozen series), while its rows-consumed meter stays; the controller-response meters
read 0 before the first answer (no controller here), so a restart never makes them vanish."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitoring.server_metrics import server_registry
from tables import builds
from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.controller.table_state import set_table_enabled
from tables.server.instance import ServerInstance
from tests.cluster_fixtures import PATHS, load
from tests.ingest_cluster import HOST, free_port, table_config
from tests.poll import wait_until

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]

GAUGE = "pinot_server_pauselessConsumptionEnabled_Value"
PAUSELESS = "githubEventsPauseless"
Series = dict[tuple[str, str, str, str], float]
PARTITION_GAUGES = (
    "pinot_server_llcPartitionConsuming_Value",
    "pinot_server_realtimeIngestionOffsetLag_Value",
    "pinot_server_realtimeIngestionDelayMs_Value",
    "pinot_server_realtimeIngestionUpstreamOffset_Value",
    "pinot_server_realtimeIngestionConsumingOffset_Value",
)


def _config(topic: str, pauseless: bool) -> dict:
    config = table_config(topic, **{"realtime.segment.flush.threshold.segment.rows": "1000"})
    config["segmentsConfig"]["replication"] = "1"
    if pauseless:
        config["tableName"] = PAUSELESS
        config["segmentsConfig"]["schemaName"] = "githubEvents"
        config["ingestionConfig"]["streamIngestionConfig"]["pauselessConsumptionEnabled"] = True
    return config


@pytest.fixture
def server(cluster, topic, tmp_path: Path) -> Iterator[ServerInstance]:
    """One in-process server holding both tables (replication 1: every partition is its own)."""
    port = free_port()

    def submit_build(*args: object) -> None:
        raise AssertionError("no build without a controller's COMMIT")

    instance = ServerInstance(
        f"Server_{HOST}_{port}",
        HOST,
        port,
        context.current,
        builds.deep_store,
        submit_build,
        tmp_path / "server",
        hold_s=0.2,
        tick_s=0.5,
    )
    instance.start()
    try:
        live = PATHS.liveinstance(instance.instance_id)
        wait_until(lambda: cluster.exists(live), what="the server registered")
        manager = ResourceManager(context.current())
        manager.add_schema(load("githubEvents_schema.json"))
        manager.add_table(_config(topic, pauseless=False))
        manager.add_table(_config(topic, pauseless=True))
        yield instance
    finally:
        instance.stop()


def _tables_of(instance: ServerInstance, name: str) -> set[str]:
    """The tables with a sample of family `name`."""
    text = generate_latest(server_registry(instance)).decode()
    return {
        sample.labels["table"]
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and "table" in sample.labels
    }


def _gauge(instance: ServerInstance, name: str = GAUGE) -> Series:
    text = generate_latest(server_registry(instance)).decode()
    found: Series = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                labels = sample.labels
                key = (labels["table"], labels["tableType"], labels["topic"], labels["partition"])
                found[key] = sample.value
    return found


def test_pauseless_partitions_read_1_the_others_0_and_stopped_ones_none(server, topic):
    def expected(tables: dict[str, float]) -> Series:
        return {
            (table, "REALTIME", topic, str(p)): value
            for table, value in tables.items()
            for p in range(4)
        }

    both = expected({"githubEvents": 0, PAUSELESS: 1})
    wait_until(
        lambda: _gauge(server) == both, interval=0.2, what="every partition of both consuming"
    )
    for name in PARTITION_GAUGES:
        assert _tables_of(server, name) == {"githubEvents", PAUSELESS}, name
    text = generate_latest(server_registry(server)).decode()
    assert "pinot_server_llcControllerResponseHold_Count 0.0" in text
    assert "pinot_server_llcControllerResponseCommitSuccess_Count 0.0" in text

    set_table_enabled(context.current(), PAUSELESS, False)  # its replicas go OFFLINE

    standard = expected({"githubEvents": 0})
    wait_until(
        lambda: _gauge(server) == standard, interval=0.2, what="the pauseless consumers stopped"
    )
    for name in PARTITION_GAUGES:  # no frozen lag, no growing delay
        assert _tables_of(server, name) == {"githubEvents"}, name
    rows = "pinot_server_realtimeRowsConsumed_Count"
    assert _tables_of(server, rows) == {"githubEvents", PAUSELESS}
