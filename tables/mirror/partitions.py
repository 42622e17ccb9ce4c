"""PartitionStatus, ConsumptionSample and table health of the mirror (part of `tables.mirror.sync`).

Contract:
- `live_index` turns what the servers published to Redis (`tables.live_state.read_all`) into
  `(table, segment) -> {server: PartitionLive}`; a server that is not reporting contributes nothing.
- `sync_partitions` runs on every sync for every synced table: the partition layout comes from the
  freshly read IdealState/ExternalView of changed tables (`TableShape`), or from the stored
  PartitionStatus rows of unchanged ones (no ZooKeeper read). For each REALTIME table and stream
  partition it joins the IS replicas of the consuming segment with their live state, runs
  `tables.domain.triage.triage_partition`, keeps `progressed_at` across syncs (now when the offset
  or the consuming segment changed), and writes only the rows whose values changed; rows of
  partitions that disappeared are deleted. Consuming segments no replica reports on, or with
  fewer replicas up than the table's replication, get their creation time from the mirrored
  segment (one batched query: STARTING vs NOT_REPORTING, the grace of UNDER_REPLICATED). The
  replicas' published since-times (`phaseSinceMs`, `completingSinceMs`) are kept in `replicas`,
  so pages recount a commit's duration at render time. A partition with no consuming segment keeps
  what its latest segment's replicas published (a failed consumer's `stoppedReason`) in
  `replicas`, for the ingestion doctor; the triage still sees no live state for it.
- Pauseless commits: each partition's newest COMMITTING segment (one batched query per chunk of
  tables) goes to the triage with its metadata mtime (commit start) and ExternalView states
  (`PartitionFacts.committing_segment`), so a commit running in the background reads as
  COMMITTING, not as a stall or a consumer error.
- The layout also has a row for every stream partition the table has no segment of yet
  (`MirroredTable.stream_partitions`: the healer's new-partition case, triaged as missing its
  consuming segment); such a row goes when the stream no longer has the partition.
- Each table's health (`triage.table_health`), max lags and rows/s are rolled up from its
  partitions and its segment counts, with `flags.never_committed_reasons` (tables
  whose segments are all CONSUMING, rows arriving: one query for their first segments); only
  changed rows are written.
- A disabled table (`MirroredTable.disabled`) is PAUSED, table and partitions, with the reason
  `DISABLED`: its OFFLINE replicas are neither errors nor a stall.
- One ConsumptionSample per partition with live figures, at most every `sample_s` seconds; samples
  older than `retention_s` are pruned.
- A row's `last_synced` is when it was last written (inserted or changed); unchanged rows are not
  rewritten: the last sync that confirmed them is their table's `last_synced` (see
  `tables.mirror.sync`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from tables.domain import triage
from tables.live_state import PartitionLive
from tables.mirror.bulk import DB_CHUNK, chunks, insert_rows, select_by_pairs, update_rows
from tables.mirror.flags import never_committed_reasons
from tables.mirror.tables import PartitionShape, TableShape
from tables.models import (
    HEALTH_RANK,
    ConsumptionSample,
    MirroredSegment,
    MirroredTable,
    PartitionStatus,
)

__all__ = ["PartitionResult", "live_index", "sync_partitions"]

PARTITION_FIELDS = [
    "consuming_segment", "latest_segment", "replicas", "current_offset", "upstream_offset",
    "records_lag", "time_lag_ms", "rows_per_s", "progressed_at", "stalled_s", "lost_offsets",
    "verdict", "verdict_detail", "health", "health_rank", "last_synced",
]  # fmt: skip
VALUE_FIELDS = [f for f in PARTITION_FIELDS if f != "last_synced"]  # what _partition_values gives
ROLLUP_FIELDS = [
    "health", "health_rank", "health_reason", "max_records_lag", "max_time_lag_ms", "rows_per_s",
]  # fmt: skip
DISABLED = "table disabled (HELIX_ENABLED=false): its servers hold every segment OFFLINE"
LIVE_KEYS = (
    "currentOffset", "upstreamOffset", "recordsLag", "availabilityLagMs", "rowsPerSecond",
    "consumerState", "phase", "lastConsumedMs", "updatedMs", "lostOffsets", "phaseSinceMs",
    "completingSinceMs", "stoppedReason", "holdReason",
)  # fmt: skip


@dataclass
class PartitionResult:
    partitions: int = 0
    partitions_written: int = 0
    tables_rolled_up: int = 0
    samples_written: int = 0
    samples_pruned: int = 0


def live_index(
    published: Mapping[str, list[PartitionLive] | None],
) -> dict[tuple[str, str], dict[str, PartitionLive]]:
    index: dict[tuple[str, str], dict[str, PartitionLive]] = {}
    for server, items in published.items():
        for item in items or ():
            index.setdefault((item.table, item.segmentName), {})[server] = item
    return index


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ms(moment: datetime | None) -> int | None:
    return None if moment is None else (moment - _EPOCH) // timedelta(milliseconds=1)


def _moment(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def _replica_live(item: PartitionLive) -> triage.ReplicaLive:
    return triage.ReplicaLive.from_published(item.to_dict())


class StoredPartition:
    """A PartitionStatus row as the sync compares and rewrites it (`pk`, `table_id`,
    `partition` and PARTITION_FIELDS as attributes; `last_synced` is only written, not read),
    read without a model instance: building 16,000 of those was a tenth of an unchanged sync."""

    __slots__ = ("pk", "table_id", "partition", *VALUE_FIELDS, "last_synced")

    def __init__(self, values: Sequence[Any]) -> None:
        for name, value in zip(self.__slots__, values, strict=True):
            setattr(self, name, value)


_LOADED = [name for name in StoredPartition.__slots__ if name != "last_synced"]  # only written


def _stored_rows(table_ids: Sequence[int]) -> list[StoredPartition]:
    rows = PartitionStatus.objects.filter(table_id__in=table_ids).order_by()
    return [StoredPartition((*v, None)) for v in rows.values_list(*_LOADED)]


def _stored_shapes(rows: Iterable[StoredPartition]) -> dict[int, PartitionShape]:
    return {
        row.partition: PartitionShape(
            consuming_segment=row.consuming_segment,
            latest_segment=row.latest_segment,
            replicas={r: str(v.get("state", "")) for r, v in (row.replicas or {}).items()},
        )
        for row in rows
    }


@dataclass(frozen=True)
class Committing:
    """A partition's newest COMMITTING segment (pauseless), as the triage needs it."""

    segment: str
    sequence: int
    since_ms: int | None
    states: dict[str, str]


def _partition_values(
    table: MirroredTable,
    partition: int,
    shape: PartitionShape,
    live: Mapping[str, PartitionLive],
    old: StoredPartition | None,
    now_ms: int,
    thresholds: triage.Thresholds,
    created_ms: int | None = None,
    committing: Committing | None = None,
) -> tuple[dict[str, Any], triage.PartitionVerdict]:
    mine = _reports(shape, live)
    shown = mine or {r: live[r] for r in shape.replicas if r in live}
    replicas_live = {r: _replica_live(item) for r, item in mine.items()}
    current = max(
        (i.currentOffset for i in mine.values() if i.currentOffset is not None), default=None
    )
    progressed_ms = triage.progressed_at(
        _ms(old.progressed_at) if old else None,
        old.current_offset if old else None,
        old.consuming_segment if old else "",
        current,
        shape.consuming_segment,
        now_ms,
    )
    facts = triage.PartitionFacts(
        partition=partition,
        consuming_segment=shape.consuming_segment,
        latest_segment=shape.latest_segment,
        ev_states=shape.replicas if shape.consuming_segment else {},
        live=replicas_live,
        pause=triage.PauseInfo(
            paused=table.paused,
            reason_code=table.pause_reason,
            comment=table.pause_comment,
            time=table.pause_time,
        ),
        partition_paused=partition in (table.paused_partitions or []),
        progressed_at_ms=progressed_ms,
        consuming_created_ms=created_ms,
        replication=table.replication,
        committing_segment=committing.segment if committing else "",
        committing_since_ms=committing.since_ms if committing else None,
        committing_states=committing.states if committing else {},
    )
    result = triage.triage_partition(facts, now_ms, thresholds)
    if table.disabled:  # its replicas are OFFLINE on purpose: not an error, not stalled
        paused = triage.Verdict.PAUSED
        result = replace(result, verdict=paused, detail=DISABLED, health=triage.Health.PAUSED)
    replicas: dict[str, dict[str, Any]] = {}
    for replica, state in shape.replicas.items():
        entry: dict[str, Any] = {"state": state}
        if replica in shown:
            published = shown[replica].to_dict()
            entry.update({key: published.get(key) for key in LIVE_KEYS})
        replicas[replica] = entry
    values = {
        "consuming_segment": shape.consuming_segment,
        "latest_segment": shape.latest_segment,
        "replicas": replicas,
        "current_offset": result.current_offset,
        "upstream_offset": result.upstream_offset,
        "records_lag": result.records_lag,
        "time_lag_ms": result.time_lag_ms,
        "rows_per_s": result.rows_per_s,
        "progressed_at": _moment(progressed_ms),
        "stalled_s": result.stalled_s,
        "lost_offsets": result.lost_offsets,
        "verdict": str(result.verdict),
        "verdict_detail": result.detail,
        "health": str(result.health),
        "health_rank": HEALTH_RANK[str(result.health)],
    }
    return values, result


def sync_partitions(
    tables: list[MirroredTable],
    shapes: Mapping[str, TableShape],
    live: Mapping[tuple[str, str], dict[str, PartitionLive]],
    now_ms: int,
    thresholds: triage.Thresholds,
    sample_s: float,
    retention_s: float,
) -> PartitionResult:
    """See the module docstring. `tables`: the synced table rows (changed ones already saved)."""
    out = PartitionResult()
    now = _moment(now_ms)
    ids = [t.pk for t in tables]
    stored: dict[int, dict[int, StoredPartition]] = {}
    updating: set[int] = set()
    committing: dict[tuple[int, int], Committing] = {}
    for id_chunk in chunks(ids, DB_CHUNK):
        _committing(id_chunk, committing)
        for row in _stored_rows(id_chunk):
            stored.setdefault(row.table_id, {})[row.partition] = row
        updating.update(
            MirroredSegment.objects.filter(table_id__in=id_chunk, display_state="UPDATING")
            .values_list("table_id", flat=True)
            .distinct()
        )

    creates: list[tuple] = []
    updates: list[StoredPartition] = []
    gone: list[int] = []
    table_updates: list[MirroredTable] = []
    sampled: list[tuple[MirroredTable, int, dict[str, Any]]] = []
    layouts = {t.pk: _layout(t, shapes, stored.get(t.pk, {})) for t in tables}
    created = _consuming_created(tables, layouts, live)
    table_verdicts: dict[int, list[tuple[int, triage.PartitionVerdict]]] = {}
    for table in tables:
        olds = stored.get(table.pk, {})
        layout = layouts[table.pk]
        verdicts: list[tuple[int, triage.PartitionVerdict]] = []
        for partition, shape in layout.items():
            old = olds.get(partition)
            found = live.get((table.name, shape.consuming_segment or shape.latest_segment), {})
            values, result = _partition_values(
                table,
                partition,
                shape,
                found,
                old,
                now_ms,
                thresholds,
                created.get((table.pk, shape.consuming_segment)),
                committing.get((table.pk, partition)),
            )
            verdicts.append((partition, result))
            if result.current_offset is not None:
                sampled.append((table, partition, values))
            if old is None:
                creates.append((table.pk, partition, now, *(values[f] for f in VALUE_FIELDS)))
            elif any(getattr(old, k) != v for k, v in values.items()):
                for key, value in values.items():
                    setattr(old, key, value)
                old.last_synced = now
                updates.append(old)
        gone.extend(row.pk for p, row in olds.items() if p not in layout)
        out.partitions += len(layout)
        table_verdicts[table.pk] = verdicts
    arriving = (
        (t, any(v.rows_per_s > 0 or v.records_lag > 0 for _, v in table_verdicts[t.pk]))
        for t in tables
    )
    never = never_committed_reasons(arriving, now_ms, thresholds.flush_factor)
    for table in tables:
        if _roll_up(table, table_verdicts[table.pk], table.pk in updating, never.get(table.pk, "")):
            table_updates.append(table)

    insert_rows(PartitionStatus, ["table_id", "partition", "last_synced", *VALUE_FIELDS], creates)
    update_rows(PartitionStatus, updates, PARTITION_FIELDS)
    for id_chunk in chunks(gone, DB_CHUNK):
        PartitionStatus.objects.filter(pk__in=id_chunk).delete()
    update_rows(MirroredTable, table_updates, ROLLUP_FIELDS)
    out.partitions_written = len(creates) + len(updates)
    out.tables_rolled_up = len(table_updates)
    out.samples_written = _sample(sampled, now, sample_s)
    out.samples_pruned, _ = ConsumptionSample.objects.filter(
        sampled_at__lt=now - timedelta(seconds=retention_s)
    ).delete()
    return out


def _committing(table_ids: Iterable[int], found: dict[tuple[int, int], Committing]) -> None:
    """Each partition's newest COMMITTING segment of `table_ids`, into `found` (one query)."""
    rows = MirroredSegment.objects.filter(
        table_id__in=list(table_ids), status="COMMITTING", partition__isnull=False
    ).values_list(
        "table_id", "partition", "sequence", "name", "metadata_mtime_ms", "external_states"
    )
    for table_id, partition, sequence, name, mtime_ms, states in rows:
        key, rank = (table_id, partition), sequence if sequence is not None else -1
        if key not in found or found[key].sequence < rank:
            ev = {str(k): str(v) for k, v in (states or {}).items()}
            found[key] = Committing(name, rank, mtime_ms, ev)


def _reports(shape: PartitionShape, live: Mapping[str, PartitionLive]) -> dict[str, PartitionLive]:
    """What the IdealState replicas of the partition's consuming segment published (none when it
    has no consuming segment); servers outside the IdealState do not count."""
    if not shape.consuming_segment:
        return {}
    return {r: live[r] for r in shape.replicas if r in live}


def _layout(
    table: MirroredTable, shapes: Mapping[str, TableShape], olds: Mapping[int, StoredPartition]
) -> dict[int, PartitionShape]:
    """The table's stream partitions: from a fresh read when it changed, else as stored; plus
    the stream's partitions it has no segment of (see the module docstring)."""
    if table.table_type != "REALTIME":
        return {}
    count = table.stream_partitions
    if table.name in shapes:
        layout = dict(shapes[table.name].partitions)
    else:
        layout = {
            p: shape
            for p, shape in _stored_shapes(olds.values()).items()
            if shape.latest_segment or count is None or p < count
        }
    for partition in range(count or 0):
        layout.setdefault(partition, PartitionShape("", "", {}))
    return dict(sorted(layout.items()))


def _consuming_created(
    tables: list[MirroredTable],
    layouts: Mapping[int, Mapping[int, PartitionShape]],
    live: Mapping[tuple[str, str], dict[str, PartitionLive]],
) -> dict[tuple[int, str], int]:
    """(table id, segment) -> creation time (ms) of every consuming segment no server reports on
    or with fewer replicas up than the table's replication (STARTING, and the grace of
    UNDER_REPLICATED): the ZK metadata's `segment.creation.time`, else the minute in its name."""
    wanted = {
        (table.pk, shape.consuming_segment)
        for table in tables
        for shape in layouts[table.pk].values()
        if shape.consuming_segment
        and (
            not _reports(shape, live.get((table.name, shape.consuming_segment), {}))
            or triage.replicas_up(shape.replicas) < table.replication
        )
    }
    out: dict[tuple[int, str], int] = {}
    fields = ("table_id", "name", "creation_time_ms", "created_ms")
    rows = select_by_pairs(MirroredSegment, fields, "table_id", "name", sorted(wanted))
    for table_id, name, creation_ms, named_ms in rows:
        when = creation_ms if creation_ms is not None else named_ms
        if (table_id, name) in wanted and when is not None:
            out[(table_id, name)] = when
    return out


def _roll_up(
    table: MirroredTable,
    verdicts: list[tuple[int, triage.PartitionVerdict]],
    updating: bool,
    never_committed: str = "",
) -> bool:
    """Set the table's health and figures from its partitions; True when anything changed."""
    health, reason = triage.table_health(
        verdicts,
        paused=table.paused,
        error_segments=table.error_segments,
        percent=table.percent_available,
        updating=updating,
        never_committed=never_committed,
    )
    if table.disabled:
        health, reason = triage.Health.PAUSED, DISABLED
    values = {
        "health": str(health),
        "health_rank": HEALTH_RANK[str(health)],
        "health_reason": reason,
        "max_records_lag": max((v.records_lag for _, v in verdicts), default=0),
        "max_time_lag_ms": max((v.time_lag_ms for _, v in verdicts), default=0),
        "rows_per_s": float(sum(v.rows_per_s for _, v in verdicts)),
    }
    changed = any(getattr(table, k) != v for k, v in values.items())
    for key, value in values.items():
        setattr(table, key, value)
    return changed


def _sample(
    sampled: list[tuple[MirroredTable, int, dict[str, Any]]], now: datetime, sample_s: float
) -> int:
    if not sampled:
        return 0
    recent = set(
        ConsumptionSample.objects.filter(
            sampled_at__gt=now - timedelta(seconds=sample_s)
        ).values_list("table_id", "partition")
    )
    rows = [
        ConsumptionSample(
            table=table,
            partition=partition,
            sampled_at=now,
            current_offset=values["current_offset"],
            records_lag=values["records_lag"],
            time_lag_ms=values["time_lag_ms"],
            rows_per_s=values["rows_per_s"],
        )
        for table, partition, values in sampled
        if (table.pk, partition) not in recent
    ]
    ConsumptionSample.objects.bulk_create(rows, batch_size=DB_CHUNK)
    return len(rows)
