"""Enable or disable a table: Pinot's `PUT /tables/{t}/state` (`toggleTableState`).

Contract:
- Disabling sets the table's IdealState simpleField `HELIX_ENABLED` to "false", enabling to
  "true", by compare-and-set (`update_idealstate`, retried on a version conflict); nothing else
  of the IdealState changes, and a table already in the wanted state is not written at all.
- What follows is the servers' (Helix's rule, `tables.domain.helix_enabled`): every replica of a
  disabled table goes OFFLINE (a consumer stops without committing, the ExternalView shows
  OFFLINE); on enable they follow the IdealState again (CONSUMING segments consume again from
  their ZK start offset, ONLINE ones load again).
- A malformed name is 400; a table without an IdealState is 404 "Table '<t>' does not exist".
"""

from __future__ import annotations

from tables.cluster.context import ClusterContext
from tables.cluster.errors import NotFound
from tables.cluster.reads import ClusterReader
from tables.domain.helix_enabled import is_enabled, with_enabled
from tables.zk.errors import NoNode
from tables.zk.group_commit import update_idealstate

__all__ = ["set_table_enabled"]


def set_table_enabled(ctx: ClusterContext, name: str, enabled: bool) -> str:
    """Set the table's HELIX_ENABLED; returns the table's name with type."""
    table = ClusterReader(ctx).table_name(name)
    try:
        result = update_idealstate(
            ctx.client, ctx.paths.idealstate(table), lambda record: with_enabled(record, enabled)
        )
    except NoNode:
        raise NotFound(f"Table '{name}' does not exist") from None
    assert is_enabled(result.record) == enabled
    return table
