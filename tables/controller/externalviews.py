"""The controller's view-keeping: leadControllerResource's EXTERNALVIEW and, for the tables it
leads, each table's EXTERNALVIEW from its servers' CURRENTSTATES (the part of Helix's controller
this project runs itself). Every write is compare-and-set, and skipped when nothing changed, so
several controllers computing the same views converge without churning ZooKeeper.
"""

from __future__ import annotations

from tables.cluster.context import ClusterContext
from tables.cluster.leadership import lead_controller_for
from tables.domain.externalview import lead_controller_view, table_view
from tables.domain.leadership import DEFAULT_NUM_PARTITIONS, LEAD_CONTROLLER_RESOURCE
from tables.domain.znrecord import ZNRecord
from tables.zk.errors import NodeExists, NoNode
from tables.zk.records import create_record, read_record, update_record

__all__ = ["live_instances", "refresh_lead_controller_view", "refresh_table_views"]

CONTROLLER_TAG = "controller"


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


def _write_if_changed(ctx: ClusterContext, path: str, record: ZNRecord) -> bool:
    found = read_record(ctx.client, path)
    if found is None:
        try:
            create_record(ctx.client, path, record)
        except NodeExists:
            return _write_if_changed(ctx, path, record)
        return True
    if found.record.map_fields == record.map_fields:
        return False
    update_record(ctx.client, path, lambda _: record)
    return True


def refresh_lead_controller_view(ctx: ClusterContext) -> bool:
    ideal = read_record(ctx.client, ctx.paths.idealstate(LEAD_CONTROLLER_RESOURCE))
    partitions = DEFAULT_NUM_PARTITIONS
    if ideal is not None:
        partitions = int(ideal.record.simple_fields.get("NUM_PARTITIONS", partitions))
    controllers = []
    for instance in live_instances(ctx):
        config = read_record(ctx.client, ctx.paths.participant_config(instance))
        if config is not None and CONTROLLER_TAG in config.record.list_fields.get("TAG_LIST", []):
            controllers.append(instance)
    view = lead_controller_view(partitions, controllers)
    return _write_if_changed(ctx, ctx.paths.externalview(LEAD_CONTROLLER_RESOURCE), view)


def refresh_table_views(ctx: ClusterContext, instance_id: str) -> list[str]:
    """Recompute the EXTERNALVIEW of every REALTIME table this controller leads; returns the
    tables whose view changed."""
    live = live_instances(ctx)
    changed = []
    for table in _children(ctx, ctx.paths.idealstates):
        if not table.endswith("_REALTIME") or lead_controller_for(ctx, table) != instance_id:
            continue
        states = {}
        for instance, session in live.items():
            found = read_record(ctx.client, ctx.paths.currentstate(instance, session, table))
            if found is not None:
                states[instance] = found.record.map_fields
        if _write_if_changed(ctx, ctx.paths.externalview(table), table_view(table, states)):
            changed.append(table)
    return changed
