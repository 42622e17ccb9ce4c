"""Pause and resume as pure decisions on a REALTIME IdealState (reference §4.2 to §4.4).

Pause (`paused_record`): the table-level flag (`pauseState` + `isTablePaused`, reason
ADMINISTRATIVE) or, with `partitions`, this project's partition-level pause (`pausedPartitions`).
Pausing what is already paused for the same reason changes nothing (None: no write), so a repeated
request keeps the original "paused since". A pause for another reason (storage quota) is replaced
by the administrative one, which nothing resumes automatically.

Every table-level write stamps `timeInMillis` strictly later than the stamp it replaces
(`stamp_ms`), so the IdealState's history of pause states is totally ordered by its stamps,
whatever the clocks of concurrent controllers say: the last acknowledged write has the largest.

Resume (`plan_resume`): for every partition that is not paused and has no segment with a
CONSUMING replica, one new CONSUMING segment (sequence = latest + 1, assigned like any new
segment), starting at
- `lastConsumed`: the latest segment's end offset when it is DONE, its start offset when it never
  finished (it is replaced, as Pinot's repair does); a partition with no segment yet starts where
  the table's `auto.offset.reset` says. An offset the stream no longer holds is replaced by the
  earliest one and the difference is *data loss* (`llcStreamDataLoss`). An offset beyond the
  stream's latest cannot come from this stream (the topic was recreated while paused): it is
  replaced by the earliest, and noted. After a topic swap (the IdealState's
  `streamChangedWhilePaused`, written with the new config) an old offset means nothing in the
  new topic: every partition starts at the new topic's earliest offset;
- `smallest`: the stream's earliest offset (rows already committed are consumed again, as in
  Pinot: a *replay*, recorded like a skip so that the ledger excuses exactly those duplicates);
- `largest`: the stream's latest offset; the rows in between are *skipped* on purpose.
Skips, losses and replays are returned per partition and written into the new segment's metadata
(`custom.map`: `consumption.previousOffset`, where consumption had stopped, and
`consumption.startReason`) so that the ledger excuses exactly that gap (or those duplicates) and
the console can show it for as long as the segment exists.
The plan is computed inside the IdealState's compare-and-set update, from the record being replaced:
a partition that gained a CONSUMING segment meanwhile (a racing commit or resume) gets none, so no
partition ever has two.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from tables.domain.idealstate import (
    InstanceState,
    PauseState,
    ReasonCode,
    finalize_for_write,
    java_timestamp_text,
    pause_state,
    paused_partitions,
    with_pause_state,
    with_paused_partitions,
)
from tables.domain.names import LLCSegmentName
from tables.domain.znrecord import ZNRecord

__all__ = [
    "PREVIOUS_OFFSET",
    "START_REASON",
    "STREAM_CHANGED",
    "ConsumeFrom",
    "NewSegment",
    "OffsetRange",
    "PartitionTail",
    "ResumePlan",
    "SkipReason",
    "apply_resume",
    "latest_segments",
    "parse_consume_from",
    "parse_java_timestamp",
    "pause_status_details",
    "paused_record",
    "plan_resume",
    "resumed_flag",
    "stamp_ms",
    "with_stream_change",
    "without_stream_change",
]

STREAM_CHANGED = "streamChangedWhilePaused"  # IdealState simpleField, this project's own
PREVIOUS_OFFSET = "consumption.previousOffset"
START_REASON = "consumption.startReason"
PAUSED_COMMENT = (
    "Pause flag is set. Consuming segments are being committed. Use /pauseStatus endpoint in a "
    "few moments to check if all consuming segments have been committed."
)
RESUMED_COMMENT = (
    "Pause flag is cleared. Consuming segments are being created. Use /pauseStatus endpoint in a "
    "few moments to double check."
)


class ConsumeFrom(StrEnum):
    LAST_CONSUMED = "lastConsumed"
    SMALLEST = "smallest"
    LARGEST = "largest"


class SkipReason(StrEnum):
    DATA_LOSS = "dataLoss"  # the stream dropped the offsets before they were consumed
    LARGEST = "largest"  # the operator chose to skip them
    SMALLEST = "smallest"  # the operator chose to consume committed offsets again (a replay)
    TOPIC_CHANGED = "topicChanged"  # the offset is beyond this stream's latest one


def parse_consume_from(text: str | None) -> ConsumeFrom:
    """`consumeFrom` (case-insensitive; absent = lastConsumed); ValueError names the choices."""
    if text is None or not text.strip():
        return ConsumeFrom.LAST_CONSUMED
    for choice in ConsumeFrom:
        if choice.value.lower() == text.strip().lower():
            return choice
    choices = ", ".join(c.value for c in ConsumeFrom)
    raise ValueError(f"consumeFrom must be one of {choices}, not {text!r}")


def parse_java_timestamp(text: str) -> int | None:
    """Inverse of `java_timestamp_text` (UTC); None when `text` is not such a timestamp."""
    try:
        whole, _, fraction = text.strip().partition(".")
        moment = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
        millis = int((fraction or "0").ljust(3, "0")[:3])
    except ValueError:
        return None
    return int(moment.timestamp()) * 1000 + millis


def stamp_ms(record: ZNRecord, now_ms: int) -> int:
    """`now_ms`, or 1 ms after the stamp already written when that is not earlier."""
    previous = parse_java_timestamp(pause_state(record).time_in_millis)
    return now_ms if previous is None or now_ms > previous else previous + 1


def paused_record(
    record: ZNRecord, comment: str | None, now_ms: int, partitions: frozenset[int] | None = None
) -> ZNRecord | None:
    """The IdealState with the pause applied, or None when it is already in place."""
    if partitions is not None:
        current = paused_partitions(record)
        if partitions <= current:
            return None
        return finalize_for_write(with_paused_partitions(record, current | partitions))
    state = pause_state(record)
    if state.paused and state.reason_code == ReasonCode.ADMINISTRATIVE:
        return None
    stamp = java_timestamp_text(stamp_ms(record, now_ms))
    new = PauseState(True, ReasonCode.ADMINISTRATIVE, comment or None, stamp)
    return finalize_for_write(with_pause_state(record, new))


def resumed_flag(record: ZNRecord, comment: str | None, now_ms: int) -> ZNRecord:
    """The IdealState with the table-level flag cleared (always written: a new stamp)."""
    stamp = java_timestamp_text(stamp_ms(record, now_ms))
    return with_pause_state(record, PauseState(False, ReasonCode.ADMINISTRATIVE, comment, stamp))


def with_stream_change(record: ZNRecord, old: str, new: str, now_ms: int) -> ZNRecord:
    """The IdealState noting that the table's stream changed from `old` to `new` while paused;
    the next resume reads it (`plan_resume`) and `without_stream_change` clears it."""
    out = record.copy()
    note = {"from": old, "to": new, "timeMs": now_ms}
    out.simple_fields[STREAM_CHANGED] = json.dumps(note, separators=(",", ":"))
    return out


def without_stream_change(record: ZNRecord) -> ZNRecord:
    out = record.copy()
    out.simple_fields.pop(STREAM_CHANGED, None)
    return out


def pause_status_details(record: ZNRecord, consuming: list[str]) -> dict[str, object]:
    """Pinot's `PauseStatusDetails` (§4.3); `pausedPartitions` is added only when some are."""
    state = pause_state(record)
    default = "Table is paused." if state.paused else "Table is unpaused."
    body: dict[str, object] = {
        "pauseFlag": state.paused,
        "consumingSegments": sorted(consuming),
        "reasonCode": str(state.reason_code),
        "comment": state.comment if state.comment is not None else default,
        "timestamp": state.time_in_millis,
    }
    if state.index_of_inactive_topics:
        body["indexOfInactiveTopics"] = list(state.index_of_inactive_topics)
    partitions = paused_partitions(record)
    if partitions:
        body["pausedPartitions"] = sorted(partitions)
    return body


# --- resume --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PartitionTail:
    """A partition's latest LLC segment, as ZooKeeper has it."""

    segment: str
    status: str  # segment.realtime.status
    start_offset: int | None
    end_offset: int | None


@dataclass(frozen=True)
class OffsetRange:
    """What a stream partition holds now: `[earliest, latest)` (latest = the next offset)."""

    earliest: int
    latest: int


@dataclass(frozen=True)
class NewSegment:
    partition: int
    segment: str
    start_offset: int
    replicas: tuple[str, ...]
    wanted_offset: int | None = None  # where lastConsumed would have started
    skip_reason: SkipReason | None = None

    @property
    def skipped(self) -> int:
        """Offsets jumped over (0 when none, negative never: a rewind is not a skip)."""
        if self.wanted_offset is None or self.skip_reason is None:
            return 0
        return max(self.start_offset - self.wanted_offset, 0)

    def custom_map(self) -> dict[str, str]:
        if self.skip_reason is None or self.wanted_offset is None:
            return {}
        return {PREVIOUS_OFFSET: str(self.wanted_offset), START_REASON: str(self.skip_reason)}


@dataclass(frozen=True)
class ResumePlan:
    segments: tuple[NewSegment, ...]

    @property
    def data_loss(self) -> int:
        return sum(s.skipped for s in self.segments if s.skip_reason == SkipReason.DATA_LOSS)


def _consuming_partitions(record: ZNRecord) -> set[int]:
    found = set()
    for segment, replicas in record.map_fields.items():
        name = LLCSegmentName.parse(segment)
        if name is not None and InstanceState.CONSUMING in replicas.values():
            found.add(name.partition_group_id)
    return found


def latest_segments(record: ZNRecord) -> dict[int, LLCSegmentName]:
    """Each partition's LLC segment with the highest sequence number in the IdealState."""
    latest: dict[int, LLCSegmentName] = {}
    for segment in record.map_fields:
        name = LLCSegmentName.parse(segment)
        if name is None:
            continue
        known = latest.get(name.partition_group_id)
        if known is None or name.sequence_number > known.sequence_number:
            latest[name.partition_group_id] = name
    return latest


def _start(
    tail: PartitionTail | None,
    stream: OffsetRange,
    consume_from: ConsumeFrom,
    default: str,
    swapped: bool,
) -> tuple[int, int | None, SkipReason | None]:
    """(start offset, the lastConsumed offset it replaces, why they differ)."""
    wanted = None
    if tail is not None:
        done = tail.status == "DONE" and tail.end_offset is not None
        wanted = tail.end_offset if done else tail.start_offset
    if swapped:  # the old topic's offsets mean nothing here; count skips in the new one
        if consume_from == ConsumeFrom.LAST_CONSUMED:
            return (
                stream.earliest,
                wanted,
                (SkipReason.TOPIC_CHANGED if wanted is not None else None),
            )
        wanted = stream.earliest
    if consume_from == ConsumeFrom.SMALLEST:
        replay = SkipReason.SMALLEST if wanted is not None and wanted > stream.earliest else None
        return stream.earliest, wanted, replay
    if consume_from == ConsumeFrom.LARGEST:
        skip = SkipReason.LARGEST if wanted is not None and stream.latest > wanted else None
        return stream.latest, wanted, skip
    if wanted is None:
        return (stream.earliest if default == "smallest" else stream.latest), None, None
    if wanted < stream.earliest:
        return stream.earliest, wanted, SkipReason.DATA_LOSS
    if wanted > stream.latest:
        return stream.earliest, wanted, SkipReason.TOPIC_CHANGED
    return wanted, wanted, None


def plan_resume(
    record: ZNRecord,
    raw_table: str,
    tails: Mapping[int, PartitionTail],
    streams: Mapping[int, OffsetRange],
    consume_from: ConsumeFrom,
    replicas_for: Callable[[int], list[str]],
    now_ms: int,
    default_criteria: str = "largest",
    partitions: frozenset[int] | None = None,
) -> ResumePlan:
    """New CONSUMING segments for the partitions of `streams` that need one (module contract).

    `tails` are the latest segments' metadata by partition (read before the update; a tail that is
    no longer the latest in `record` makes that partition wait for the next resume or repair),
    `partitions` limits the plan to those partitions. A paused table plans nothing."""
    if pause_state(record).paused:
        return ResumePlan(())
    held = paused_partitions(record)
    swapped = STREAM_CHANGED in record.simple_fields
    consuming = _consuming_partitions(record)
    latest = latest_segments(record)
    planned = []
    for partition in sorted(streams):
        if partition in held or partition in consuming:
            continue
        if partitions is not None and partition not in partitions:
            continue
        tail = tails.get(partition)
        last = latest.get(partition)
        if (tail is None) != (last is None) or (last is not None and tail.segment != str(last)):
            continue  # ZooKeeper moved on since the tails were read
        start, wanted, reason = _start(
            tail, streams[partition], consume_from, default_criteria, swapped
        )
        if last is None:
            name = LLCSegmentName.create(raw_table, partition, 0, now_ms)
        else:
            name = last.next(now_ms)
        planned.append(
            NewSegment(partition, str(name), start, tuple(replicas_for(partition)), wanted, reason)
        )
    return ResumePlan(tuple(planned))


def apply_resume(record: ZNRecord, plan: ResumePlan) -> ZNRecord:
    """The IdealState with the plan's segments CONSUMING on their replicas."""
    out = record.copy()
    for segment in plan.segments:
        out.map_fields[segment.segment] = {r: InstanceState.CONSUMING for r in segment.replicas}
    return finalize_for_write(out)
