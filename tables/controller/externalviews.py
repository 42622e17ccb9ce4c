"""The controller's view-keeping: for the tables it leads, each table's EXTERNALVIEW from its
servers' CURRENTSTATES (the part of Helix's controller this project runs itself; the
leadControllerResource's own view is the cluster leader's, `tables.controller.cluster_leader`).
Every write is compare-and-set, and skipped when nothing changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from tables.cluster.context import ClusterContext
from tables.domain.externalview import table_view
from tables.domain.znrecord import ZNRecord
from tables.zk.errors import BadVersion, NodeExists, NoNode
from tables.zk.records import create_record, read_record, write_record

__all__ = ["live_instances", "refresh_table_views"]

log = logging.getLogger(__name__)


def _children(ctx: ClusterContext, path: str) -> list[str]:
    try:
        return ctx.client.get_children(path)
    except NoNode:
        return []


def live_instances(ctx: ClusterContext) -> dict[str, str]:
    """Live instance id -> its session id."""
    out = {}
    for instance in _children(ctx, ctx.paths.liveinstances):
        found = read_record(ctx.client, ctx.paths.liveinstance(instance))
        if found is not None:
            out[instance] = found.record.simple_fields.get("SESSION_ID", "")
    return out


#: Attempts of one view write that another writer keeps beating (the next refresh tries again).
WRITE_ATTEMPTS = 5


def _write_if_changed(ctx: ClusterContext, path: str, record: ZNRecord) -> bool:
    """Write the view unless equal; False when equal, or when another writer won every attempt
    (a controller that no longer leads the table, briefly): the next refresh looks again."""
    for _ in range(WRITE_ATTEMPTS):
        found = read_record(ctx.client, path)
        try:
            if found is None:
                create_record(ctx.client, path, record)
                return True
            if found.record.map_fields == record.map_fields:
                return False
            # A compare-and-set on the version just read: no second read of a large record.
            write_record(ctx.client, path, record, found.version)
            return True
        except (NodeExists, BadVersion, NoNode):  # written or deleted meanwhile: look again
            continue
    log.info("%s: written by someone else on each of %d attempts", path, WRITE_ATTEMPTS)
    return False


def refresh_table_views(ctx: ClusterContext, leads: Callable[[str], bool]) -> list[str]:
    """Recompute the EXTERNALVIEW of every REALTIME table this controller leads (`leads`, from
    memory); returns the tables whose view changed."""
    live = live_instances(ctx)
    changed = []
    for table in _children(ctx, ctx.paths.idealstates):
        if not table.endswith("_REALTIME") or not leads(table):
            continue
        states = {}
        for instance, session in live.items():
            found = read_record(ctx.client, ctx.paths.currentstate(instance, session, table))
            if found is not None:
                states[instance] = found.record.map_fields
        if _write_if_changed(ctx, ctx.paths.externalview(table), table_view(table, states)):
            changed.append(table)
    return changed
