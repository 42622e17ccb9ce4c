"""The console's JSON API over the shared read model of the mirror (`tables.mirror.read_model`,
which the pages and `/metrics` read too): validated query parameters
(`console.api.v1_serializers.*QuerySerializer`) passed on to its filters, lookups that 404 (or
400 for a name no table could have) with Pinot's error shape, the API's own segment sort keys,
and the mirror's freshness as `GET /api/v1/mirror` shows it. Read-only: nothing here touches
ZooKeeper.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from tables import models
from tables.cluster.errors import BadRequest, NotFound
from tables.domain.names import raw_table_name, segment_name_problem, table_name_problem
from tables.mirror import read_model

__all__ = [
    "SEGMENT_SORTS",
    "audit",
    "error_segments",
    "freshness",
    "instances",
    "partition",
    "partitions",
    "segment",
    "segments",
    "table",
    "tables",
]

SEGMENT_SORTS: dict[str, tuple[str, ...]] = {
    "name": ("name",),
    "partition": ("partition", "sequence", "name"),
    "created": ("created_ms", "name"),
    "docs": ("total_docs", "name"),
    "size": ("size_bytes", "name"),
}


def freshness(state: models.MirrorState) -> dict[str, Any]:
    """Age of the mirror in seconds (null: never synced), whether it is stale
    (`read_model.freshness`) and the sync interval, as the serializer's context."""
    found = read_model.freshness(state)
    return {
        "age_seconds": None if found.age_s is None else round(found.age_s, 3),
        "stale": found.stale,
        "sync_interval_seconds": found.interval_s,
    }


# --- tables ---------------------------------------------------------------------------------------


def table(name: str) -> models.MirroredTable:
    """The mirrored table named `name` (raw or with type); 404 when the mirror has none, 400 when
    no table could have that name (tables.domain.names)."""
    if problem := table_name_problem(name):
        raise BadRequest(problem)
    found = read_model.table_named(name)
    if found is None:
        raise NotFound(f"table {raw_table_name(name)} not found")
    return found


def tables(params: dict[str, Any]) -> QuerySet[models.MirroredTable]:
    rows = read_model.tables(
        q=params.get("q") or "",
        health=params.get("health") or (),
        tenant=params.get("tenant") or "",
        paused=params.get("paused"),
        pauseless=params.get("pauseless"),
        table_type=params.get("type") or "",
    )
    _sort, order = read_model.table_order(params.get("sort") or read_model.DEFAULT_TABLE_SORT)
    return rows.order_by(*order)


# --- partitions -----------------------------------------------------------------------------------


def partitions(name: str) -> QuerySet[models.PartitionStatus]:
    return read_model.partitions(table=table(name))


def partition(name: str, number: int) -> models.PartitionStatus:
    found = partitions(name).filter(partition=number).first()
    if found is None:
        raise NotFound(f"partition {number} of table {raw_table_name(name)} not found")
    return found


# --- segments -------------------------------------------------------------------------------------


def segments(name: str, params: dict[str, Any]) -> QuerySet[models.MirroredSegment]:
    rows = read_model.segments(
        table(name),
        state=params.get("state") or (),
        partition=params.get("partition"),
        status=params.get("status") or "",
        q=params.get("q") or "",
    )
    sort = params.get("sort") or "partition"
    fields = SEGMENT_SORTS[sort.lstrip("-")]
    order = [("-" if sort.startswith("-") else "") + f for f in fields]
    return rows.select_related("table").order_by(*order)


def segment(name: str, segment_name: str) -> models.MirroredSegment:
    if problem := segment_name_problem(segment_name):
        raise BadRequest(problem)
    rows = read_model.segments(table(name)).filter(name=segment_name).select_related("table")
    found = rows.first()
    if found is None:
        raise NotFound(f"segment {segment_name} of table {raw_table_name(name)} not found")
    return found


def error_segments(params: dict[str, Any]) -> QuerySet[models.MirroredSegment]:
    """Segments with an ERROR replica or with every replica OFFLINE, across tables (or of the
    table `params["table"]`, 404 when unknown)."""
    one = table(params["table"]) if params.get("table") else None
    return read_model.error_segments(table=one)


# --- instances and audit ------------------------------------------------------------------------


def instances(params: dict[str, Any]) -> QuerySet[models.MirroredInstance]:
    return read_model.instances(
        kind=params.get("kind") or "", live=params.get("live"), tag=params.get("tag") or ""
    )


def audit(params: dict[str, Any]) -> QuerySet[models.AuditEntry]:
    return read_model.audit(
        user=params.get("user") or "",
        action=params.get("action") or "",
        result=params.get("result") or "",
        source=params.get("source") or "",
        target=params.get("target") or "",
        since=params.get("since"),
        until=params.get("until"),
    )
