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
- `pinot_server_pauselessConsumptionEnabled_Value{table,tableType,topic,partition}`: Pinot sets
  it to 1 when a pauseless committer starts a commit; here, for every partition the server has a
  consumer of, 1 when the partition's newest consumer (highest sequence number) runs in pauseless
  mode (`ConsumingSegment.pauseless`: the table's `pauselessConsumptionEnabled` when that consumer
  started, which decides how it commits), else 0. A partition with no consumer here (its segments
  all ONLINE, none hosted, or its consumer failed) has no series.
- `pinot_server_llcControllerResponse<Status>_Count` (e.g. `...ResponseHold_Count`): global,
  one family per protocol status (`tables.domain.completion_response.Status`), 0 until the first
  answer, so a restarted server's series read 0 instead of vanishing.
The per-partition gauges (`llcPartitionConsuming`, the offset lag, the ingestion delay, the
upstream and consuming offsets) are there only for partitions this server consumes now (a
consumer CONSUMING, HOLDING, CATCHING_UP or COMMITTING): a partition it no longer consumes
(committed and handed over, paused, moved away) loses them, instead of keeping a frozen lag and a
growing delay. The `_Count` meters stay for every partition seen since the server started.
`_Count` families are exposed untyped (a Prometheus counter would append `_total`). Names, help
and labels are `monitoring.definitions.SERVER_DEFINITIONS`.
The collector reads the live server at scrape time; nothing is double-booked.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import Metric, UnknownMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from monitoring.definitions import BUILD_FAILURE, SERVER_DEFINITIONS
from tables.domain.completion_response import Status
from tables.domain.names import LLCSegmentName, raw_table_name
from tables.server.consumer import Phase
from tables.server.instance import ServerInstance

__all__ = ["ServerCollector", "server_registry"]

PREFIX = "pinot_server_"
CONSUMING = "llcPartitionConsuming"
PAUSELESS = "pauselessConsumptionEnabled"
FAILED = Phase.ERROR
ACTIVE = frozenset({Phase.CONSUMING, Phase.HOLDING, Phase.CATCHING_UP, Phase.COMMITTING})


def _camel(status: str) -> str:
    return "".join(part.capitalize() for part in status.split("_"))


class ServerCollector(Collector):
    def __init__(self, instance: ServerInstance) -> None:
        self.instance = instance

    def collect(self) -> Iterator[Metric]:
        now_ms = int(time.time() * 1000)
        stats = sorted(self.instance.stats.values(), key=lambda s: (s.table, s.partition))
        families = {key: d.family() for key, d in SERVER_DEFINITIONS.items()}
        rows, consuming, failures = (
            families[k] for k in ("realtimeRowsConsumed", CONSUMING, BUILD_FAILURE)
        )
        lag, delay = families["realtimeIngestionOffsetLag"], families["realtimeIngestionDelayMs"]
        upstream = families["realtimeIngestionUpstreamOffset"]
        current = families["realtimeIngestionConsumingOffset"]
        failed_builds = self.instance.committer.build_failures
        newest = self._newest_consumers()
        active = {(t, p) for (t, _topic, p), (_seq, _mode, phase) in newest.items() if phase}
        for s in stats:
            table, kind = raw_table_name(s.table), "REALTIME"
            client = [table, kind, s.topic, str(s.partition)]
            partition = [table, kind, str(s.partition)]
            rows.add_metric(client, s.rows_consumed)
            failures.add_metric(client, failed_builds.get((s.table, s.partition), 0))
            if (s.table, s.partition) not in active:
                continue  # no longer consumed here: no frozen lag, no growing delay
            consuming.add_metric(client, 1 if s.consuming else 0)
            lag.add_metric(partition, s.offset_lag())
            delay.add_metric(partition, s.delay_ms(now_ms))
            upstream.add_metric(partition, s.latest_offset or 0)
            current.add_metric(partition, s.current_offset or 0)
        rows.add_sample(rows.name, {}, sum(s.rows_consumed for s in stats))
        pauseless = families[PAUSELESS]
        for (table, topic, partition), (_seq, enabled, _active) in sorted(newest.items()):
            pauseless.add_metric(
                [raw_table_name(table), "REALTIME", topic, str(partition)], 1 if enabled else 0
            )
        yield from families.values()
        responses = {str(status): 0 for status in Status}
        responses.update(dict(self.instance.client.responses))
        for status, count in sorted(responses.items()):
            name = f"{PREFIX}llcControllerResponse{_camel(status)}_Count"
            family = UnknownMetricFamily(name, f"Controller answers {status}")
            family.add_metric([], count)
            yield family

    def _newest_consumers(self) -> dict[tuple[str, str, int], tuple[int, bool, bool]]:
        """(table, topic, partition) -> (sequence number, pauseless, still consuming) of the
        partition's newest consumer here (highest sequence number); partitions without a
        consumer (or with a failed one only) are left out. Read from the replicas the server
        holds, as its admin API reads them."""
        newest: dict[tuple[str, str, int], tuple[int, bool, bool]] = {}
        for table in self.instance.hosted_tables():
            for segment, replica in (self.instance.replicas_of(table) or {}).items():
                name = LLCSegmentName.parse(segment)
                if replica.consumer is None or name is None or replica.consumer.phase is FAILED:
                    continue
                spec = replica.consumer.spec
                key = (table, spec.topic, spec.partition)
                if key not in newest or newest[key][0] < name.sequence_number:
                    active = replica.consumer.phase in ACTIVE
                    newest[key] = (name.sequence_number, spec.pauseless, active)
        return newest


def server_registry(instance: ServerInstance) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServerCollector(instance))
    return registry
