"""The mirror of changed tables: IdealState, ExternalView, table config and segment metadata ->
MirroredTable and MirroredSegment rows (part of `tables.mirror.sync`).

Contract:
- `sync_changed_tables` is given the tables whose znode versions moved (or that are new to the
  mirror). For each chunk of CHUNK_TABLES tables it reads IS, EV and table config in one pipelined
  batch, then, in a second batch, the metadata of only the segments that are new, whose IS or EV
  entry changed, or whose status is not DONE/UPLOADED (`tables.mirror.segment_rows`), with
  multiRead requests (`Batch.get_many`); then writes the chunk in one database transaction
  (new segment rows with one prepared INSERT, changed ones as upserts, deletes). The next chunk's
  IS/EV/config batch is sent before a chunk is decoded and written, so ZooKeeper answers it
  meanwhile. Each segment name is parsed once per sync. Segments are those of the IS and the EV;
  metadata znodes of segments in neither are not mirrored.
- A table whose IS, EV or config cannot be decoded is skipped (its rows and versions stay as they
  were, so the next sync tries again) and reported in `failed`; a segment whose metadata cannot be
  decoded is mirrored without metadata and reported in `warnings`.
- `MirroredTable.missing_download_url` is the console's `segmentsMissingDownloadUrl`
  (`doctor_facts.missing_download_url`): COMMITTING segments, and DONE segments whose download URL
  is empty (peer-download commits). A DONE segment without a URL is read again whenever its table
  is (`segment_rows.metadata_may_change`), so the deep-store repair that fills the URL is seen.
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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction

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
from tables.domain.names import LLCSegmentName, raw_table_name, table_type_of
from tables.domain.table_config import TableConfig, table_config_from_znrecord
from tables.domain.znrecord import ZNRecord
from tables.mirror.bulk import DB_CHUNK, chunks, update_rows
from tables.mirror.segment_rows import metadata_values, needs_read, segment_values, write_segments
from tables.mirror.zk_reads import Batch, Pending, ReadCounters, Znode
from tables.models import MirroredSegment, MirroredTable
from tables.zk import codec
from tables.zk.paths import ClusterPaths
from tables.zk.zookeeper import ZooKeeperStore

__all__ = [
    "CHUNK_TABLES",
    "ChangedResult",
    "PartitionShape",
    "TableShape",
    "sync_changed_tables",
]

CHUNK_TABLES = 50
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
    llc: dict[str, LLCSegmentName | None] = field(default_factory=dict)  # names, parsed once

    @property
    def ideal_map(self) -> dict[str, dict[str, str]]:
        return self.ideal.map_fields if self.ideal else {}

    @property
    def ev_map(self) -> dict[str, dict[str, str]]:
        return self.external.map_fields if self.external else {}


def _ms(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


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


def _shape(read: _Read) -> dict[int, PartitionShape]:
    """Per stream partition: (consuming segment, latest segment, replicas) from the IS."""
    ideal_map, ev_map = read.ideal_map, read.ev_map
    latest: dict[int, tuple[int, str]] = {}
    consuming: dict[int, tuple[int, str]] = {}
    for segment, replicas in ideal_map.items():
        llc = read.llc[segment]
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


class _ChunkReads:
    """IS, EV, table config and the metadata listing of a chunk of tables, asked at once and
    collected later (the next chunk's reads are in flight while a chunk is written)."""

    def __init__(
        self,
        client: ZooKeeperStore,
        paths: ClusterPaths,
        names: Sequence[str],
        counters: ReadCounters,
    ) -> None:
        self.batch = Batch(client, counters)
        get, children = self.batch.get, self.batch.children
        self.pending = {
            name: (
                (
                    get(paths.idealstate(name)),
                    get(paths.externalview(name)),
                    get(paths.table_config(name)),
                ),
                children(paths.segments(name)),
            )
            for name in names
        }

    def result(self) -> dict[str, tuple[_Znodes, list[str] | None]]:
        self.batch.wait()
        return {
            name: (tuple(p.result() for p in trio), listing.result())  # type: ignore[misc]
            for name, (trio, listing) in self.pending.items()
        }


def _decode_table(name: str, znodes: _Znodes, segment_names: list[str] | None = None) -> _Read:
    ideal_z, ev_z, config_z = znodes
    config_record = _decode(config_z)
    read = _Read(
        name=name,
        ideal=_decode(ideal_z),
        ideal_version=_version(ideal_z),
        external=_decode(ev_z),
        external_version=_version(ev_z),
        config=None if config_record is None else table_config_from_znrecord(config_record),
        config_version=_version(config_z),
        segment_names=segment_names,
    )
    parse = LLCSegmentName.parse
    read.llc = {
        segment: parse(segment)
        for segment in {*read.ideal_map, *read.ev_map, *(segment_names or ())}
    }
    return read


def _unassigned_names(read: _Read) -> list[str]:
    """Per partition, the newest LLC metadata znode past every segment of the IS and EV."""
    ideal_map, ev_map = read.ideal_map, read.ev_map
    top: dict[int, int] = {}
    for segment in set(ideal_map) | set(ev_map):
        llc = read.llc[segment]
        if llc is not None:
            top[llc.partition_group_id] = max(
                top.get(llc.partition_group_id, -1), llc.sequence_number
            )
    newest: dict[int, tuple[int, str]] = {}
    for segment in read.segment_names or ():
        llc = read.llc[segment]
        if llc is None or segment in ideal_map or segment in ev_map:
            continue
        partition, sequence = llc.partition_group_id, llc.sequence_number
        if sequence > top.get(partition, -1):
            newest[partition] = max(newest.get(partition, (-1, "")), (sequence, segment))
    return [segment for _sequence, segment in sorted(newest.values())]


def _unassigned_values(
    found: Mapping[str, Znode | None], warnings: list[str]
) -> list[dict[str, Any]]:
    out = []
    for segment, znode in sorted(found.items()):
        values = metadata_values(segment, znode, warnings)
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
    groups = list(chunks(list(names), CHUNK_TABLES))
    if not groups:
        return result
    asked = _ChunkReads(client, paths, groups[0], counters)
    for following in [*groups[1:], None]:
        answers = asked.result()
        if following is not None:  # in flight while this chunk is decoded and written
            asked = _ChunkReads(client, paths, following, counters)
        reads = _decode_chunk(answers, result)
        if reads:
            _sync_chunk(client, paths, reads, existing, counters, now, lead_partitions, result)
    return result


def _decode_chunk(
    answers: Mapping[str, tuple[_Znodes, list[str] | None]], result: ChangedResult
) -> list[_Read]:
    """The chunk's tables decoded; gone ones into `result.vanished`, undecodable ones into
    `result.failed`."""
    reads: list[_Read] = []
    for name, (znodes, listing) in answers.items():
        if all(z is None for z in znodes):
            result.vanished.add(name)
            continue
        try:
            reads.append(_decode_table(name, znodes, listing))
        except ValueError as exc:  # ZNRecordError, TableConfigError
            result.failed[name] = f"{type(exc).__name__}: {exc}"
    return reads


@dataclass
class _Wanted:
    """The metadata reads of one table: segments of the IS/EV to (re)read, unassigned ones."""

    segments: list[str]
    unassigned: list[str]
    found: dict[str, Znode | None] = field(default_factory=dict)


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
    wanted: dict[str, _Wanted] = {}
    for read in reads:
        ideal_map, ev_map = read.ideal_map, read.ev_map
        table = existing.get(read.name)
        olds = old_rows.get(table.pk, {}) if table else {}
        segments = [
            segment
            for segment in sorted(set(ideal_map) | set(ev_map))
            if needs_read(olds.get(segment), ideal_map.get(segment, {}), ev_map.get(segment, {}))
        ]
        wanted[read.name] = _Wanted(segments, _unassigned_names(read))
    _read_metadata(client, paths, wanted, counters)

    with transaction.atomic():
        _write_chunk(reads, existing, old_rows, wanted, now, lead_partitions, result)


def _read_metadata(
    client: ZooKeeperStore,
    paths: ClusterPaths,
    wanted: Mapping[str, _Wanted],
    counters: ReadCounters,
) -> None:
    """Every wanted metadata znode of the chunk, in one batch of multiRead requests."""
    order = [
        (name, segment)
        for name, want in wanted.items()
        for segment in (*want.segments, *want.unassigned)
    ]
    batch = Batch(client, counters)
    many: Pending[list[Znode | None]] = batch.get_many(
        [paths.segment(name, segment) for name, segment in order], segment=True
    )
    batch.wait()
    for (name, segment), znode in zip(order, many.result(), strict=True):
        wanted[name].found[segment] = znode


def _write_chunk(
    reads: list[_Read],
    existing: dict[str, MirroredTable],
    old_rows: Mapping[int, dict[str, MirroredSegment]],
    wanted: Mapping[str, _Wanted],
    now: datetime,
    lead_partitions: int | None,
    result: ChangedResult,
) -> None:
    """The chunk's table rows (new ones in one bulk INSERT, changed ones in one UPDATE), then
    each table's segment rows."""
    planned = []
    for read in reads:
        table = existing.get(read.name)
        olds = old_rows.get(table.pk, {}) if table else {}
        want = wanted[read.name]
        fresh = _fresh_segments(read, want, result.warnings)
        shapes = _shape(read)
        values = _table_values(read, shapes, fresh, olds, now, lead_partitions)
        found = {s: want.found[s] for s in want.unassigned}
        values["unassigned_segments"] = _unassigned_values(found, result.warnings)
        planned.append((read, olds, fresh, shapes, values))
    new = [
        MirroredTable(name=read.name, **values)
        for read, *_, values in planned
        if read.name not in existing
    ]
    _create_tables(new)
    changed = []
    for read, *_, values in planned:
        table = existing.get(read.name)
        if table is not None:
            for key, value in values.items():
                setattr(table, key, value)
            changed.append(table)
    update_rows(MirroredTable, changed, TABLE_FIELDS)
    existing.update((table.name, table) for table in new)
    result.tables_created += len(new)
    for read, olds, fresh, shapes, _values in planned:
        keep = set(read.ideal_map) | set(read.ev_map)
        written, deleted = write_segments(existing[read.name].pk, fresh, olds, keep, now)
        result.segments_written += written
        result.segments_deleted += deleted
        result.shapes[read.name] = TableShape(partitions=shapes)


def _create_tables(new: list[MirroredTable]) -> None:
    """INSERT the new table rows; their primary keys are set (returned by the INSERT where the
    database can, else read back by name)."""
    MirroredTable.objects.bulk_create(new, batch_size=DB_CHUNK)
    if any(table.pk is None for table in new):
        names = [table.name for table in new]
        ids = dict(MirroredTable.objects.filter(name__in=names).values_list("name", "pk"))
        for table in new:
            table.pk = ids[table.name]


def _fresh_segments(read: _Read, want: _Wanted, warnings: list[str]) -> dict[str, dict[str, Any]]:
    """Row values of the segments read again (the others are unchanged)."""
    ideal_map, ev_map, empty = read.ideal_map, read.ev_map, {}
    return {
        segment: segment_values(
            segment,
            read.llc[segment],
            ideal_map.get(segment, empty),
            ev_map.get(segment, empty),
            want.found[segment],
            warnings,
        )
        for segment in want.segments
    }


def _table_values(
    read: _Read,
    shapes: dict[int, PartitionShape],
    fresh: Mapping[str, dict[str, Any]],
    olds: Mapping[str, MirroredSegment],
    now: datetime,
    lead_partitions: int | None,
) -> dict[str, Any]:
    """The MirroredTable columns (but unassigned_segments): counts over every segment (fresh
    values, else the unchanged rows)."""
    name = read.name
    ideal_map, ev_map = read.ideal_map, read.ev_map
    pause = pause_state(read.ideal) if read.ideal else None
    paused = bool(pause and pause.paused)
    disabled = read.ideal is not None and not is_enabled(read.ideal)
    partitions_paused = sorted(paused_partitions(read.ideal)) if read.ideal else []
    counts = {"consuming": 0, "error_replicas": 0, "error_segments": 0, "missing_url": 0}
    availability = []
    empty: dict[str, str] = {}
    for segment in set(ideal_map) | set(ev_map):
        ideal, ev = ideal_map.get(segment, empty), ev_map.get(segment, empty)
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
    return {
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
    }
