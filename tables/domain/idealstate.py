"""A REALTIME table's IdealState (reference §1.3) and its pause state (§4.2).

The IdealState is a ZNRecord whose mapFields are `segment -> {instance -> state}` with states
ONLINE, CONSUMING and OFFLINE. The functions here are pure: they return new records or read values.

Pause state lives in two simpleFields that are always written together:
- `pauseState`: compact JSON with keys paused, reasonCode, comment (optional), timeInMillis and
  indexOfInactiveTopics, where `timeInMillis` is, despite its name, the text of a
  `java.sql.Timestamp.toString()` ("2024-05-01 11:02:13.417"); our controllers write it in UTC.
- `isTablePaused`: "true"/"false", deprecated but still written for older readers. Readers prefer
  `pauseState.paused` and fall back to `isTablePaused` when `pauseState` is absent or unparsable.
Partition-level pause (this project's design, not in Pinot) is the simpleField `pausedPartitions`, a
JSON array of partition ids, absent when empty. Helix ignores unknown simpleFields, and Pinot's own
`pauseState` reader never sees it.

`finalize_for_write` applies what Pinot does on every IdealState write (§6.8): `NUM_PARTITIONS`
= the number of segments, `BATCH_MESSAGE_MODE` forced to false, `enableCompression` set past
1000 segments.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from tables.domain.znrecord import ZNRecord

__all__ = [
    "COMPRESSION_SEGMENT_THRESHOLD",
    "InstanceState",
    "PauseState",
    "ReasonCode",
    "consuming_segments",
    "finalize_for_write",
    "java_timestamp_text",
    "new_realtime_idealstate",
    "pause_state",
    "paused_partitions",
    "segments_of_partition",
    "with_pause_state",
    "with_paused_partitions",
]

SEGMENT_STATE_MODEL = "SegmentOnlineOfflineStateModel"
COMPRESSION_SEGMENT_THRESHOLD = 1000
PAUSE_STATE = "pauseState"
IS_TABLE_PAUSED = "isTablePaused"
PAUSED_PARTITIONS = "pausedPartitions"


class InstanceState(StrEnum):
    ONLINE = "ONLINE"
    CONSUMING = "CONSUMING"
    OFFLINE = "OFFLINE"
    ERROR = "ERROR"  # only ever in an EXTERNALVIEW
    DROPPED = "DROPPED"


class ReasonCode(StrEnum):
    ADMINISTRATIVE = "ADMINISTRATIVE"
    STORAGE_QUOTA_EXCEEDED = "STORAGE_QUOTA_EXCEEDED"
    RESOURCE_UTILIZATION_LIMIT_EXCEEDED = "RESOURCE_UTILIZATION_LIMIT_EXCEEDED"


@dataclass(frozen=True)
class PauseState:
    paused: bool
    reason_code: str = ReasonCode.ADMINISTRATIVE
    comment: str | None = None
    time_in_millis: str = ""
    index_of_inactive_topics: tuple[int, ...] = field(default_factory=tuple)

    def to_json(self) -> str:
        data: dict[str, object] = {"paused": self.paused, "reasonCode": str(self.reason_code)}
        if self.comment is not None:
            data["comment"] = self.comment
        data["timeInMillis"] = self.time_in_millis
        data["indexOfInactiveTopics"] = list(self.index_of_inactive_topics)
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def java_timestamp_text(now_ms: int) -> str:
    """`java.sql.Timestamp.toString()` of `now_ms` in UTC: trailing zeros of the fraction dropped,
    at least one digit kept ("2024-05-01 11:02:13.417", "2024-05-01 11:02:13.4", "... 13.0")."""
    moment = datetime.fromtimestamp(now_ms // 1000, tz=UTC)
    fraction = f"{now_ms % 1000:03d}".rstrip("0") or "0"
    return f"{moment:%Y-%m-%d %H:%M:%S}.{fraction}"


def new_realtime_idealstate(table_name_with_type: str, replication: int) -> ZNRecord:
    """The empty CUSTOMIZED IdealState Pinot builds for a new REALTIME table."""
    return ZNRecord(
        id=table_name_with_type,
        simple_fields={
            "IDEAL_STATE_MODE": "CUSTOMIZED",
            "REBALANCE_MODE": "CUSTOMIZED",
            "NUM_PARTITIONS": "0",
            "REPLICAS": str(replication),
            "MAX_PARTITIONS_PER_INSTANCE": "1",
            "STATE_MODEL_DEF_REF": SEGMENT_STATE_MODEL,
            "STATE_MODEL_FACTORY_NAME": "DEFAULT",
            "INSTANCE_GROUP_TAG": table_name_with_type,
            IS_TABLE_PAUSED: "false",
        },
    )


def finalize_for_write(record: ZNRecord) -> ZNRecord:
    """A copy with the bookkeeping fields Pinot recomputes on every IdealState write. Only its
    simple fields are its own: its segments' maps are `record`'s (`ZNRecord.shallow_copy`), so
    neither record's maps are to be edited in place afterwards (replacing one is fine)."""
    out = record.shallow_copy()
    out.simple_fields["NUM_PARTITIONS"] = str(len(out.map_fields))
    if out.simple_fields.get("BATCH_MESSAGE_MODE") == "true":
        out.simple_fields["BATCH_MESSAGE_MODE"] = "false"
    if len(out.map_fields) > COMPRESSION_SEGMENT_THRESHOLD:
        out.simple_fields["enableCompression"] = "true"
    else:
        out.simple_fields.pop("enableCompression", None)
    return out


def pause_state(record: ZNRecord) -> PauseState:
    """The table's pause state: `pauseState` when readable, else the legacy `isTablePaused`."""
    raw = record.simple_fields.get(PAUSE_STATE)
    if raw:
        try:
            data = json.loads(raw)
            return PauseState(
                paused=bool(data.get("paused", False)),
                reason_code=str(data.get("reasonCode") or ReasonCode.ADMINISTRATIVE),
                comment=data.get("comment"),
                time_in_millis=str(data.get("timeInMillis") or ""),
                index_of_inactive_topics=tuple(
                    int(i) for i in data.get("indexOfInactiveTopics") or []
                ),
            )
        except (ValueError, TypeError, AttributeError):
            pass  # unparsable: fall back to the legacy flag, as Pinot does
    return PauseState(paused=record.simple_fields.get(IS_TABLE_PAUSED) == "true")


def with_pause_state(record: ZNRecord, state: PauseState) -> ZNRecord:
    """A copy with `pauseState` and `isTablePaused` set together. A table-level change keeps the
    existing inactive-topic list, as Pinot does."""
    current = pause_state(record)
    if not state.index_of_inactive_topics and current.index_of_inactive_topics:
        state = PauseState(
            paused=state.paused,
            reason_code=state.reason_code,
            comment=state.comment,
            time_in_millis=state.time_in_millis,
            index_of_inactive_topics=current.index_of_inactive_topics,
        )
    out = record.copy()
    out.simple_fields[PAUSE_STATE] = state.to_json()
    out.simple_fields[IS_TABLE_PAUSED] = "true" if state.paused else "false"
    return out


def paused_partitions(record: ZNRecord) -> frozenset[int]:
    raw = record.simple_fields.get(PAUSED_PARTITIONS)
    if not raw:
        return frozenset()
    try:
        return frozenset(int(p) for p in json.loads(raw))
    except (ValueError, TypeError):
        return frozenset()


def with_paused_partitions(record: ZNRecord, partitions: frozenset[int] | set[int]) -> ZNRecord:
    out = record.copy()
    if partitions:
        out.simple_fields[PAUSED_PARTITIONS] = json.dumps(sorted(partitions), separators=(",", ":"))
    else:
        out.simple_fields.pop(PAUSED_PARTITIONS, None)
    return out


def consuming_segments(record: ZNRecord) -> list[str]:
    """Segments with at least one CONSUMING replica, sorted (as `pauseStatus` lists them)."""
    return sorted(
        segment
        for segment, replicas in record.map_fields.items()
        if InstanceState.CONSUMING in replicas.values()
    )


def segments_of_partition(record: ZNRecord, partition: int) -> list[str]:
    """LLC segments of one partition, in sequence order."""
    from tables.domain.names import LLCSegmentName

    found = []
    for segment in record.map_fields:
        name = LLCSegmentName.parse(segment)
        if name is not None and name.partition_group_id == partition:
            found.append((name.sequence_number, segment))
    return [segment for _, segment in sorted(found)]
