"""Queries over the mirror for the console's JSON API: filters and sorts from validated query
parameters (`console.api.v1_serializers.*QuerySerializer`), lookups that 404 with Pinot's error
shape, and the mirror's freshness. Read-only: nothing here touches ZooKeeper.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from tables.controller.errors import BadRequest, NotFound
from tables.domain.names import (
    raw_table_name,
    segment_name_problem,
    table_name_problem,
    table_type_of,
)
from tables.models import (
    AuditEntry,
    LeadControllerPartition,
    MirroredInstance,
    MirroredSegment,
    MirroredTable,
    MirrorState,
    PartitionStatus,
)

__all__ = [
    "MIRROR_NAME",
    "audit",
    "error_segments",
    "freshness",
    "instances",
    "last_synced",
    "leaders",
    "mirror_state",
    "partition",
    "partitions",
    "segment",
    "segments",
    "table",
    "tables",
]

MIRROR_NAME = "zk"
STALE_AFTER_INTERVALS = 3

_TABLE_SORT = {
    "name": "name",
    "health": "health_rank",
    "lag": "max_records_lag",
    "time_lag": "max_time_lag_ms",
    "errors": "error_segments",
    "segments": "segment_count",
    "rate": "rows_per_s",
    "partitions": "num_partitions",
}
_SEGMENT_SORT = {
    "name": ("name",),
    "partition": ("partition", "sequence", "name"),
    "created": ("created_ms", "name"),
    "docs": ("total_docs", "name"),
    "size": ("size_bytes", "name"),
}


def _order(sort: str, keys: dict[str, Any]) -> list[str]:
    descending = sort.startswith("-")
    fields = keys[sort.lstrip("-")]
    fields = (fields,) if isinstance(fields, str) else fields
    return [("-" if descending else "") + f for f in fields]


# --- freshness ------------------------------------------------------------------------------------


def mirror_state() -> MirrorState:
    """The mirror's state row; an unsaved blank one (never synced) before the first sync."""
    found = MirrorState.objects.filter(name=MIRROR_NAME).first()
    return found if found is not None else MirrorState(name=MIRROR_NAME)


def last_synced() -> datetime | None:
    """When the mirror last synced successfully (None: never)."""
    return (
        MirrorState.objects.filter(name=MIRROR_NAME).values_list("last_synced", flat=True).first()
    )


def freshness(state: MirrorState, now: datetime | None = None) -> dict[str, Any]:
    """Age of the mirror in seconds, whether it is stale (never synced, or older than three sync
    intervals), and the sync interval."""
    interval = float(settings.MIRROR_SYNC_SECONDS)
    synced = state.last_synced
    if synced is None:
        return {"age_seconds": None, "stale": True, "sync_interval_seconds": interval}
    age = max(0.0, ((now or timezone.now()) - synced).total_seconds())
    return {
        "age_seconds": round(age, 3),
        "stale": age > STALE_AFTER_INTERVALS * interval,
        "sync_interval_seconds": interval,
    }


# --- tables ---------------------------------------------------------------------------------------


def table(name: str) -> MirroredTable:
    """The mirrored table named `name` (raw or with type); 404 when the mirror has none, 400 when
    no table could have that name (tables.domain.names)."""
    if problem := table_name_problem(name):
        raise BadRequest(problem)
    names = [name] if table_type_of(name) else [f"{name}_REALTIME", f"{name}_OFFLINE"]
    found = MirroredTable.objects.filter(name__in=names).order_by("name").last()
    if found is None:
        raise NotFound(f"table {raw_table_name(name)} not found")
    return found


def tables(params: dict[str, Any]) -> QuerySet[MirroredTable]:
    rows = MirroredTable.objects.all()
    if params.get("q"):
        rows = rows.filter(name__icontains=params["q"])
    if params.get("health"):
        rows = rows.filter(health__in=sorted(params["health"]))
    for flag in ("paused", "pauseless"):
        if params.get(flag) is not None:
            rows = rows.filter(**{flag: params[flag]})
    if params.get("tenant"):
        rows = rows.filter(tenant=params["tenant"])
    if params.get("type"):
        rows = rows.filter(table_type=params["type"])
    return rows.order_by(*_order(params.get("sort") or "-health", _TABLE_SORT), "name")


# --- partitions -----------------------------------------------------------------------------------


def partitions(name: str) -> QuerySet[PartitionStatus]:
    return PartitionStatus.objects.filter(table=table(name)).select_related("table")


def partition(name: str, number: int) -> PartitionStatus:
    found = partitions(name).filter(partition=number).first()
    if found is None:
        raise NotFound(f"partition {number} of table {raw_table_name(name)} not found")
    return found


# --- segments -------------------------------------------------------------------------------------


def segments(name: str, params: dict[str, Any]) -> QuerySet[MirroredSegment]:
    rows = MirroredSegment.objects.filter(table=table(name)).select_related("table")
    if params.get("state"):
        rows = rows.filter(display_state__in=sorted(params["state"]))
    if params.get("partition") is not None:
        rows = rows.filter(partition=params["partition"])
    if params.get("status"):
        rows = rows.filter(status=params["status"])
    if params.get("q"):
        rows = rows.filter(name__icontains=params["q"])
    return rows.order_by(*_order(params.get("sort") or "partition", _SEGMENT_SORT))


def segment(name: str, segment_name: str) -> MirroredSegment:
    if problem := segment_name_problem(segment_name):
        raise BadRequest(problem)
    found = (
        MirroredSegment.objects.filter(table=table(name), name=segment_name)
        .select_related("table")
        .first()
    )
    if found is None:
        raise NotFound(f"segment {segment_name} of table {raw_table_name(name)} not found")
    return found


def error_segments(params: dict[str, Any]) -> QuerySet[MirroredSegment]:
    """Segments with an ERROR replica or with every replica OFFLINE, across tables."""
    rows = MirroredSegment.objects.filter(Q(has_error=True) | Q(all_offline=True))
    if params.get("table"):
        rows = rows.filter(table=table(params["table"]))
    return rows.select_related("table").order_by("table__name", "partition", "sequence", "name")


# --- leaders, instances and audit --------------------------------------------------------------


def leaders() -> QuerySet[LeadControllerPartition]:
    return LeadControllerPartition.objects.order_by("partition_id")


def instances(params: dict[str, Any]) -> QuerySet[MirroredInstance]:
    rows = MirroredInstance.objects.all()
    if params.get("kind"):
        rows = rows.filter(kind=params["kind"])
    if params.get("live") is not None:
        rows = rows.filter(live=params["live"])
    if params.get("tag"):
        # JSON list membership, portable across SQLite and PostgreSQL.
        rows = rows.filter(pk__in=[i.pk for i in rows if params["tag"] in (i.tags or [])])
    return rows.order_by("kind", "name")


def audit(params: dict[str, Any]) -> QuerySet[AuditEntry]:
    rows = AuditEntry.objects.all()
    if params.get("user"):
        rows = rows.filter(username__icontains=params["user"])
    for key in ("action", "result", "source"):
        if params.get(key):
            rows = rows.filter(**{key: params[key]})
    if params.get("target"):
        rows = rows.filter(target__icontains=params["target"])
    if params.get("since"):
        rows = rows.filter(at__gte=params["since"])
    if params.get("until"):
        rows = rows.filter(at__lt=params["until"])
    return rows.order_by("-at", "-id")
