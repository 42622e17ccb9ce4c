"""The per-partition families of the controller-side `/metrics` (`monitoring.controller_metrics`'s
query 2), from the mirror's PartitionStatus rows of the REALTIME tables joined to their tables: one
query, whatever the number of tables or partitions, and two more (`monitoring.stream_offsets`)
only when some partition is QUIET: paused, or no replica reports its offsets (no consumer, servers
down or deaf to ZooKeeper). A quiet partition's replicas' figures are frozen or missing, so its
upstream offset is the stream's latest (read at scrape time, cached a few seconds) and its
consumed offset where consumption stands or resumes (the segment metadata's end offset of its
latest DONE segment, else its consuming segment's start offset, or the replicas' figure if
higher).

- `pinot_controller_maxRecordsLag_Value` and `..._maxRecordAvailabilityLagMs_Value`
  `{table,tableType,partition,paused}` (Pinot's RealtimeConsumerMonitor gauges, plus `paused`):
  the replicas' figures, and for a quiet partition upstream minus consumed (its availability lag
  only while the replicas' is known); absent while unknown, never a made-up 0. A paused
  partition keeps its lag series with `paused="true"`: the rows waiting upstream, so alerts leave
  it out with `paused="false"` and nothing jumps on resume.
- `pinot_console_partition_consumed_offset` and `..._upstream_offset{table,tableType,partition}`:
  the most advanced replica's next offset and the stream's latest offset (as above for quiet
  partitions), one series per partition, so `rate()` counts each row once (not once per replica)
  and "rows arrive, nothing is consumed" is `delta(upstream) > 0 and delta(consumed) <= 0`.
  Absent while unknown.
- `pinot_console_partition_paused{table,tableType,partition}`: 1 while the table or the partition
  (`pausedPartitions`) is paused, else 0, for every partition.
- `pinot_console_partition_replicas_up` (replicas of the partition's consuming, else latest,
  segment ONLINE or CONSUMING in the ExternalView on a live server: a stale view of a dead server
  does not count) and `..._replicas_expected` (the table's replication), per partition.
The caller gets, per REALTIME table, its partitions, its paused partitions and those of them
without a CONSUMING segment (`PartitionFacts`), for the durable counters' zeros,
`pinot_console_paused_partitions` and `missingConsumingSegmentTotalCount`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import Metric

from monitoring.definitions import DEFINITIONS, PARTITION_GAUGES, REALTIME
from monitoring.stream_offsets import Quiet, quiet_offsets
from tables.models import PartitionStatus

__all__ = ["UP_STATES", "PartitionFacts", "partition_families"]

UP_STATES = frozenset({"ONLINE", "CONSUMING"})
OFFSETS = {"partitionConsumedOffset": 0, "partitionUpstreamOffset": 1}
REPLICAS = ("partitionReplicasUp", "partitionReplicasExpected")


@dataclass
class PartitionFacts:
    """What the table-level families need from the partitions (per raw REALTIME table)."""

    partitions: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    paused: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    paused_missing_consuming: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def _replicas_up(replicas: dict[str, dict[str, object]] | None, live: set[str]) -> int:
    return sum(
        1
        for server, figures in (replicas or {}).items()
        if server in live and isinstance(figures, dict) and figures.get("state") in UP_STATES
    )


def partition_families(live_servers: set[str], facts: PartitionFacts) -> Iterator[Metric]:
    """Query 2 (and `monitoring.stream_offsets`' two for quiet partitions): every partition's
    figures (see the module docstring); fills `facts`."""
    rows = [
        Row(*values)
        for values in PartitionStatus.objects.filter(table__table_type=REALTIME)
        .order_by("table__raw_name", "partition")
        .values_list(
            "table_id",
            "table__raw_name",
            "table__paused",
            "table__paused_partitions",
            "table__replication",
            "partition",
            "consuming_segment",
            "latest_segment",
            "replicas",
            "current_offset",
            "upstream_offset",
            *PARTITION_GAUGES.values(),
        )
    ]
    quiet = quiet_offsets([_quiet(row) for row in rows if _is_quiet(row)])
    keys = (*PARTITION_GAUGES, *OFFSETS, "partitionPaused", *REPLICAS)
    families = {key: DEFINITIONS[key].family() for key in keys}
    for row in rows:
        paused = row.is_paused()
        facts.partitions[row.raw].append(row.partition)
        facts.paused[row.raw] += paused
        facts.paused_missing_consuming[row.raw] += paused and not row.consuming
        labels = [row.raw, REALTIME, str(row.partition)]
        families["partitionPaused"].add_metric(labels, 1 if paused else 0)
        up = _replicas_up(row.replicas, live_servers)
        families["partitionReplicasUp"].add_metric(labels, up)
        families["partitionReplicasExpected"].add_metric(labels, row.replication)
        current, upstream, records_lag = _offsets(row, quiet.get((row.table_id, row.partition)))
        for key, value in zip(OFFSETS, (current, upstream), strict=True):
            if value is not None:
                families[key].add_metric(labels, float(value))
        lag_labels = [*labels, "true" if paused else "false"]
        if records_lag is not None:
            families["maxRecordsLag"].add_metric(lag_labels, float(records_lag))
        if row.upstream is not None:  # the replicas' time lag is known
            families["maxRecordAvailabilityLagMs"].add_metric(lag_labels, float(row.time_lag))
    yield from families.values()


@dataclass(frozen=True)
class Row:
    """One PartitionStatus row of query 2, with its table's columns."""

    table_id: int
    raw: str
    table_paused: bool
    paused_list: list[int] | None
    replication: int
    partition: int
    consuming: str
    latest: str
    replicas: dict[str, dict[str, object]] | None
    current: int | None
    upstream: int | None
    records_lag: int
    time_lag: int

    def is_paused(self) -> bool:
        return bool(self.table_paused) or self.partition in (self.paused_list or [])


def _is_quiet(row: Row) -> bool:
    """Paused, or no replica reports on it: its replicas' figures are frozen or missing."""
    return row.is_paused() or row.current is None or row.upstream is None


def _quiet(row: Row) -> Quiet:
    return Quiet(row.table_id, row.partition, row.consuming or row.latest)


def _offsets(
    row: Row, quiet: tuple[int | None, int | None] | None
) -> tuple[int | None, int | None, int | None]:
    """(consumed, upstream, records lag) of a partition: the replicas' figures, completed for a
    quiet partition by the stream's latest offset and where consumption stands or resumes."""
    if quiet is None:
        return row.current, row.upstream, row.records_lag if row.upstream is not None else None
    stood, latest = quiet
    known = [offset for offset in (row.current, stood) if offset is not None]
    current = max(known) if known else None
    upstream = latest if latest is not None else row.upstream
    if upstream is None or current is None:
        return current, upstream, None  # the lag is unknown: no sample, never a made-up 0
    return current, upstream, max(upstream - current, 0)
