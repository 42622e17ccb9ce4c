"""Which controller leads a table (reference §8): the MASTER of the table's partition of
`leadControllerResource` in that resource's EXTERNALVIEW. When the resource is disabled
(ResourceConfig RESOURCE_ENABLED = "false"), the Helix cluster leader (`/CONTROLLER/LEADER`, id
`<host>_<port>`) leads every table, as Pinot's LeadControllerManager falls back.

Contract:
- `lead_controller_for(ctx, table)` and `table_leaders(ctx)` answer who acts for a table now: a
  MASTER counts only while its LIVEINSTANCE exists. The EXTERNALVIEW is written by the cluster
  leader from the live controllers' CURRENTSTATEs, so it goes stale when every controller died; a
  MASTER whose live instance is gone leads nothing. With the resource disabled, the table's leader
  is `Controller_<id of /CONTROLLER/LEADER>`, or nobody while that (ephemeral) znode is absent.
  Several live MASTERs on one partition (a view caught mid-change): the first by name.
- `table_leaders(ctx)` reads the resource config, the IdealState (NUM_PARTITIONS), the EXTERNALVIEW
  and LIVEINSTANCES once (or the resource config and `/CONTROLLER/LEADER` when disabled) and
  answers for any number of tables, with why a table has no leader (`TableLeaders.why_none`).
- `leader_table_map` / `leader_for_table` are Pinot's `GET /leader/tables[/{table}]`: they report
  the EXTERNALVIEW's MASTER as Pinot does, live or not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from tables.domain.leadership import (
    DEFAULT_NUM_PARTITIONS,
    LEAD_CONTROLLER_RESOURCE,
    lead_partition,
    partition_name,
)
from tables.domain.names import raw_table_name, table_type_of
from tables.zk.errors import NoNode
from tables.zk.records import VersionedRecord, read_record

from .context import ClusterContext

__all__ = [
    "LeaderEntry",
    "TableLeaders",
    "lead_controller_for",
    "leader_for_table",
    "leader_table_map",
    "resource_enabled",
    "table_leaders",
]

MASTER = "MASTER"


def resource_enabled(ctx: ClusterContext) -> bool:
    found = read_record(ctx.client, ctx.paths.resource_config(LEAD_CONTROLLER_RESOURCE))
    return found is None or found.record.simple_fields.get("RESOURCE_ENABLED") != "false"


@dataclass(frozen=True)
class TableLeaders:
    """One reading of who leads which table (see the module contract). `masters`: partition name
    -> the MASTERs the EXTERNALVIEW names (sorted); `live`: the live instances; `helix_leader`:
    `Controller_<id>` of `/CONTROLLER/LEADER` (read only when the resource is disabled)."""

    enabled: bool
    num_partitions: int = DEFAULT_NUM_PARTITIONS
    masters: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    live: frozenset[str] = frozenset()
    helix_leader: str | None = None

    def partition(self, table: str) -> str:
        """The table's partition of leadControllerResource (`table` raw or with type)."""
        return partition_name(lead_partition(raw_table_name(table), self.num_partitions))

    def leader(self, table: str) -> str | None:
        """The participant id (`Controller_<host>_<port>`) leading `table`, or None."""
        if not self.enabled:
            return self.helix_leader
        named = self.masters.get(self.partition(table), ())
        return next((master for master in named if master in self.live), None)

    def __call__(self, table: str) -> str | None:
        return self.leader(table)

    def why_none(self, table: str) -> str:
        """Why `table` has no leader (for a table that has none)."""
        if not self.enabled:
            return f"{LEAD_CONTROLLER_RESOURCE} is disabled and /CONTROLLER/LEADER is absent"
        named = self.masters.get(self.partition(table), ())
        if not named:
            return f"no MASTER in the {LEAD_CONTROLLER_RESOURCE} EXTERNALVIEW"
        return f"its MASTER {', '.join(named)} is not live (no LIVEINSTANCE)"


def table_leaders(ctx: ClusterContext) -> TableLeaders:
    """Who leads which table, from one read of the cluster (see the module contract)."""
    if not resource_enabled(ctx):
        leader = read_record(ctx.client, ctx.paths.controller_leader)
        return TableLeaders(False, helix_leader=_participant_of(leader))
    try:
        live = frozenset(ctx.client.get_children(ctx.paths.liveinstances))
    except NoNode:
        live = frozenset()
    return TableLeaders(True, _lead_partitions(ctx), _all_masters(ctx), live)


def _participant_of(found: VersionedRecord | None) -> str | None:
    if found is None or not found.record.id:
        return None
    return f"Controller_{found.record.id}"


def lead_controller_for(ctx: ClusterContext, table: str) -> str | None:
    """The participant id (`Controller_<host>_<port>`) leading `table` now, or None if none does:
    `table_leaders(ctx).leader(table)`."""
    return table_leaders(ctx).leader(table)


class LeaderEntry(NamedTuple):
    """One partition of leadControllerResource: its MASTER (None if none) and its tables."""

    leader_id: str | None
    table_names: list[str]


def _lead_partitions(ctx: ClusterContext) -> int:
    ideal = read_record(ctx.client, ctx.paths.idealstate(LEAD_CONTROLLER_RESOURCE))
    if ideal is None:
        return DEFAULT_NUM_PARTITIONS
    return int(ideal.record.simple_fields.get("NUM_PARTITIONS", DEFAULT_NUM_PARTITIONS))


def _all_masters(ctx: ClusterContext) -> dict[str, tuple[str, ...]]:
    """Partition name -> every MASTER the resource's EXTERNALVIEW names there, sorted."""
    view = read_record(ctx.client, ctx.paths.externalview(LEAD_CONTROLLER_RESOURCE))
    if view is None:
        return {}
    out: dict[str, tuple[str, ...]] = {}
    for partition, states in view.record.map_fields.items():
        masters = tuple(sorted(i for i, s in states.items() if s == MASTER))
        if masters:
            out[partition] = masters
    return out


def _masters(ctx: ClusterContext) -> dict[str, str]:
    """Partition name -> its MASTER as the EXTERNALVIEW names it (live or not, as Pinot reports)."""
    return {partition: masters[0] for partition, masters in _all_masters(ctx).items()}


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
