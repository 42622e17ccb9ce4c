"""ExternalViews the controller computes (pure).

- `table_view`: a table's EXTERNALVIEW from the CURRENTSTATES of its live servers: segment ->
  {instance -> state}, where a server's state comes from its current state's `CURRENT_STATE`.
  Servers that are not live contribute nothing (their current states belong to a dead session).

The leadControllerResource EXTERNALVIEW is the cluster leader's: `tables.domain.lead_assignment`
(`lead_view`).
"""

from __future__ import annotations

from collections.abc import Mapping

from tables.domain.znrecord import ZNRecord

__all__ = ["table_view"]


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
