"""ExternalViews the controller computes (pure).

- `lead_controller_view`: the leadControllerResource EXTERNALVIEW. Partition i is MASTERed by
  `sorted(live controllers)[i % n]`: deterministic, so every controller computes the same view
  and a compare-and-set write that changes nothing is skipped; with one controller it leads every
  table (the single-controller mode before Helix's own rebalancer is reproduced).
- `table_view`: a table's EXTERNALVIEW from the CURRENTSTATES of its live servers: segment ->
  {instance -> state}, where a server's state comes from its current state's `CURRENT_STATE`.
  Servers that are not live contribute nothing (their current states belong to a dead session).
"""

from __future__ import annotations

from collections.abc import Mapping

from tables.domain.leadership import LEAD_CONTROLLER_RESOURCE, partition_name
from tables.domain.znrecord import ZNRecord

__all__ = ["lead_controller_view", "table_view"]


def lead_controller_view(num_partitions: int, live_controllers: list[str]) -> ZNRecord:
    controllers = sorted(live_controllers)
    maps: dict[str, dict[str, str]] = {}
    for i in range(num_partitions):
        maps[partition_name(i)] = (
            {controllers[i % len(controllers)]: "MASTER"} if controllers else {}
        )
    return ZNRecord(
        id=LEAD_CONTROLLER_RESOURCE,
        simple_fields={"BUCKET_SIZE": "0", "STATE_MODEL_DEF_REF": "MasterSlave"},
        map_fields=maps,
    )


def table_view(
    table: str, current_states: Mapping[str, Mapping[str, Mapping[str, str]]]
) -> ZNRecord:
    """`current_states`: live instance -> segment -> its current-state fields."""
    maps: dict[str, dict[str, str]] = {}
    for instance in sorted(current_states):
        for segment, fields in current_states[instance].items():
            state = fields.get("CURRENT_STATE")
            if state:
                maps.setdefault(segment, {})[instance] = state
    return ZNRecord(
        id=table,
        simple_fields={
            "BUCKET_SIZE": "0",
            "STATE_MODEL_DEF_REF": "SegmentOnlineOfflineStateModel",
        },
        map_fields=maps,
    )
