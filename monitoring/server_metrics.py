"""An ingestion server's own Prometheus metrics, under Pinot's names and labels (reference §9.3).

Pinot exports these through the JMX exporter; the families below are what its `server.yml` rules
produce, so dashboards and alerts written for Pinot work unchanged:

- `pinot_server_realtimeRowsConsumed_Count{table,tableType,topic,partition}` and, without labels,
  the server-wide total (Pinot's meter per consumer client id and its global meter).
- `pinot_server_llcPartitionConsuming_Value{table,tableType,topic,partition}`: 1 while a
  partition's segment is being consumed (not while holding or committing).
- `pinot_server_realtimeIngestionOffsetLag_Value{table,tableType,partition}`: latest upstream
  offset minus the next offset to consume.
- `pinot_server_realtimeIngestionDelayMs_Value{table,tableType,partition}`: now minus the stream
  time of the last consumed message, 0 when the partition is caught up.
- `pinot_server_realtimeIngestionUpstreamOffset_Value`, `..._ConsumingOffset_Value` (same labels).
- `pinot_server_segmentBuildFailure_Count{table,tableType,topic,partition}`.
- `pinot_server_llcControllerResponse<Status>_Count` (e.g. `...ResponseHold_Count`): global.
`_Count` families are exposed untyped (a Prometheus counter would append `_total`).
The collector reads the live server at scrape time; nothing is double-booked.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric, UnknownMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from tables.domain.names import raw_table_name
from tables.server.instance import ServerInstance

__all__ = ["ServerCollector", "server_registry"]

PREFIX = "pinot_server_"


def _camel(status: str) -> str:
    return "".join(part.capitalize() for part in status.split("_"))


class ServerCollector(Collector):
    def __init__(self, instance: ServerInstance) -> None:
        self.instance = instance

    def collect(self) -> Iterator[Metric]:
        now_ms = int(time.time() * 1000)
        stats = sorted(self.instance.stats.values(), key=lambda s: (s.table, s.partition))
        client_labels = ["table", "tableType", "topic", "partition"]
        partition_labels = ["table", "tableType", "partition"]

        rows = UnknownMetricFamily(
            f"{PREFIX}realtimeRowsConsumed_Count", "Rows consumed", labels=client_labels
        )
        consuming = GaugeMetricFamily(
            f"{PREFIX}llcPartitionConsuming_Value", "1 while consuming", labels=client_labels
        )
        failures = UnknownMetricFamily(
            f"{PREFIX}segmentBuildFailure_Count", "Failed segment builds", labels=client_labels
        )
        lag = GaugeMetricFamily(
            f"{PREFIX}realtimeIngestionOffsetLag_Value", "Offset lag", labels=partition_labels
        )
        delay = GaugeMetricFamily(
            f"{PREFIX}realtimeIngestionDelayMs_Value", "Ingestion delay", labels=partition_labels
        )
        upstream = GaugeMetricFamily(
            f"{PREFIX}realtimeIngestionUpstreamOffset_Value",
            "Latest upstream offset",
            labels=partition_labels,
        )
        current = GaugeMetricFamily(
            f"{PREFIX}realtimeIngestionConsumingOffset_Value",
            "Next offset to consume",
            labels=partition_labels,
        )
        failed_builds = self.instance.committer.build_failures
        for s in stats:
            table, kind = raw_table_name(s.table), "REALTIME"
            client = [table, kind, s.topic, str(s.partition)]
            partition = [table, kind, str(s.partition)]
            rows.add_metric(client, s.rows_consumed)
            consuming.add_metric(client, 1 if s.consuming else 0)
            failures.add_metric(client, failed_builds.get((s.table, s.partition), 0))
            lag.add_metric(partition, s.offset_lag())
            delay.add_metric(partition, s.delay_ms(now_ms))
            upstream.add_metric(partition, s.latest_offset or 0)
            current.add_metric(partition, s.current_offset or 0)
        rows.add_sample(rows.name, {}, sum(s.rows_consumed for s in stats))
        yield from (rows, consuming, failures, lag, delay, upstream, current)
        for status, count in sorted(dict(self.instance.client.responses).items()):
            name = f"{PREFIX}llcControllerResponse{_camel(status)}_Count"
            family = UnknownMetricFamily(name, f"Controller answers {status}")
            family.add_metric([], count)
            yield family


def server_registry(instance: ServerInstance) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServerCollector(instance))
    return registry
