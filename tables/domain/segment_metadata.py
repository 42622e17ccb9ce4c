"""Segment ZK metadata of realtime segments (reference §2.1, §2.2).

Stored at `/PROPERTYSTORE/SEGMENTS/<tableNameWithType>/<segmentName>` as a ZNRecord whose id is the
segment name and whose simpleFields hold the values as strings.

Contract:
- `from_znrecord` then `to_znrecord` gives back the same record. Keys this module does not know,
  typed keys whose value is not in the canonical form Pinot writes (e.g. `"007"` for an int), other
  mapFields and listFields are carried verbatim in `extra`, `extra_map_fields` and
  `extra_list_fields`.
- A field set to None is absent from the record. Values are written as Pinot writes them: ints in
  decimal, booleans `"true"`/`"false"`, the status and time unit by name.
- A missing status reads as UPLOADED. Download URL, push time and refresh time fall back to their
  legacy keys (`segment.offline.download.url`, `segment.realtime.download.url`,
  `segment.offline.push.time`, `segment.offline.refresh.time`) when the current key is absent; the
  legacy keys themselves stay in `extra`, and a value that was only read that way (or a status that
  was only implied) is not written back under the current key unless it changed.
- Transitions (`mark_committing`, `mark_done`) return new objects; `dataclasses.replace` is fine for
  anything else.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from tables.domain.znrecord import ZNRecord

__all__ = [
    "CRC",
    "CREATION_TIME",
    "CRYPTER",
    "CUSTOM_MAP",
    "DATA_CRC",
    "DOWNLOAD_URL",
    "END_OFFSET",
    "END_TIME",
    "END_TIME_RAW",
    "FLUSH_THRESHOLD_SIZE",
    "FLUSH_THRESHOLD_TIME",
    "INDEX_VERSION",
    "LEGACY_DOWNLOAD_URLS",
    "LEGACY_PUSH_TIME",
    "LEGACY_REFRESH_TIME",
    "NUM_REPLICAS",
    "PARTITION_METADATA",
    "PUSH_TIME",
    "REFRESH_TIME",
    "SIZE_IN_BYTES",
    "START_OFFSET",
    "START_TIME",
    "START_TIME_RAW",
    "STATUS",
    "TIER",
    "TIME_UNIT",
    "TOTAL_DOCS",
    "UPLOAD_START_TIME",
    "USE_DATA_CRC",
    "SegmentStatus",
    "SegmentZKMetadata",
    "is_completed",
    "new_in_progress",
]

STATUS = "segment.realtime.status"
START_OFFSET = "segment.realtime.startOffset"
END_OFFSET = "segment.realtime.endOffset"
NUM_REPLICAS = "segment.realtime.numReplicas"
FLUSH_THRESHOLD_SIZE = "segment.flush.threshold.size"
FLUSH_THRESHOLD_TIME = "segment.flush.threshold.time"
CREATION_TIME = "segment.creation.time"
START_TIME = "segment.start.time"
END_TIME = "segment.end.time"
TIME_UNIT = "segment.time.unit"
START_TIME_RAW = "segment.start.time.raw"
END_TIME_RAW = "segment.end.time.raw"
TOTAL_DOCS = "segment.total.docs"
CRC = "segment.crc"
DATA_CRC = "segment.data.crc"
USE_DATA_CRC = "segment.use.data.crc"
INDEX_VERSION = "segment.index.version"
SIZE_IN_BYTES = "segment.size.in.bytes"
DOWNLOAD_URL = "segment.download.url"
PUSH_TIME = "segment.push.time"
REFRESH_TIME = "segment.refresh.time"
CRYPTER = "segment.crypter"
PARTITION_METADATA = "segment.partition.metadata"
TIER = "segment.tier"
UPLOAD_START_TIME = "segment.upload.start.time"
CUSTOM_MAP = "custom.map"  # a mapField

LEGACY_DOWNLOAD_URLS = ("segment.offline.download.url", "segment.realtime.download.url")
LEGACY_PUSH_TIME = "segment.offline.push.time"
LEGACY_REFRESH_TIME = "segment.offline.refresh.time"

MILLISECONDS = "MILLISECONDS"
DEFAULT_INDEX_VERSION = "v3"

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_CANONICAL_INT = re.compile(r"-?(0|[1-9][0-9]*)", re.ASCII)


class SegmentStatus(StrEnum):
    IN_PROGRESS = "IN_PROGRESS"
    COMMITTING = "COMMITTING"  # pauseless only
    DONE = "DONE"
    UPLOADED = "UPLOADED"


def is_completed(status: SegmentStatus | str | None) -> bool:
    """DONE or UPLOADED (a missing status reads as UPLOADED)."""
    return status is None or status in (SegmentStatus.DONE, SegmentStatus.UPLOADED)


# Typed simpleFields: attribute -> (key, kind). Kinds: str, int, bool, status.
_FIELDS: dict[str, tuple[str, str]] = {
    "status": (STATUS, "status"),
    "start_offset": (START_OFFSET, "str"),
    "end_offset": (END_OFFSET, "str"),
    "num_replicas": (NUM_REPLICAS, "int"),
    "flush_threshold_size": (FLUSH_THRESHOLD_SIZE, "int"),
    "flush_threshold_time": (FLUSH_THRESHOLD_TIME, "str"),
    "creation_time": (CREATION_TIME, "int"),
    "start_time": (START_TIME, "int"),
    "end_time": (END_TIME, "int"),
    "time_unit": (TIME_UNIT, "str"),
    "start_time_raw": (START_TIME_RAW, "str"),
    "end_time_raw": (END_TIME_RAW, "str"),
    "total_docs": (TOTAL_DOCS, "int"),
    "crc": (CRC, "int"),
    "data_crc": (DATA_CRC, "int"),
    "use_data_crc": (USE_DATA_CRC, "bool"),
    "index_version": (INDEX_VERSION, "str"),
    "size_in_bytes": (SIZE_IN_BYTES, "int"),
    "download_url": (DOWNLOAD_URL, "str"),
    "push_time": (PUSH_TIME, "int"),
    "refresh_time": (REFRESH_TIME, "int"),
    "crypter": (CRYPTER, "str"),
    "partition_metadata": (PARTITION_METADATA, "str"),
    "tier": (TIER, "str"),
    "upload_start_time": (UPLOAD_START_TIME, "int"),
}

# Attributes read from legacy keys (checked in order) when their current key is absent.
_LEGACY: dict[str, tuple[str, ...]] = {
    "download_url": LEGACY_DOWNLOAD_URLS,
    "push_time": (LEGACY_PUSH_TIME,),
    "refresh_time": (LEGACY_REFRESH_TIME,),
}


def _read(kind: str, text: str) -> object | None:
    """The typed value of `text`, or None when it is not exactly what Pinot would have written."""
    if kind == "str":
        return text
    if kind == "int":
        if _CANONICAL_INT.fullmatch(text) is None:
            return None
        value = int(text)
        return value if _INT64_MIN <= value <= _INT64_MAX else None
    if kind == "bool":
        return {"true": True, "false": False}.get(text)
    try:
        return SegmentStatus(text)
    except ValueError:
        return None


def _write(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class SegmentZKMetadata:
    segment_name: str
    status: SegmentStatus = SegmentStatus.UPLOADED
    start_offset: str | None = None
    end_offset: str | None = None
    num_replicas: int | None = None
    flush_threshold_size: int | None = None
    flush_threshold_time: str | None = None  # deprecated; no longer written for new segments
    creation_time: int | None = None  # epoch ms
    start_time: int | None = None  # in time_unit
    end_time: int | None = None
    time_unit: str | None = None  # Java TimeUnit name, MILLISECONDS for committed LLC segments
    start_time_raw: str | None = None
    end_time_raw: str | None = None
    total_docs: int | None = None
    crc: int | None = None
    data_crc: int | None = None
    use_data_crc: bool | None = None
    index_version: str | None = None
    size_in_bytes: int | None = None
    download_url: str | None = None  # "" for peer-download commits
    push_time: int | None = None
    refresh_time: int | None = None
    crypter: str | None = None
    partition_metadata: str | None = None  # JSON text, kept as written
    tier: str | None = None
    upload_start_time: int | None = None
    custom_map: dict[str, str] = field(default_factory=dict, hash=False)
    extra: dict[str, str] = field(default_factory=dict, hash=False)
    extra_map_fields: dict[str, dict[str, str]] = field(default_factory=dict, hash=False)
    extra_list_fields: dict[str, list[str]] = field(default_factory=dict, hash=False)
    # Attributes whose value was implied (status) or read from a legacy key, not stored under
    # their own key; see the module docstring.
    implied: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    @property
    def is_completed(self) -> bool:
        return is_completed(self.status)

    @classmethod
    def from_znrecord(cls, record: ZNRecord) -> SegmentZKMetadata:
        simple = dict(record.simple_fields)
        values: dict[str, object] = {}
        for attribute, (key, kind) in _FIELDS.items():
            if key not in simple:
                continue
            value = _read(kind, simple[key])
            if value is not None:
                values[attribute] = value
                del simple[key]  # what remains in `simple` is carried in `extra`
        implied: set[str] = set()
        if "status" not in values:
            implied.add("status")
        for attribute in _LEGACY:
            if attribute in values:
                continue
            fallback = _legacy_value(attribute, simple)
            if fallback is not None:
                values[attribute] = fallback
                implied.add(attribute)
        map_fields = {k: dict(v) for k, v in record.map_fields.items()}
        custom_map = map_fields.get(CUSTOM_MAP)
        if custom_map:
            del map_fields[CUSTOM_MAP]
        return cls(
            segment_name=record.id,
            **values,
            custom_map=custom_map or {},
            extra=simple,
            extra_map_fields=map_fields,
            extra_list_fields={k: list(v) for k, v in record.list_fields.items()},
            implied=frozenset(implied),
        )

    def to_znrecord(self) -> ZNRecord:
        simple = dict(self.extra)
        for attribute, (key, _kind) in _FIELDS.items():
            value = getattr(self, attribute)
            if value is None or self._still_implied(attribute, value):
                continue
            simple[key] = _write(value)
        map_fields = {k: dict(v) for k, v in self.extra_map_fields.items()}
        if self.custom_map:
            map_fields[CUSTOM_MAP] = dict(self.custom_map)
        return ZNRecord(
            id=self.segment_name,
            simple_fields=simple,
            map_fields=map_fields,
            list_fields={k: list(v) for k, v in self.extra_list_fields.items()},
        )

    def _still_implied(self, attribute: str, value: object) -> bool:
        if attribute not in self.implied:
            return False
        if attribute == "status":
            return value == SegmentStatus.UPLOADED
        return value == _legacy_value(attribute, self.extra)

    # --- transitions ------------------------------------------------------------------------------

    def mark_committing(self, end_offset: str) -> SegmentZKMetadata:
        """IN_PROGRESS -> COMMITTING (pauseless commit start): records the end offset."""
        if self.status != SegmentStatus.IN_PROGRESS:
            raise ValueError(f"segment {self.segment_name} is {self.status}, not IN_PROGRESS")
        return dataclasses.replace(self, status=SegmentStatus.COMMITTING, end_offset=end_offset)

    def mark_done(
        self,
        *,
        end_offset: str,
        start_time_ms: int,
        end_time_ms: int,
        total_docs: int,
        crc: int,
        data_crc: int,
        size_in_bytes: int,
        download_url: str,
        index_version: str | None = DEFAULT_INDEX_VERSION,
        crypter: str | None = None,
        partition_metadata: str | None = None,
        custom_map: Mapping[str, str] | None = None,
    ) -> SegmentZKMetadata:
        """IN_PROGRESS or COMMITTING -> DONE with what the committed segment reports (§2.2).

        As in Pinot: negative numbers are not written (a negative data CRC also leaves
        `segment.use.data.crc` unset); start/end times are in ms, and for a segment with no
        documents the caller passes "now" for both; `crypter` None removes it; `custom_map` is
        merged into the existing one. `partition_metadata` None keeps the existing value.
        """
        if self.status not in (SegmentStatus.IN_PROGRESS, SegmentStatus.COMMITTING):
            raise ValueError(
                f"segment {self.segment_name} is {self.status}, not IN_PROGRESS or COMMITTING"
            )
        merged = {**self.custom_map, **(custom_map or {})}
        return dataclasses.replace(
            self,
            status=SegmentStatus.DONE,
            end_offset=end_offset,
            start_time=_non_negative(start_time_ms),
            end_time=_non_negative(end_time_ms),
            time_unit=MILLISECONDS,
            index_version=index_version,
            total_docs=_non_negative(total_docs),
            crc=_non_negative(crc),
            data_crc=_non_negative(data_crc),
            use_data_crc=True if data_crc >= 0 else self.use_data_crc,
            download_url=download_url,
            crypter=crypter,
            size_in_bytes=_non_negative(size_in_bytes),
            partition_metadata=(
                self.partition_metadata if partition_metadata is None else partition_metadata
            ),
            custom_map=merged,
        )


def _non_negative(value: int) -> int | None:
    return value if value >= 0 else None


def _legacy_value(attribute: str, simple: Mapping[str, str]) -> object | None:
    kind = _FIELDS[attribute][1]
    for key in _LEGACY[attribute]:
        if key in simple:
            value = _read(kind, simple[key])
            if value is not None:
                return value
    return None


def new_in_progress(
    segment_name: str,
    start_offset: str,
    num_replicas: int,
    flush_threshold_size: int,
    now_ms: int,
    partition_metadata: str | None = None,
) -> SegmentZKMetadata:
    """A new consuming segment's metadata, as `LLCM.createNewSegmentZKMetadata` writes it."""
    return SegmentZKMetadata(
        segment_name=segment_name,
        status=SegmentStatus.IN_PROGRESS,
        start_offset=start_offset,
        num_replicas=num_replicas,
        flush_threshold_size=flush_threshold_size,
        creation_time=now_ms,
        partition_metadata=partition_metadata,
    )
