"""Which controller leads a table (reference §8): the MASTER of the table's partition of
`leadControllerResource` in that resource's EXTERNALVIEW. When the resource is disabled
(ResourceConfig RESOURCE_ENABLED = "false"), the Helix cluster leader (`/CONTROLLER/LEADER`, id
`<host>_<port>`) leads every table, as Pinot's LeadControllerManager falls back.
"""

from __future__ import annotations

from tables.domain.leadership import (
    DEFAULT_NUM_PARTITIONS,
    LEAD_CONTROLLER_RESOURCE,
    lead_partition,
    partition_name,
)
from tables.domain.names import raw_table_name
from tables.zk.records import read_record

from .context import ClusterContext

__all__ = ["lead_controller_for", "resource_enabled"]


def resource_enabled(ctx: ClusterContext) -> bool:
    found = read_record(ctx.client, ctx.paths.resource_config(LEAD_CONTROLLER_RESOURCE))
    return found is None or found.record.simple_fields.get("RESOURCE_ENABLED") != "false"


def lead_controller_for(ctx: ClusterContext, table: str) -> str | None:
    """The participant id (`Controller_<host>_<port>`) leading `table`, or None if none does."""
    if not resource_enabled(ctx):
        leader = read_record(ctx.client, ctx.paths.controller_leader)
        return None if leader is None else f"Controller_{leader.record.id}"
    ideal = read_record(ctx.client, ctx.paths.idealstate(LEAD_CONTROLLER_RESOURCE))
    partitions = DEFAULT_NUM_PARTITIONS
    if ideal is not None:
        partitions = int(ideal.record.simple_fields.get("NUM_PARTITIONS", partitions))
    view = read_record(ctx.client, ctx.paths.externalview(LEAD_CONTROLLER_RESOURCE))
    if view is None:
        return None
    partition = partition_name(lead_partition(raw_table_name(table), partitions))
    masters = [i for i, s in view.record.map_fields.get(partition, {}).items() if s == "MASTER"]
    return masters[0] if masters else None
