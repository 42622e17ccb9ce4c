"""MirroredSegment rows of one changed table (part of `tables.mirror.tables`).

Contract:
- `segment_values(segment, llc, ideal, ev, znode, warnings)` is a segment's row values: from its
  name (partition, sequence, creation time of an LLC or uploaded-realtime name; `llc` is the name
  parsed once by the caller, None when it is not an LLC name), its IdealState and ExternalView
  entries (display state, ERROR replica, OFFLINE everywhere) and its metadata znode (Pinot's
  `SegmentZKMetadata`: status, offsets, docs, size, download URL, CRC, times in ms, the shown
  simpleFields plus `custom.map`, version and mtime). A missing znode gives empty metadata with
  version -1; an undecodable one the same but its version and mtime, and a warning.
- `metadata_may_change(status, download_url)`: whether the metadata may still change without the
  segment's IdealState or ExternalView entry changing (not DONE/UPLOADED yet, or DONE without a
  download URL, which the deep-store repair fills later); `needs_read(row, ideal, ev)`: whether a
  mirrored segment's metadata must be read again (new, changed entry, or may still change).
- `write_segments(table_id, fresh, olds, keep, now)` writes one table's rows: new segments with
  one prepared INSERT (`tables.mirror.bulk.insert_rows`), changed ones with one UPDATE, and deletes
  the rows of segments not in `keep` (the IdealState and ExternalView). Returns (rows written,
  rows deleted). A written row's `last_synced` is `now`; unchanged rows are not touched (the last
  sync that confirmed them is their table's `last_synced`, see `tables.mirror.sync`).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from tables.domain import triage
from tables.domain.doctor_facts import missing_download_url
from tables.domain.names import (
    InvalidName,
    LLCSegmentName,
    UploadedRealtimeSegmentName,
    parse_creation_time,
)
from tables.domain.segment_metadata import CUSTOM_MAP, SegmentZKMetadata, is_completed
from tables.mirror.bulk import DB_CHUNK, chunks, insert_rows, update_rows
from tables.mirror.zk_reads import Znode
from tables.models import MirroredSegment
from tables.zk import codec

__all__ = [
    "SEGMENT_FIELDS",
    "metadata_may_change",
    "metadata_values",
    "needs_read",
    "segment_values",
    "write_segments",
]

ERROR = "ERROR"
SEGMENT_FIELDS = [
    "partition", "sequence", "created_ms", "ideal_states", "external_states", "display_state",
    "has_error", "all_offline", "status", "start_offset", "end_offset", "total_docs",
    "size_bytes", "download_url", "crc", "start_time_ms", "end_time_ms", "creation_time_ms",
    "metadata", "metadata_version", "metadata_mtime_ms",
]  # fmt: skip
_INSERTED = ["table_id", "name", "last_synced", *SEGMENT_FIELDS]
_UPDATED = [*SEGMENT_FIELDS, "last_synced"]
_UNIT_MS = {
    "NANOSECONDS": 1e-6, "MICROSECONDS": 1e-3, "MILLISECONDS": 1, "SECONDS": 1000,
    "MINUTES": 60_000, "HOURS": 3_600_000, "DAYS": 86_400_000,
}  # fmt: skip
_NO_METADATA = {
    "status": "", "start_offset": "", "end_offset": "", "total_docs": None,
    "size_bytes": None, "download_url": "", "crc": "", "start_time_ms": None,
    "end_time_ms": None, "creation_time_ms": None, "metadata": {},
    "metadata_version": -1, "metadata_mtime_ms": None,
}  # fmt: skip


def _name_values(segment: str, llc: LLCSegmentName | None) -> dict[str, Any]:
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


def _shown_metadata(simple: Mapping[str, str], maps: Mapping[str, Any]) -> dict[str, str]:
    """The simpleFields, plus the `custom.map` mapField (as compact JSON under that key): where a
    resume records the offsets it skipped (`tables.domain.pause`)."""
    shown = dict(simple)
    custom = maps.get(CUSTOM_MAP)
    if custom:
        shown[CUSTOM_MAP] = json.dumps(custom, separators=(",", ":"), sort_keys=True)
    return shown


def metadata_values(segment: str, znode: Znode | None, warnings: list[str]) -> dict[str, Any]:
    """The metadata columns of a segment row (see the module docstring)."""
    if znode is None:
        return dict(_NO_METADATA)
    try:
        record = codec.decode(znode.data)
        meta = SegmentZKMetadata.from_znrecord(record)
    except ValueError as exc:
        warnings.append(f"segment {segment}: unreadable metadata ({exc})")
        return {
            **_NO_METADATA,
            "metadata_version": znode.version,
            "metadata_mtime_ms": znode.mtime_ms,
        }
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
        "metadata": _shown_metadata(record.simple_fields, record.map_fields),
        "metadata_version": znode.version,
        "metadata_mtime_ms": znode.mtime_ms,
    }


def segment_values(
    segment: str,
    llc: LLCSegmentName | None,
    ideal: Mapping[str, str],
    ev: Mapping[str, str],
    znode: Znode | None,
    warnings: list[str],
) -> dict[str, Any]:
    """Every column of a segment row but its table, name and last_synced."""
    ideal, ev = dict(ideal), dict(ev)
    return {
        **_name_values(segment, llc),
        "ideal_states": ideal,
        "external_states": ev,
        "display_state": triage.segment_display_state(ideal, ev),
        "has_error": ERROR in ev.values(),
        "all_offline": triage.is_all_offline(ideal, ev),
        **metadata_values(segment, znode, warnings),
    }


def metadata_may_change(status: str, download_url: str) -> bool:
    """See the module docstring."""
    return not status or not is_completed(status) or missing_download_url(status, download_url)


def needs_read(row: MirroredSegment | None, ideal: dict[str, str], ev: dict[str, str]) -> bool:
    if row is None or row.ideal_states != ideal or row.external_states != ev:
        return True
    return metadata_may_change(row.status, row.download_url)


def write_segments(
    table_id: int,
    fresh: Mapping[str, dict[str, Any]],
    olds: Mapping[str, MirroredSegment],
    keep: Collection[str],
    now: datetime,
) -> tuple[int, int]:
    """Write one table's segment rows; see the module docstring."""
    creates: list[tuple] = []
    updates: list[MirroredSegment] = []
    for segment, values in fresh.items():
        old = olds.get(segment)
        if old is None:
            creates.append((table_id, segment, now, *(values[f] for f in SEGMENT_FIELDS)))
        elif any(getattr(old, k) != v for k, v in values.items()):
            for key, value in values.items():
                setattr(old, key, value)
            old.last_synced = now
            updates.append(old)
    insert_rows(MirroredSegment, _INSERTED, creates)
    update_rows(MirroredSegment, updates, _UPDATED)
    gone = [row.pk for segment, row in olds.items() if segment not in keep]
    for ids in chunks(gone, DB_CHUNK):
        MirroredSegment.objects.filter(pk__in=ids).delete()
    return len(creates) + len(updates), len(gone)
