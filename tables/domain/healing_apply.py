"""Applying the healer's resolved repairs to an IdealState (pure; `tables.domain.healing` plans
them).

`apply_repairs` applies resolved repairs (`Resolved`: a repair with the new segment's name and
instances) to an IdealState inside a compare-and-set loop, re-checking each against the record it
replaces: a repair whose premise no longer holds (a commit got there first, a pause landed) is
dropped, and no partition ever ends with two segments that have CONSUMING replicas.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from tables.domain.healing import (
    CONSUMING,
    OFFLINE,
    ONLINE,
    Repair,
    RepairKind,
    Resolved,
    partition_segments,
)
from tables.domain.idealstate import finalize_for_write
from tables.domain.names import LLCSegmentName
from tables.domain.znrecord import ZNRecord

__all__ = ["apply_repairs"]


def apply_repairs(
    record: ZNRecord,
    resolved: Sequence[Resolved],
    is_paused: Callable[[ZNRecord, int], bool],
) -> tuple[ZNRecord | None, list[Resolved], list[tuple[Resolved, str]]]:
    """(new IdealState or None when nothing changes, applied, dropped with why), re-checking each
    repair against `record` (see the module docstring). Pure; safe in a compare-and-set loop."""
    out = record.copy()
    applied: list[Resolved] = []
    dropped: list[tuple[Resolved, str]] = []
    for item in resolved:
        why = _apply_one(out, item, is_paused(record, item.repair.partition))
        if why is None:
            applied.append(item)
        else:
            dropped.append((item, why))
    if not applied:
        return None, applied, dropped
    return finalize_for_write(out), applied, dropped


def _apply_one(out: ZNRecord, item: Resolved, paused: bool) -> str | None:
    repair = item.repair
    if repair.kind is RepairKind.DUPLICATE_SEQUENCE:
        return "no IdealState change" if repair.drop else None
    if repair.kind is RepairKind.PARTIAL_OFFLINE:
        return _apply_partial(out, repair)
    why = _check_premise(out, repair)
    if why is not None:
        return why
    adds = item.new_segment is not None or repair.add_latest
    if adds and paused:
        if repair.kind is RepairKind.COMMIT_STOPPED_AFTER_STEP1:
            _to_online(out, repair.to_online)  # as a commit that meets a pause: no next segment
            return None
        return "the partition is paused now"
    _to_online(out, repair.to_online)
    new = repair.segment if repair.add_latest else item.new_segment
    if new is not None:
        if not item.instances:
            return "no server is tagged for the table"
        if _consuming_in_partition(out, repair.partition):
            return f"partition {repair.partition} has a CONSUMING segment now"
        out.map_fields[new] = {instance: CONSUMING for instance in item.instances}
    return None


def _check_premise(out: ZNRecord, repair: Repair) -> str | None:
    name = repair.segment
    partition = repair.partition
    if repair.kind in (RepairKind.COMMIT_STOPPED_AFTER_STEP1, RepairKind.PARTITION_ENDED):
        states = out.map_fields.get(name or "")
        if not states or CONSUMING not in states.values():
            return f"{name} has no CONSUMING replica now (a commit finished it)"
    elif repair.kind in (RepairKind.ALL_REPLICAS_OFFLINE, RepairKind.NO_CONSUMING_SEGMENT):
        if _consuming_in_partition(out, partition):
            return f"partition {partition} has a CONSUMING segment now"
    elif repair.kind is RepairKind.COMMIT_STOPPED_AFTER_STEP2:
        if name in out.map_fields:
            return f"{name} is in the IdealState now (the commit finished)"
        for segment in repair.to_online:
            states = out.map_fields.get(segment)
            if not states or CONSUMING not in states.values():
                return f"{segment} has no CONSUMING replica now"
    if repair.sequence and _sequence_taken(out, partition, repair.sequence):
        return f"partition {partition} already has sequence {repair.sequence}"
    return None


def _apply_partial(out: ZNRecord, repair: Repair) -> str | None:
    states = out.map_fields.get(repair.segment or "")
    if not states or CONSUMING not in states.values():
        return f"{repair.segment} has no CONSUMING replica now"
    back = [i for i in repair.to_consuming if states.get(i) == OFFLINE]
    if not back:
        return "no replica is OFFLINE now"
    out.map_fields[repair.segment or ""] = {
        **states,
        **{instance: CONSUMING for instance in back},
    }
    return None


def _to_online(out: ZNRecord, segments: Iterable[str]) -> None:
    for segment in segments:
        states = out.map_fields.get(segment)
        if states:
            out.map_fields[segment] = {instance: ONLINE for instance in states}


def _consuming_in_partition(record: ZNRecord, partition: int) -> bool:
    return any(
        CONSUMING in record.map_fields[segment].values()
        for segment in partition_segments(record.map_fields, partition)
    )


def _sequence_taken(record: ZNRecord, partition: int, sequence: int) -> bool:
    for segment in record.map_fields:
        parsed = LLCSegmentName.parse(segment)
        if (
            parsed is not None
            and parsed.partition_group_id == partition
            and parsed.sequence_number == sequence
        ):
            return True
    return False
