"""Pinot's SegmentStatusChecker over the database mirror (the `tables.segment_status_checker` task).

`check_tables(now_ms, wait_for_push_ms, redis_url, table=None)` checks every mirrored table (or
the one named, raw or with type) with `tables.domain.status_checks.check_table` and stores the
result in its `TableStatusCheck` row (one per table; `/metrics` exposes it). Per table:

- The IdealState, ExternalView and segment metadata come from the mirror (`MirroredSegment`:
  IdealState and ExternalView states, whether the metadata znode exists, its mtime, the creation
  time and end offset); the IdealState's replicas are the table's replication. Replicas count as
  up only on instances the mirror has as enabled (Pinot's `isServerQueryable`).
- A table whose IdealState the mirror does not have, or that is disabled (HELIX_ENABLED=false:
  its segments are OFFLINE on purpose), loses its row (Pinot removes its gauges).
- For a REALTIME table, the stream is asked, as Pinot's MissingConsumingSegmentFinder does: its
  partition count, and the largest offset of each partition that has no CONSUMING segment in the
  IdealState (one Redis call for the count, one per such partition). When the stream cannot be
  read, what the mirror last saw stands in: the partition count of the last sync
  (`MirroredTable.stream_partitions`) and the largest offsets the servers last reported
  (`PartitionStatus.upstream_offset`, known only while a replica consumes); Pinot's fallback
  applies to the partitions whose offset is unknown. `stream_known` on the row says whether the
  stream's partitions were known (from the stream or the mirror).
- A table whose check fails loses its row (as Pinot removes the gauges of a table it could not
  check) and is named in the summary; the other tables are still checked. Database errors are not
  caught: the task fails and is counted.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from tables.domain import status_checks
from tables.domain.names import table_type_of
from tables.domain.status_checks import SegmentFacts, StreamFacts, TableFacts
from tables.domain.table_config import TableConfig
from tables.models import (
    MirroredInstance,
    MirroredSegment,
    MirroredTable,
    PartitionStatus,
    TableStatusCheck,
)
from tables.streams import StreamError, provider_for

__all__ = ["CheckSummary", "check_tables", "stream_facts"]

log = logging.getLogger(__name__)

REALTIME = "REALTIME"
SEGMENT_COLUMNS = (
    "name", "partition", "sequence", "ideal_states", "external_states", "metadata_version",
    "metadata_mtime_ms", "creation_time_ms", "end_offset",
)  # fmt: skip
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class CheckSummary:
    checked: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)  # no IdealState in the mirror
    failed: dict[str, str] = field(default_factory=dict)  # table -> error

    def as_dict(self) -> dict[str, object]:
        return {"checked": len(self.checked), "removed": self.removed, "failed": self.failed}


def _offset(text: str) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _segments(table: MirroredTable) -> list[SegmentFacts]:
    rows = MirroredSegment.objects.filter(table=table).values_list(*SEGMENT_COLUMNS)
    return [
        SegmentFacts(
            name=name,
            ideal=ideal or {},
            external=external or {},
            has_metadata=version >= 0,
            mtime_ms=mtime,
            creation_time_ms=created,
            partition=partition,
            sequence=sequence,
            end_offset=_offset(end),
        )
        for name, partition, sequence, ideal, external, version, mtime, created, end in rows
    ]


def stream_facts(
    config: Mapping[str, object], consuming: Collection[int], redis_url: str
) -> StreamFacts | None:
    """The stream's partitions and the largest offset of those not in `consuming`, from the
    table config's first stream; None when the stream cannot be read."""
    stream_config = TableConfig(rest=dict(config)).stream_config
    if not stream_config:
        return None
    try:
        provider = provider_for(stream_config, redis_url)
    except StreamError as exc:
        log.info("status check: no stream for %s: %s", config.get("tableName"), exc)
        return None
    try:
        count = provider.partition_count()
        largest = {p: provider.latest_offset(p) for p in range(count) if p not in consuming}
    except StreamError as exc:
        log.info("status check: stream of %s not read: %s", config.get("tableName"), exc)
        return None
    finally:
        provider.close()
    return StreamFacts(frozenset(range(count)), largest)


def _facts(table: MirroredTable, queryable: Collection[str], redis_url: str) -> TableFacts:
    segments = _segments(table)
    realtime = table.table_type == REALTIME
    stream = None
    if realtime:
        consuming = {
            s.partition
            for s in segments
            if s.partition is not None and "CONSUMING" in s.ideal.values()
        }
        stream = stream_facts(table.config or {}, consuming, redis_url)
    if stream is None:  # what the mirror last saw: the partition count, the servers' offsets
        count = table.stream_partitions
        reported = PartitionStatus.objects.filter(table=table, upstream_offset__isnull=False)
        stream = StreamFacts(
            frozenset(range(count)) if count else None,
            dict(reported.values_list("partition", "upstream_offset")),
        )
    return TableFacts(
        table=table.name,
        segments=segments,
        paused=table.paused,
        replicas=table.replication,
        realtime=realtime,
        queryable=queryable,
        stream=stream,
    )


def _store(
    table: MirroredTable, facts: TableFacts, result: status_checks.StatusCheck, now_ms: int
) -> None:
    missing = result.missing
    TableStatusCheck.objects.update_or_create(
        table=table,
        defaults={
            "checked_at": _EPOCH + timedelta(milliseconds=now_ms),
            "segments_in_error_state": result.segments_in_error_state,
            "percent_segments_available": result.percent_segments_available,
            "segments_with_less_replicas": result.segments_with_less_replicas,
            "number_of_replicas": result.number_of_replicas,
            "percent_of_replicas": result.percent_of_replicas,
            "table_consumption_paused": result.table_consumption_paused,
            "missing_consuming_total": missing.total if missing else None,
            "missing_consuming_new_partitions": missing.new_partitions if missing else None,
            "missing_consuming_max_minutes": missing.max_duration_minutes if missing else None,
            "stream_known": facts.stream.partitions is not None,
            "details": result.details(),
        },
    )


def check_tables(
    now_ms: int, wait_for_push_ms: int, redis_url: str, table: str | None = None
) -> CheckSummary:
    """Check every mirrored table, or `table` (raw or with type); see the module docstring."""
    summary = CheckSummary()
    rows = MirroredTable.objects.order_by("name")
    if table:
        names = [table] if table_type_of(table) else [f"{table}_REALTIME", f"{table}_OFFLINE"]
        rows = rows.filter(name__in=names)
    queryable = set(MirroredInstance.objects.filter(enabled=True).values_list("name", flat=True))
    for row in rows:
        if row.idealstate_version < 0 or row.disabled:  # Pinot skips a disabled table too
            TableStatusCheck.objects.filter(table=row).delete()
            summary.removed.append(row.name)
            continue
        try:
            facts = _facts(row, queryable, redis_url)
            result = status_checks.check_table(facts, now_ms, wait_for_push_ms)
        except (ValueError, TypeError, StreamError) as exc:  # a malformed mirror row or config
            log.exception("status check of %s failed", row.name)
            TableStatusCheck.objects.filter(table=row).delete()
            summary.failed[row.name] = f"{type(exc).__name__}: {exc}"
            continue
        _store(row, facts, result, now_ms)
        summary.checked.append(row.name)
    return summary
