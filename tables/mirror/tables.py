"""The mirror of changed tables: IdealState, ExternalView, table config and segment metadata ->
MirroredTable and MirroredSegment rows (part of `tables.mirror.sync`).

Contract:
- `sync_changed_tables` is given the tables whose znode versions moved (or that are new to the
  mirror). For each chunk of CHUNK_TABLES tables it reads IS, EV and table config in one pipelined
  batch, then, in a second batch, the metadata of only the segments that are new, whose IS or EV
  entry changed, or whose status is not DONE/UPLOADED; then writes the chunk in one database
  transaction (bulk create / update / delete). Segments are those of the IS and the EV; metadata
  znodes of segments in neither are not mirrored.
- A table whose IS, EV or config cannot be decoded is skipped (its rows and versions stay as they
  were, so the next sync tries again) and reported in `failed`; a segment whose metadata cannot be
  decoded is mirrored without metadata and reported in `warnings`.
- `MirroredTable.missing_download_url` is the console's `segmentsMissingDownloadUrl`
  (`doctor_facts.missing_download_url`): COMMITTING segments, and DONE segments whose download URL
  is empty (peer-download commits). A DONE segment without a URL is read again whenever its table
  is (`metadata_may_change`), so the deep-store repair that fills the URL is seen.
- It returns, per synced table, the `TableShape` that partition triage needs (consuming / latest
  segment and replica states per stream partition).
- The segment metadata znodes are listed too (in the first batch): per partition, the newest LLC
  segment whose sequence is past every segment of the IdealState and ExternalView has its metadata
  read in the second batch and is kept in `MirroredTable.unassigned_segments` (a commit stopped
  after its step 2, or a repair before its IdealState write: what the ingestion doctor and the
  mirror-triggered healing need to see).
Table health, lags and `last_synced` of unchanged rows are `tables.mirror.sync`'s business.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import models, transaction

from tables.domain import triage
from tables.domain.doctor_facts import missing_download_url
from tables.domain.flush import (
    FLUSH_THRESHOLD_ROWS,
    FLUSH_THRESHOLD_ROWS_LEGACY,
    FLUSH_THRESHOLD_SEGMENT_ROWS,
    FLUSH_THRESHOLD_TIME,
    FLUSH_THRESHOLD_TIME_LEGACY,
)
from tables.domain.helix_enabled import is_enabled
from tables.domain.idealstate import pause_state, paused_partitions
from tables.domain.leadership import lead_partition
from tables.domain.names import (
    InvalidName,
    LLCSegmentName,
    UploadedRealtimeSegmentName,
    parse_creation_time,
    raw_table_name,
    table_type_of,
)
from tables.domain.segment_metadata import CUSTOM_MAP, SegmentZKMetadata, is_completed
from tables.domain.table_config import TableConfig, table_config_from_znrecord
from tables.domain.znrecord import ZNRecord
from tables.mirror.zk_reads import Batch, ReadCounters, Znode
from tables.models import MirroredSegment, MirroredTable
from tables.zk import codec
from tables.zk.paths import ClusterPaths
from tables.zk.zookeeper import ZooKeeperStore

__all__ = [
    "CHUNK_TABLES",
    "ChangedResult",
    "PartitionShape",
    "TableShape",
    "metadata_may_change",
    "sync_changed_tables",
]

CHUNK_TABLES = 50
DB_CHUNK = 500
CONSUMING = "CONSUMING"
ERROR = "ERROR"

TABLE_FIELDS = [
    "raw_name", "table_type", "tenant", "replication", "stream_type", "topic", "flush_rows",
    "flush_time", "pauseless", "config", "paused", "pause_reason", "pause_comment", "pause_time",
    "paused_partitions", "disabled", "num_partitions", "segment_count", "consuming_count",
    "error_replicas", "error_segments", "missing_download_url", "missing_consuming",
    "percent_available", "lead_partition", "config_version", "idealstate_version",
    "externalview_version", "last_synced", "unassigned_segments",
]  # fmt: skip
SEGMENT_FIELDS = [
    "partition", "sequence", "created_ms", "ideal_states", "external_states", "display_state",
    "has_error", "all_offline", "status", "start_offset", "end_offset", "total_docs",
    "size_bytes", "download_url", "crc", "start_time_ms", "end_time_ms", "creation_time_ms",
    "metadata", "metadata_version", "metadata_mtime_ms",
]  # fmt: skip
_UNIT_MS = {
    "NANOSECONDS": 1e-6, "MICROSECONDS": 1e-3, "MILLISECONDS": 1, "SECONDS": 1000,
    "MINUTES": 60_000, "HOURS": 3_600_000, "DAYS": 86_400_000,
}  # fmt: skip


@dataclass(frozen=True)
class PartitionShape:
    consuming_segment: str
    latest_segment: str
    replicas: dict[str, str]  # IS replica of the consuming (else latest) segment -> EV state


@dataclass
class TableShape:
    partitions: dict[int, PartitionShape]


@dataclass
class ChangedResult:
    shapes: dict[str, TableShape] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    vanished: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)
    tables_created: int = 0
    segments_written: int = 0
    segments_deleted: int = 0


@dataclass
class _Read:
    """The decoded znodes of one changed table."""

    name: str
    ideal: ZNRecord | None
    ideal_version: int
    external: ZNRecord | None
    external_version: int
    config: TableConfig | None
    config_version: int
    segment_names: list[str] | None = None  # the metadata znodes (None: no segments folder)


def _ms(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def rewrite_rows(
    model: type[models.Model], rows: Sequence[models.Model], unique: list[str], fields: list[str]
) -> None:
    """Write changed rows back as one upsert per chunk (INSERT ... ON CONFLICT(unique) DO UPDATE).

    `bulk_update` builds a CASE WHEN per field and row: at 16,000 partitions that is a minute of
    Python per sync. The upsert on the natural key costs one plain statement per chunk; the rows
    keep their ids (the copies written here have none, and conflict on `unique`).
    """
    fresh = []
    for row in rows:
        clone = copy.copy(row)
        clone.pk = None
        fresh.append(clone)
    model.objects.bulk_create(
        fresh, DB_CHUNK, update_conflicts=True, unique_fields=unique, update_fields=fields
    )


def _decode(znode: Znode | None) -> ZNRecord | None:
    return None if znode is None else codec.decode(znode.data)


def _version(znode: Znode | None) -> int:
    return -1 if znode is None else znode.version


def _first(values: Mapping[str, str], keys: Sequence[str]) -> str | None:
    for key in keys:
        if values.get(key) not in (None, ""):
            return values[key]
    return None


def _config_values(name: str, config: TableConfig | None, ideal: ZNRecord | None) -> dict[str, Any]:
    table_type = table_type_of(name) or ""
    if config is None:
        replicas = (ideal.simple_fields.get("REPLICAS") if ideal else None) or "1"
        return {
            "tenant": "",
            "replication": int(replicas) if replicas.isdigit() else 1,
            "stream_type": "",
            "topic": "",
            "flush_rows": None,
            "flush_time": "",
            "pauseless": False,
            "config": {},
        }
    stream = config.stream_config
    rows = _first(
        stream, (FLUSH_THRESHOLD_ROWS, *FLUSH_THRESHOLD_ROWS_LEGACY, FLUSH_THRESHOLD_SEGMENT_ROWS)
    )
    return {
        "tenant": f"{config.server_tenant}_{table_type}" if table_type else config.server_tenant,
        "replication": config.replication,
        "stream_type": config.stream_type or "",
        "topic": config.topic_name or "",
        "flush_rows": int(rows) if rows is not None and rows.isdigit() else None,
        "flush_time": _first(stream, (FLUSH_THRESHOLD_TIME, *FLUSH_THRESHOLD_TIME_LEGACY)) or "",
        "pauseless": config.pauseless_enabled,
        "config": config.rest,
    }


def _name_values(segment: str) -> dict[str, Any]:
    llc = LLCSegmentName.parse(segment)
    if llc is not None:
        try:
            created = parse_creation_time(llc.creation_time)
        except InvalidName:
            created = None
        return {
            "partition": llc.partition_group_id,
            "sequence": llc.sequence_number,
            "created_ms": created,
        }
    uploaded = UploadedRealtimeSegmentName.parse(segment)
    if uploaded is not None:
        return {"partition": uploaded.partition_id, "sequence": None, "created_ms": None}
    return {"partition": None, "sequence": None, "created_ms": None}


def _to_ms(value: int | None, unit: str | None) -> int | None:
    if value is None:
        return None
    return int(value * _UNIT_MS.get(unit or "MILLISECONDS", 1))


def _shown_metadata(record: ZNRecord) -> dict[str, str]:
    """The simpleFields, plus the `custom.map` mapField (as compact JSON under that key): where a
    resume records the offsets it skipped (`tables.domain.pause`)."""
    shown = dict(record.simple_fields)
    custom = record.map_fields.get(CUSTOM_MAP)
    if custom:
        shown[CUSTOM_MAP] = json.dumps(custom, separators=(",", ":"), sort_keys=True)
    return shown


def _metadata_values(segment: str, znode: Znode | None, warnings: list[str]) -> dict[str, Any]:
    empty = {
        "status": "", "start_offset": "", "end_offset": "", "total_docs": None,
        "size_bytes": None, "download_url": "", "crc": "", "start_time_ms": None,
        "end_time_ms": None, "creation_time_ms": None, "metadata": {},
        "metadata_version": -1, "metadata_mtime_ms": None,
    }  # fmt: skip
    if znode is None:
        return empty
    try:
        record = codec.decode(znode.data)
        meta = SegmentZKMetadata.from_znrecord(record)
    except ValueError as exc:
        warnings.append(f"segment {segment}: unreadable metadata ({exc})")
        return {**empty, "metadata_version": znode.version, "metadata_mtime_ms": znode.mtime_ms}
    return {
        "status": str(meta.status),
        "start_offset": meta.start_offset or "",
        "end_offset": meta.end_offset or "",
        "total_docs": meta.total_docs,
        "size_bytes": meta.size_in_bytes,
        "download_url": meta.download_url or "",
        "crc": "" if meta.crc is None else str(meta.crc),
        "start_time_ms": _to_ms(meta.start_time, meta.time_unit),
        "end_time_ms": _to_ms(meta.end_time, meta.time_unit),
        "creation_time_ms": meta.creation_time,
        "metadata": _shown_metadata(record),
        "metadata_version": znode.version,
        "metadata_mtime_ms": znode.mtime_ms,
    }


def metadata_may_change(status: str, download_url: str) -> bool:
    """Whether a mirrored segment's metadata may still change without its IdealState or
    ExternalView entry changing: not DONE/UPLOADED yet, or DONE without a download URL (the
    deep-store upload repair fills it later)."""
    return not status or not is_completed(status) or missing_download_url(status, download_url)


def _needs_read(row: MirroredSegment | None, ideal: dict[str, str], ev: dict[str, str]) -> bool:
    if row is None or row.ideal_states != ideal or row.external_states != ev:
        return True
    return metadata_may_change(row.status, row.download_url)


def _shape(ideal_map: Mapping[str, Mapping[str, str]], ev_map: Mapping[str, Mapping[str, str]]):
    """Per stream partition: (consuming segment, latest segment, replicas) from the IS."""
    latest: dict[int, tuple[int, str]] = {}
    consuming: dict[int, tuple[int, str]] = {}
    for segment, replicas in ideal_map.items():
        llc = LLCSegmentName.parse(segment)
        if llc is None:
            continue
        key = (llc.sequence_number, segment)
        partition = llc.partition_group_id
        latest[partition] = max(latest.get(partition, key), key)
        if CONSUMING in replicas.values():
            consuming[partition] = max(consuming.get(partition, key), key)
    shapes = {}
    for partition in sorted(latest):
        consuming_segment = consuming[partition][1] if partition in consuming else ""
        shown = consuming_segment or latest[partition][1]
        ev = ev_map.get(shown, {})
        shapes[partition] = PartitionShape(
            consuming_segment=consuming_segment,
            latest_segment=latest[partition][1],
            replicas={r: ev.get(r, "") for r in sorted(ideal_map.get(shown, {}))},
        )
    return shapes


_Znodes = tuple[Znode | None, Znode | None, Znode | None]


def _read_chunk(
    client: ZooKeeperStore, paths: ClusterPaths, names: Sequence[str], counters: ReadCounters
) -> dict[str, tuple[_Znodes, list[str] | None]]:
    batch = Batch(client, counters)
    pending = {
        name: (
            (
                batch.get(paths.idealstate(name)),
                batch.get(paths.externalview(name)),
                batch.get(paths.table_config(name)),
            ),
            batch.children(paths.segments(name)),
        )
        for name in names
    }
    batch.wait()
    return {
        name: (tuple(p.result() for p in trio), listing.result())  # type: ignore[misc]
        for name, (trio, listing) in pending.items()
    }


def _decode_table(name: str, znodes: _Znodes, segment_names: list[str] | None = None) -> _Read:
    ideal_z, ev_z, config_z = znodes
    config_record = _decode(config_z)
    return _Read(
        name=name,
        ideal=_decode(ideal_z),
        ideal_version=_version(ideal_z),
        external=_decode(ev_z),
        external_version=_version(ev_z),
        config=None if config_record is None else table_config_from_znrecord(config_record),
        config_version=_version(config_z),
        segment_names=segment_names,
    )


def _unassigned_names(read: _Read) -> list[str]:
    """Per partition, the newest LLC metadata znode past every segment of the IS and EV."""
    ideal_map = read.ideal.map_fields if read.ideal else {}
    ev_map = read.external.map_fields if read.external else {}
    top: dict[int, int] = {}
    for segment in set(ideal_map) | set(ev_map):
        llc = LLCSegmentName.parse(segment)
        if llc is not None:
            top[llc.partition_group_id] = max(
                top.get(llc.partition_group_id, -1), llc.sequence_number
            )
    newest: dict[int, tuple[int, str]] = {}
    for segment in read.segment_names or ():
        llc = LLCSegmentName.parse(segment)
        if llc is None or segment in ideal_map or segment in ev_map:
            continue
        partition, sequence = llc.partition_group_id, llc.sequence_number
        if sequence > top.get(partition, -1):
            newest[partition] = max(newest.get(partition, (-1, "")), (sequence, segment))
    return [segment for _sequence, segment in sorted(newest.values())]


def _unassigned_values(pending: Mapping[str, Any], warnings: list[str]) -> list[dict[str, Any]]:
    out = []
    for segment, waiting in sorted(pending.items()):
        values = _metadata_values(segment, waiting.result(), warnings)
        if values["metadata_version"] < 0:
            continue  # deleted meanwhile
        out.append(
            {
                "name": segment,
                "status": values["status"],
                "startOffset": values["start_offset"],
                "endOffset": values["end_offset"],
                "mtimeMs": values["metadata_mtime_ms"],
                "version": values["metadata_version"],
            }
        )
    return out


def sync_changed_tables(
    client: ZooKeeperStore,
    paths: ClusterPaths,
    names: Sequence[str],
    existing: dict[str, MirroredTable],
    counters: ReadCounters,
    now: datetime,
    lead_partitions: int | None,
) -> ChangedResult:
    """Bring the rows of `names` (changed or new tables) up to date; see the module docstring."""
    result = ChangedResult()
    for chunk in chunks(list(names), CHUNK_TABLES):
        reads: list[_Read] = []
        for name, (znodes, listing) in _read_chunk(client, paths, chunk, counters).items():
            if all(z is None for z in znodes):
                result.vanished.add(name)
                continue
            try:
                reads.append(_decode_table(name, znodes, listing))
            except ValueError as exc:  # ZNRecordError, TableConfigError
                result.failed[name] = f"{type(exc).__name__}: {exc}"
        if reads:
            _sync_chunk(client, paths, reads, existing, counters, now, lead_partitions, result)
    return result


def _sync_chunk(
    client: ZooKeeperStore,
    paths: ClusterPaths,
    reads: list[_Read],
    existing: dict[str, MirroredTable],
    counters: ReadCounters,
    now: datetime,
    lead_partitions: int | None,
    result: ChangedResult,
) -> None:
    old_rows: dict[int, dict[str, MirroredSegment]] = {}
    table_ids = [existing[r.name].pk for r in reads if r.name in existing]
    for ids in chunks(table_ids, DB_CHUNK):
        for row in MirroredSegment.objects.filter(table_id__in=ids):
            old_rows.setdefault(row.table_id, {})[row.name] = row

    # Which metadata to read: new segments, changed IS/EV entries, segments not yet DONE.
    batch = Batch(client, counters)
    wanted: dict[str, dict[str, Any]] = {}
    unassigned: dict[str, dict[str, Any]] = {}
    for read in reads:
        unassigned[read.name] = {
            segment: batch.get(paths.segment(read.name, segment), segment=True)
            for segment in _unassigned_names(read)
        }
        ideal_map = read.ideal.map_fields if read.ideal else {}
        ev_map = read.external.map_fields if read.external else {}
        table = existing.get(read.name)
        olds = old_rows.get(table.pk, {}) if table else {}
        pending = {}
        for segment in sorted(set(ideal_map) | set(ev_map)):
            ideal, ev = ideal_map.get(segment, {}), ev_map.get(segment, {})
            if _needs_read(olds.get(segment), ideal, ev):
                pending[segment] = batch.get(paths.segment(read.name, segment), segment=True)
        wanted[read.name] = pending
    batch.wait()

    with transaction.atomic():
        for read in reads:
            _write_table(
                read,
                existing,
                old_rows,
                (wanted[read.name], unassigned[read.name]),
                now,
                lead_partitions,
                result,
            )


def _write_table(
    read: _Read,
    existing: dict[str, MirroredTable],
    old_rows: dict[int, dict[str, MirroredSegment]],
    reads: tuple[dict[str, Any], dict[str, Any]],
    now: datetime,
    lead_partitions: int | None,
    result: ChangedResult,
) -> None:
    name = read.name
    pending, unassigned = reads
    ideal_map = read.ideal.map_fields if read.ideal else {}
    ev_map = read.external.map_fields if read.external else {}
    table = existing.get(name)
    olds = old_rows.get(table.pk, {}) if table else {}

    # Segment rows: values of the re-read ones; the others are unchanged.
    fresh: dict[str, dict[str, Any]] = {}
    for segment, waiting in pending.items():
        ideal, ev = dict(ideal_map.get(segment, {})), dict(ev_map.get(segment, {}))
        fresh[segment] = {
            **_name_values(segment),
            "ideal_states": ideal,
            "external_states": ev,
            "display_state": triage.segment_display_state(ideal, ev),
            "has_error": ERROR in ev.values(),
            "all_offline": triage.is_all_offline(ideal, ev),
            **_metadata_values(segment, waiting.result(), result.warnings),
        }

    # Table-level counts over every segment (fresh values, else the unchanged rows).
    shapes = _shape(ideal_map, ev_map)
    pause = pause_state(read.ideal) if read.ideal else None
    paused = bool(pause and pause.paused)
    disabled = read.ideal is not None and not is_enabled(read.ideal)
    partitions_paused = sorted(paused_partitions(read.ideal)) if read.ideal else []
    counts = {"consuming": 0, "error_replicas": 0, "error_segments": 0, "missing_url": 0}
    availability = []
    for segment in set(ideal_map) | set(ev_map):
        ideal, ev = ideal_map.get(segment, {}), ev_map.get(segment, {})
        values = fresh.get(segment)
        if values is None:
            row = olds[segment]
            values = {
                "status": row.status,
                "download_url": row.download_url,
                "creation_time_ms": row.creation_time_ms,
                "created_ms": row.created_ms,
            }
        status, url = values["status"], values["download_url"]
        if segment in ideal_map:
            created = values["creation_time_ms"] or values["created_ms"]
            availability.append((ideal, ev, created))
        counts["consuming"] += CONSUMING in ideal.values()
        counts["error_replicas"] += sum(1 for s in ev.values() if s == ERROR)
        # A disabled table's segments are OFFLINE on purpose: only ERROR replicas count.
        all_offline = not disabled and triage.is_all_offline(ideal, ev)
        counts["error_segments"] += ERROR in ev.values() or all_offline
        counts["missing_url"] += missing_download_url(status, url)
    missing = [
        p
        for p, shape in shapes.items()
        if not shape.consuming_segment
        and not paused
        and not disabled
        and p not in partitions_paused
    ]
    values = {
        "raw_name": raw_table_name(name),
        "table_type": table_type_of(name) or "",
        **_config_values(name, read.config, read.ideal),
        "paused": paused,
        "pause_reason": (pause.reason_code if pause and pause.paused else "") or "",
        "pause_comment": (pause.comment if pause and pause.paused else "") or "",
        "pause_time": (pause.time_in_millis if pause and pause.paused else "") or "",
        "paused_partitions": partitions_paused,
        "disabled": disabled,
        "num_partitions": len(shapes),
        "segment_count": len(set(ideal_map) | set(ev_map)),
        "consuming_count": counts["consuming"],
        "error_replicas": counts["error_replicas"],
        "error_segments": counts["error_segments"],
        "missing_download_url": counts["missing_url"],
        "missing_consuming": len(missing),
        "percent_available": triage.percent_available(availability, _ms(now)),
        "lead_partition": (
            lead_partition(raw_table_name(name), lead_partitions) if lead_partitions else None
        ),
        "config_version": read.config_version,
        "idealstate_version": read.ideal_version,
        "externalview_version": read.external_version,
        "last_synced": now,
        "unassigned_segments": _unassigned_values(unassigned, result.warnings),
    }
    if table is None:
        table = MirroredTable.objects.create(name=name, **values)
        existing[name] = table
        result.tables_created += 1
    else:
        for key, value in values.items():
            setattr(table, key, value)
        table.save(update_fields=TABLE_FIELDS)

    creates, updates = [], []
    for segment, segment_values in fresh.items():
        old = olds.get(segment)
        if old is None:
            creates.append(
                MirroredSegment(table=table, name=segment, last_synced=now, **segment_values)
            )
        elif any(getattr(old, k) != v for k, v in segment_values.items()):
            for key, value in segment_values.items():
                setattr(old, key, value)
            updates.append(old)
    MirroredSegment.objects.bulk_create(creates, batch_size=DB_CHUNK)
    rewrite_rows(MirroredSegment, updates, ["table", "name"], SEGMENT_FIELDS)
    gone = [
        row.pk
        for segment, row in olds.items()
        if segment not in ideal_map and segment not in ev_map
    ]
    for ids in chunks(gone, DB_CHUNK):
        MirroredSegment.objects.filter(pk__in=ids).delete()
    result.segments_written += len(creates) + len(updates)
    result.segments_deleted += len(gone)
    result.shapes[name] = TableShape(partitions=shapes)
