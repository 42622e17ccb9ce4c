"""The plan for a new REALTIME table: Pinot's setUpNewTable (reference §6.1), as pure data.

For every stream partition: one IN_PROGRESS segment `<raw>__<p>__0__<now>` starting at the offset
the table's `auto.offset.reset` names, with the flush threshold of §6.6, assigned CONSUMING to
`replication` servers by the default rule of §6.4. The IdealState is built whole, so the caller can
write it once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tables.domain.assignment import consuming_instances_for_partition, max_partitions_per_instance
from tables.domain.flush import make_updater
from tables.domain.idealstate import InstanceState, finalize_for_write, new_realtime_idealstate
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentZKMetadata, new_in_progress
from tables.domain.table_config import TableConfig
from tables.domain.znrecord import ZNRecord

__all__ = ["NewTablePlan", "plan_new_table"]


@dataclass(frozen=True)
class NewTablePlan:
    idealstate: ZNRecord
    segments: tuple[SegmentZKMetadata, ...]
    flush_threshold_rows: int


def plan_new_table(
    config: TableConfig,
    start_offsets: Mapping[int, int | str],
    instances: Sequence[str],
    now_ms: int,
) -> NewTablePlan:
    """Segments and IdealState for `config`, given each partition's start offset and the servers
    tagged for the table. Raises AssignmentError when there are fewer servers than replicas."""
    table = config.table_name_with_type
    replication = config.replication
    per_instance = max_partitions_per_instance(len(start_offsets), replication, len(instances))
    threshold = make_updater(config.stream_config).threshold_for_new_segment(per_instance, None)
    idealstate = new_realtime_idealstate(table, replication)
    segments = []
    for partition in sorted(start_offsets):
        name = str(LLCSegmentName.create(config.raw_table_name, partition, 0, now_ms))
        segments.append(
            new_in_progress(name, str(start_offsets[partition]), replication, threshold, now_ms)
        )
        replicas = consuming_instances_for_partition(table, instances, partition, replication)
        idealstate.map_fields[name] = {server: InstanceState.CONSUMING for server in replicas}
    return NewTablePlan(finalize_for_write(idealstate), tuple(segments), threshold)
