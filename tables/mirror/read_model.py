"""The ONE read model of the database mirror: what the console's pages (`console.pages.queries`),
its JSON API (`console.api.v1_queries`) and `/metrics` (`monitoring.controller_metrics`) read.

Contract:
- Read-only, and only the mirror models of `tables.models` (written by `tables.mirror.sync`):
  nothing here touches ZooKeeper or writes a row.
- `MIRROR_NAME` names the mirror's `MirrorState` row (the sync writes it, everyone else reads it).
  `freshness(state=None, now=None)` says how old the mirror is: `stale` when it never synced or
  its last successful sync is older than `STALE_AFTER_INTERVALS` sync intervals
  (`settings.MIRROR_SYNC_SECONDS`). One query (none when given the state row).
- The filters (`tables`, `partitions`, `segments`, `error_segments`, `leaders`, `instances`,
  `audit`) each
  return a lazy QuerySet costing one query when evaluated; an empty or None argument does not
  filter. Callers add what only their output needs (`defer`, paging, serializing, view models).
- `table_order(sort)` is the one table of sort keys (`TABLE_SORTS`) shared by the pages' column
  headers and the API's `sort=` parameter; an unknown key falls back to `DEFAULT_TABLE_SORT`.
- `table_named(name)`: a table by typed name, or by raw name (REALTIME first); None if unknown.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from tables.domain.names import table_type_of
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
    "DEFAULT_TABLE_SORT",
    "INSTANCE_KINDS",
    "MIRROR_NAME",
    "PARTITIONS_WORST_FIRST",
    "SEGMENT_STATES",
    "STALE_AFTER_INTERVALS",
    "TABLE_SORTS",
    "Freshness",
    "audit",
    "error_segments",
    "freshness",
    "instances",
    "last_synced",
    "leaders",
    "mirror_state",
    "partitions",
    "segments",
    "table_named",
    "table_order",
    "tables",
]

MIRROR_NAME = "zk"
STALE_AFTER_INTERVALS = 3
TABLE_SORTS: dict[str, str] = {
    "name": "name",
    "health": "health_rank",
    "lag": "max_records_lag",
    "time_lag": "max_time_lag_ms",
    "rate": "rows_per_s",
    "partitions": "num_partitions",
    "segments": "segment_count",
    "errors": "error_segments",
}
DEFAULT_TABLE_SORT = "-health"
SEGMENT_STATES = ("CONSUMING", "ONLINE", "ERROR", "OFFLINE", "UPDATING")
INSTANCE_KINDS = ("SERVER", "CONTROLLER", "BROKER", "MINION", "OTHER")
ERROR_SEGMENT_ORDER = ("table__name", "partition", "sequence", "name")
PARTITIONS_WORST_FIRST = (
    "-health_rank",
    "-records_lag",
    "-time_lag_ms",
    "-stalled_s",
    "table__name",
    "partition",
)


# --- the mirror's own freshness -------------------------------------------------------------


@dataclass(frozen=True)
class Freshness:
    """How old the mirror is. `age_s` is None when it never synced successfully."""

    last_synced: datetime | None
    age_s: float | None
    interval_s: float
    duration_ms: int = 0
    error: str = ""

    @property
    def threshold_s(self) -> float:
        """The age past which the mirror is stale."""
        return STALE_AFTER_INTERVALS * self.interval_s

    @property
    def stale(self) -> bool:
        return self.age_s is None or self.age_s > self.threshold_s


def mirror_state() -> MirrorState:
    """The mirror's state row; an unsaved blank one (never synced) before the first sync."""
    found = MirrorState.objects.filter(name=MIRROR_NAME).first()
    return found if found is not None else MirrorState(name=MIRROR_NAME)


def last_synced() -> datetime | None:
    """When the mirror last synced successfully (None: never)."""
    rows = MirrorState.objects.filter(name=MIRROR_NAME)
    return rows.values_list("last_synced", flat=True).first()


def freshness(state: MirrorState | None = None, now: datetime | None = None) -> Freshness:
    """The mirror's age and staleness, from `state` (read when not given)."""
    state = state if state is not None else mirror_state()
    interval = float(settings.MIRROR_SYNC_SECONDS)
    if state.last_synced is None:
        return Freshness(None, None, interval, state.duration_ms, state.error)
    age = max(0.0, ((now or timezone.now()) - state.last_synced).total_seconds())
    return Freshness(state.last_synced, age, interval, state.duration_ms, state.error)


# --- tables ---------------------------------------------------------------------------------


def table_named(name: str) -> MirroredTable | None:
    """The table with typed name `name`, or for a raw name its REALTIME table, else OFFLINE."""
    names = [name] if table_type_of(name) else [f"{name}_REALTIME", f"{name}_OFFLINE"]
    return MirroredTable.objects.filter(name__in=names).order_by("name").last()


def tables(
    *,
    q: str = "",
    health: Collection[str] = (),
    tenant: str = "",
    paused: bool | None = None,
    pauseless: bool | None = None,
    table_type: str = "",
) -> QuerySet[MirroredTable]:
    """Tables by name substring, health (any of), tenant, pause state, pauseless and type."""
    rows = MirroredTable.objects.all()
    if q:
        rows = rows.filter(name__icontains=q)
    if health:
        rows = rows.filter(health__in=sorted(health))
    if tenant:
        rows = rows.filter(tenant=tenant)
    if paused is not None:
        rows = rows.filter(paused=paused)
    if pauseless is not None:
        rows = rows.filter(pauseless=pauseless)
    if table_type:
        rows = rows.filter(table_type=table_type)
    return rows


def table_order(sort: str) -> tuple[str, tuple[str, ...]]:
    """(the sort key in effect, the columns to order by): `-key` descending, ties by name."""
    key = sort.lstrip("-")
    if key not in TABLE_SORTS:
        sort, key = DEFAULT_TABLE_SORT, DEFAULT_TABLE_SORT.lstrip("-")
    column = TABLE_SORTS[key]
    order = (f"-{column}" if sort.startswith("-") else column,)
    return sort, order if column == "name" else (*order, "name")


# --- partitions -----------------------------------------------------------------------------


def partitions(
    *,
    table: MirroredTable | None = None,
    verdict: str = "",
    health: str = "",
    table_contains: str = "",
) -> QuerySet[PartitionStatus]:
    """Stream partitions (with their table) of one table or of every table, by verdict, health
    and table name substring; in the model's order (table, partition) unless the caller orders
    them, e.g. by `PARTITIONS_WORST_FIRST`."""
    rows = PartitionStatus.objects.select_related("table")
    if table is not None:
        rows = rows.filter(table=table)
    if verdict:
        rows = rows.filter(verdict=verdict)
    if health:
        rows = rows.filter(health=health)
    if table_contains:
        rows = rows.filter(table__name__icontains=table_contains)
    return rows


# --- segments -------------------------------------------------------------------------------


def segments(
    table: MirroredTable,
    *,
    state: Collection[str] = (),
    partition: int | None = None,
    status: str = "",
    q: str = "",
) -> QuerySet[MirroredSegment]:
    """A table's segments by display state (any of), partition, ZK status and name substring."""
    rows = MirroredSegment.objects.filter(table=table)
    if state:
        rows = rows.filter(display_state__in=sorted(state))
    if partition is not None:
        rows = rows.filter(partition=partition)
    if status:
        rows = rows.filter(status=status)
    if q:
        rows = rows.filter(name__icontains=q)
    return rows


def error_segments(
    *, table: MirroredTable | None = None, table_contains: str = ""
) -> QuerySet[MirroredSegment]:
    """Segments with an ERROR replica or OFFLINE on every replica, across tables (or of one
    table, or of the tables whose name contains `table_contains`), by table, partition and
    sequence."""
    rows = MirroredSegment.objects.filter(Q(has_error=True) | Q(all_offline=True))
    if table is not None:
        rows = rows.filter(table=table)
    if table_contains:
        rows = rows.filter(table__name__icontains=table_contains)
    return rows.select_related("table").order_by(*ERROR_SEGMENT_ORDER)


# --- leaders, instances and audit -----------------------------------------------------------


def leaders() -> QuerySet[LeadControllerPartition]:
    """The leadControllerResource partitions, by partition id."""
    return LeadControllerPartition.objects.order_by("partition_id")


def instances(
    *, kind: str = "", live: bool | None = None, tag: str = ""
) -> QuerySet[MirroredInstance]:
    """Participants by kind, liveness and tag, by kind and name."""
    rows = MirroredInstance.objects.all()
    if kind:
        rows = rows.filter(kind=kind)
    if live is not None:
        rows = rows.filter(live=live)
    if tag:
        # JSON list membership, portable across SQLite and PostgreSQL.
        rows = rows.filter(pk__in=[i.pk for i in rows if tag in (i.tags or [])])
    return rows.order_by("kind", "name")


def audit(
    *,
    user: str = "",
    action: str = "",
    result: str = "",
    source: str = "",
    target: str = "",
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[AuditEntry]:
    """Audit entries by username and target substrings, action, result, source and a time
    window (`since` inclusive, `until` exclusive), newest first."""
    rows = AuditEntry.objects.all()
    if user:
        rows = rows.filter(username__icontains=user)
    for key, value in (("action", action), ("result", result), ("source", source)):
        if value:
            rows = rows.filter(**{key: value})
    if target:
        rows = rows.filter(target__icontains=target)
    if since:
        rows = rows.filter(at__gte=since)
    if until:
        rows = rows.filter(at__lt=until)
    return rows.order_by("-at", "-id")
