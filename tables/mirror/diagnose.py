"""The ingestion doctor over the database mirror, and the repairs the mirror asks the healer for.

- `diagnose_statuses(statuses, now_ms=None) -> {(table id, partition): Diagnosis}`: the doctor
  (`tables.domain.doctor.diagnose`) for PartitionStatus rows whose `table` is loaded, in a fixed
  number of queries whatever their count: the segments the healer's decisions depend on
  (`read_model.doctor_segments`), the tables' last healing runs, the live servers and the
  cluster's guard length (`MirrorState.max_completion_ms`), one query each.
- `diagnose_partition(table, number, status)`: the same for one partition, also when the mirror
  has segments of it but no PartitionStatus row (`status` None).
- `due_repairs(tables, now_ms, max_completion_ms) -> {table name: [reason, ...]}`: what a healing
  run would repair now in each REALTIME table (`tables.domain.doctor_facts.outlook` over the
  mirror's facts; a paused table's consuming repairs are left out, as the healer skips them, and
  ERROR resets count only with SEGMENT_ERROR_AUTO_RESET). `tables.mirror.sync` requests a run of
  each such table (`tables.healing_triggers`). A few queries per 500 tables.
Settings read here: HEALING_TRIGGER_FROM_MIRROR, SEGMENT_ERROR_AUTO_RESET,
PARTIAL_OFFLINE_REPLICA_REPAIR_ENABLED and REALTIME_SEGMENT_VALIDATION_FREQUENCY_SECONDS (the next
scheduled run is the last scheduled run's start plus that period). Read-only: no ZooKeeper.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import QuerySet

from tables.domain.doctor import (
    Diagnosis,
    HealerTiming,
    PartitionView,
    ReplicaReport,
    SegmentView,
    custom_map,
    diagnose,
    outlook,
)
from tables.domain.segment_metadata import CUSTOM_MAP
from tables.mirror import read_model
from tables.mirror.bulk import DB_CHUNK, chunks
from tables.models import MirroredSegment, MirroredTable, PartitionStatus

__all__ = [
    "diagnose_partition",
    "diagnose_statuses",
    "due_repairs",
    "healer_timing",
    "segment_view",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
Key = tuple[int, int]


def _ms(moment: datetime | None) -> int | None:
    return None if moment is None else (moment - _EPOCH) // timedelta(milliseconds=1)


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) else None


def segment_view(row: MirroredSegment | SegmentRow) -> SegmentView:
    """A mirrored segment as the doctor sees it (its custom.map only when `metadata` is loaded)."""
    loaded = "metadata" not in row.get_deferred_fields()
    metadata = row.metadata if loaded and isinstance(row.metadata, dict) else {}
    return SegmentView(
        row.name,
        row.status,
        row.start_offset,
        row.end_offset,
        row.metadata_mtime_ms,
        dict(row.ideal_states or {}),
        dict(row.external_states or {}),
        custom_map(metadata.get(CUSTOM_MAP)),
    )


def _unassigned(table: MirroredTable) -> list[SegmentView]:
    out = []
    for item in table.unassigned_segments or []:
        if isinstance(item, dict) and item.get("name"):
            out.append(
                SegmentView(
                    str(item["name"]),
                    str(item.get("status") or ""),
                    str(item.get("startOffset") or ""),
                    str(item.get("endOffset") or ""),
                    _int(item.get("mtimeMs")),
                )
            )
    return out


def _reports(replicas: Mapping[str, Any]) -> list[ReplicaReport]:
    out = []
    for server, entry in sorted(replicas.items()):
        if not isinstance(entry, dict) or _int(entry.get("updatedMs")) is None:
            continue
        out.append(
            ReplicaReport(
                server,
                str(entry.get("phase") or ""),
                str(entry.get("consumerState") or ""),
                _int(entry.get("currentOffset")),
                _int(entry.get("upstreamOffset")),
                _int(entry.get("lostOffsets")) or 0,
                str(entry.get("stoppedReason") or ""),
                _int(entry.get("updatedMs")),
            )
        )
    return out


def _pause_text(table: MirroredTable) -> str:
    if not table.paused:
        return ""
    words = [table.pause_reason or "ADMINISTRATIVE"]
    since = int(table.pause_time) if table.pause_time.isdigit() else None
    if since is not None:
        words.append(f"since {datetime.fromtimestamp(since / 1000, UTC):%Y-%m-%d %H:%M:%S} UTC")
    text = " ".join(words)
    return f"{text}: {table.pause_comment}" if table.pause_comment else text


def _paused_partitions(table: MirroredTable) -> set[int]:
    return {p for p in (_int(x) for x in table.paused_partitions or []) if p is not None}


def _view(
    table: MirroredTable,
    number: int,
    status: PartitionStatus | None,
    segments: Sequence[SegmentView],
    live: frozenset[str] | None,
) -> PartitionView:
    replicas = status.replicas if status is not None and isinstance(status.replicas, dict) else {}
    return PartitionView(
        table=table.name,
        partition=number,
        segments=tuple(segments),
        replicas={
            server: str(entry.get("state") or "") if isinstance(entry, dict) else ""
            for server, entry in replicas.items()
        },
        reports=tuple(_reports(replicas)),
        verdict=status.verdict if status is not None else "",
        verdict_detail=status.verdict_detail if status is not None else "",
        table_paused=table.paused,
        partition_paused=number in _paused_partitions(table),
        pause_text=_pause_text(table),
        stream_partitions=table.stream_partitions,
        stream_error=table.stream_error,
        live_servers=live,
        pauseless=table.pauseless,
    )


def _settings() -> dict[str, bool]:
    return {
        "error_auto_reset": bool(getattr(settings, "SEGMENT_ERROR_AUTO_RESET", True)),
        "partial_offline_repair": bool(
            getattr(settings, "PARTIAL_OFFLINE_REPLICA_REPAIR_ENABLED", False)
        ),
    }


def healer_timing(
    now_ms: int, guard_ms: int, runs: tuple[datetime, datetime | None] | None
) -> HealerTiming:
    period_s = float(getattr(settings, "REALTIME_SEGMENT_VALIDATION_FREQUENCY_SECONDS", 0) or 0)
    last_ms = _ms(runs[0]) if runs else None
    scheduled = _ms(runs[1]) if runs else None
    next_ms = None
    if scheduled is not None and period_s > 0:
        next_ms = scheduled + int(period_s * 1000)
        next_ms = next_ms if next_ms >= now_ms else None  # late: beat is not running it
    return HealerTiming(
        now_ms=now_ms,
        max_completion_ms=guard_ms,
        mirror_triggers=bool(settings.HEALING_TRIGGER_FROM_MIRROR),
        last_run_ms=last_ms,
        next_run_ms=next_ms,
        **_settings(),
    )


def _now_ms() -> int:
    return int(time.time() * 1000)


def _segments_of(
    tables: Iterable[MirroredTable], wanted: Mapping[int, Collection[int]], latest: Collection[str]
) -> dict[Key, list[SegmentView]]:
    found: dict[Key, list[SegmentView]] = defaultdict(list)
    rows = read_model.doctor_segments(
        list(wanted), partitions=wanted, latest=latest, with_metadata=True
    )
    for row in rows:
        if row.partition is not None:
            found[(row.table_id, row.partition)].append(segment_view(row))
    for table in tables:
        for view in _unassigned(table):
            if view.partition is not None and view.partition in wanted.get(table.pk, ()):
                found[(table.pk, view.partition)].append(view)
    return found


def diagnose_statuses(
    statuses: Sequence[PartitionStatus], now_ms: int | None = None
) -> dict[Key, Diagnosis]:
    """See the module docstring."""
    if not statuses:
        return {}
    now_ms = _now_ms() if now_ms is None else now_ms
    tables = {s.table_id: s.table for s in statuses}
    wanted: dict[int, set[int]] = defaultdict(set)
    for status in statuses:
        wanted[status.table_id].add(status.partition)
    latest = {s.latest_segment for s in statuses if s.latest_segment}
    segments = _segments_of(tables.values(), wanted, latest)
    runs = read_model.last_healing_runs([t.name for t in tables.values()])
    live = read_model.live_servers()
    guard = read_model.max_completion_ms()
    out = {}
    for status in statuses:
        table, key = status.table, (status.table_id, status.partition)
        view = _view(table, status.partition, status, segments.get(key, []), live)
        out[key] = diagnose(view, healer_timing(now_ms, guard, runs.get(table.name)))
    return out


def diagnose_partition(
    table: MirroredTable, number: int, status: PartitionStatus | None, now_ms: int | None = None
) -> Diagnosis:
    """See the module docstring."""
    if status is not None:
        status.table = table
        return diagnose_statuses([status], now_ms)[(table.pk, number)]
    now_ms = _now_ms() if now_ms is None else now_ms
    segments = _segments_of([table], {table.pk: {number}}, ())
    runs = read_model.last_healing_runs([table.name])
    view = _view(table, number, None, segments.get((table.pk, number), []), None)
    return diagnose(
        view, healer_timing(now_ms, read_model.max_completion_ms(), runs.get(table.name))
    )


class SegmentRow:
    """A MirroredSegment row of `read_model.DOCTOR_SEGMENT_FIELDS` (by `pk` and `table_id`) read
    without a model instance, for `due_repairs` over every table; `segment_view` takes it like a
    model row whose `metadata` is deferred."""

    __slots__ = ("pk", "table_id", *(f for f in read_model.DOCTOR_SEGMENT_FIELDS if f != "table"))

    def __init__(self, values: Sequence[Any]) -> None:
        for name, value in zip(self.__slots__, values, strict=True):
            setattr(self, name, value)

    def get_deferred_fields(self) -> set[str]:
        return {"metadata"}


def _light(rows: QuerySet[MirroredSegment]) -> list[SegmentRow]:
    return [SegmentRow(v) for v in rows.values_list(*SegmentRow.__slots__)]


def _consuming_normally(rows: Sequence[SegmentRow], partial_offline_repair: bool) -> bool:
    """The partition's latest segment (one, highest sequence) is IN_PROGRESS with a CONSUMING
    replica: no consuming repair can be due (the healer's case 2, or healthy)."""
    top = max(r.sequence or 0 for r in rows)
    latest = [r for r in rows if (r.sequence or 0) == top]
    if len(latest) != 1 or latest[0].status != "IN_PROGRESS":
        return False
    states = (latest[0].ideal_states or {}).values()
    return "CONSUMING" in states and not (partial_offline_repair and "OFFLINE" in states)


def _table_due(
    table: MirroredTable,
    rows: Iterable[SegmentRow],
    now_ms: int,
    max_completion_ms: int,
    options: Mapping[str, bool],
) -> list[str]:
    """What a run would repair now in `table`. Partitions whose latest segment consumes normally
    (found from the rows' partition and sequence columns) are left out of the consuming plan,
    which then costs only the partitions in trouble; their ERROR replicas still count."""
    by_partition: dict[int, list[SegmentRow]] = defaultdict(list)
    for row in rows:
        if row.partition is not None and row.sequence is not None:
            by_partition[row.partition].append(row)
    unassigned = _unassigned(table)
    pending = {view.partition for view in unassigned}
    normal = {
        p
        for p, found in by_partition.items()
        if p not in pending and _consuming_normally(found, options["partial_offline_repair"])
    }
    segments = [
        segment_view(r) for p, found in by_partition.items() if p not in normal for r in found
    ]
    errors = [
        segment_view(r)
        for p in normal
        for r in by_partition[p]
        if "ERROR" in (r.external_states or {}).values()
    ]
    stream = None
    if table.stream_partitions is not None:
        stream = set(range(table.stream_partitions)) - normal
    return outlook(
        [*segments, *unassigned],
        now_ms=now_ms,
        max_completion_ms=max_completion_ms,
        stream_partitions=stream,
        paused=table.paused,
        paused_partitions=_paused_partitions(table),
        errors_only=errors,
        pauseless=table.pauseless,
        **options,
    ).due()


def due_repairs(
    tables: Iterable[MirroredTable], now_ms: int, max_completion_ms: int
) -> dict[str, list[str]]:
    """See the module docstring."""
    realtime = {t.pk: t for t in tables if t.table_type == "REALTIME"}
    found: dict[int, dict[int, SegmentRow]] = defaultdict(dict)
    latest: list[str] = []
    ids = sorted(realtime)
    for id_chunk in chunks(ids, DB_CHUNK):
        rows = PartitionStatus.objects.filter(table_id__in=id_chunk).values_list(
            "table_id", "consuming_segment", "latest_segment"
        )
        latest += [
            last
            for table_id, consuming, last in rows
            if last and last != consuming and not realtime[table_id].paused
        ]
        for row in _light(read_model.doctor_segments(id_chunk)):
            found[row.table_id][row.pk] = row
    for name_chunk in chunks(sorted(latest), DB_CHUNK):
        rows = MirroredSegment.objects.filter(table_id__in=ids, name__in=name_chunk)
        for row in _light(rows):
            found[row.table_id][row.pk] = row
    out: dict[str, list[str]] = {}
    options = _settings()
    for table_id, table in sorted(realtime.items()):
        due = _table_due(table, found[table_id].values(), now_ms, max_completion_ms, options)
        if due:
            out[table.name] = due
    return out
