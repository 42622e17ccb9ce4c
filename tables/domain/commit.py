"""The IdealState change of a segment commit (reference §6.2 step 3), as a pure function.

`apply_commit` takes the table's current IdealState and returns the new one:
- every replica of the committing segment goes ONLINE; the segment must still have at least one
  CONSUMING replica (otherwise the commit is stale: someone else committed or repaired it);
- the next segment of the partition is added CONSUMING on its instances, unless the table or the
  partition is paused (read from this very record, so a pause that raced the commit wins) or there
  is no next segment (the partition ended);
- a next segment whose partition and sequence already exist is refused (at most one CONSUMING
  segment per partition).
It is used inside a compare-and-set loop, so it must not have side effects. The new record shares
the maps of the segments it leaves alone with `record` (a deep copy of a thousand-segment
IdealState per commit was most of a commit end's CPU): edit neither in place afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tables.domain.idealstate import (
    InstanceState,
    finalize_for_write,
    pause_state,
    paused_partitions,
)
from tables.domain.names import LLCSegmentName
from tables.domain.znrecord import ZNRecord

__all__ = ["CommitChange", "CommitRejected", "apply_commit", "is_partition_paused"]


class CommitRejected(Exception):
    """The commit cannot be applied; the controller answers FAILED and nothing is written."""


@dataclass(frozen=True)
class CommitChange:
    idealstate: ZNRecord
    next_segment_added: bool


def is_partition_paused(record: ZNRecord, partition: int) -> bool:
    return pause_state(record).paused or partition in paused_partitions(record)


def apply_commit(
    record: ZNRecord,
    committing: str,
    next_segment: str | None,
    next_instances: Sequence[str],
) -> CommitChange:
    replicas = record.map_fields.get(committing)
    if not replicas:
        raise CommitRejected(f"{committing} is not in the IdealState of {record.id}")
    if InstanceState.CONSUMING not in replicas.values():
        raise CommitRejected(
            f"{committing} has no CONSUMING replica (it was committed or repaired)"
        )
    out = record.shallow_copy()  # entries are replaced below, never edited in place
    out.map_fields[committing] = {instance: InstanceState.ONLINE for instance in replicas}
    added = False
    if next_segment is not None:
        name = LLCSegmentName.parse(next_segment)
        if name is None:
            raise CommitRejected(f"{next_segment} is not an LLC segment name")
        if not is_partition_paused(record, name.partition_group_id):
            for existing in out.map_fields:
                other = LLCSegmentName.parse(existing)
                if (
                    other is not None
                    and other.partition_group_id == name.partition_group_id
                    and other.sequence_number == name.sequence_number
                ):
                    raise CommitRejected(
                        f"{existing} already holds partition {name.partition_group_id} "
                        f"sequence {name.sequence_number}"
                    )
            if not next_instances:
                raise CommitRejected(f"no instances to host {next_segment}")
            out.map_fields[next_segment] = {i: InstanceState.CONSUMING for i in next_instances}
            added = True
    return CommitChange(finalize_for_write(out), added)
