"""Which controller leads a table (reference §8): the MASTER of the table's partition of
`leadControllerResource` in that resource's EXTERNALVIEW. When the resource is disabled
(ResourceConfig RESOURCE_ENABLED = "false"), the Helix cluster leader (`/CONTROLLER/LEADER`, id
`<host>_<port>`) leads every table, as Pinot's LeadControllerManager falls back.
"""

from __future__ import annotations

from typing import NamedTuple

from tables.domain.leadership import (
    DEFAULT_NUM_PARTITIONS,
    LEAD_CONTROLLER_RESOURCE,
    lead_partition,
    partition_name,
)
from tables.domain.names import raw_table_name, table_type_of
from tables.zk.errors import NoNode
from tables.zk.records import read_record

from .context import ClusterContext

__all__ = [
    "LeaderEntry",
    "lead_controller_for",
    "leader_for_table",
    "leader_table_map",
    "resource_enabled",
]


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


class LeaderEntry(NamedTuple):
    """One partition of leadControllerResource: its MASTER (None if none) and its tables."""

    leader_id: str | None
    table_names: list[str]


def _lead_partitions(ctx: ClusterContext) -> int:
    ideal = read_record(ctx.client, ctx.paths.idealstate(LEAD_CONTROLLER_RESOURCE))
    if ideal is None:
        return DEFAULT_NUM_PARTITIONS
    return int(ideal.record.simple_fields.get("NUM_PARTITIONS", DEFAULT_NUM_PARTITIONS))


def _masters(ctx: ClusterContext) -> dict[str, str]:
    """Partition name -> its MASTER participant, from the resource's EXTERNALVIEW."""
    view = read_record(ctx.client, ctx.paths.externalview(LEAD_CONTROLLER_RESOURCE))
    if view is None:
        return {}
    out: dict[str, str] = {}
    for partition, states in view.record.map_fields.items():
        masters = sorted(i for i, s in states.items() if s == "MASTER")
        if masters:
            out[partition] = masters[0]
    return out


def _table_resources(ctx: ClusterContext) -> list[str]:
    """The tables (with type) that have an IdealState, as Pinot's getAllTables lists them."""
    try:
        names = ctx.client.get_children(ctx.paths.idealstates)
    except NoNode:
        return []
    return sorted(n for n in names if table_type_of(n) is not None)


def leader_table_map(ctx: ClusterContext) -> tuple[bool, dict[str, LeaderEntry]]:
    """Pinot's `GET /leader/tables`: (resource enabled, partition name -> entry), every partition
    present in order, each table (with type) under its partition. Disabled: (False, {})."""
    if not resource_enabled(ctx):
        return False, {}
    count, masters = _lead_partitions(ctx), _masters(ctx)
    entries = {
        partition_name(i): LeaderEntry(masters.get(partition_name(i)), []) for i in range(count)
    }
    for table in _table_resources(ctx):
        entries[partition_name(lead_partition(raw_table_name(table), count))].table_names.append(
            table
        )
    return True, entries


def leader_for_table(ctx: ClusterContext, table: str) -> tuple[bool, dict[str, LeaderEntry]]:
    """Pinot's `GET /leader/tables/{table}`: the single entry of the table's partition, with
    `table` as given. Disabled: (False, {})."""
    if not resource_enabled(ctx):
        return False, {}
    partition = partition_name(lead_partition(raw_table_name(table), _lead_partitions(ctx)))
    return True, {partition: LeaderEntry(_masters(ctx).get(partition), [table])}
