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
- For the ingestion doctor and the mirror-triggered healing (`tables.mirror.diagnose`):
  `doctor_segments` (the segments the healer's decisions depend on), `last_healing_runs` (one
  aggregate query), `live_servers` and `max_completion_ms` (the cluster's guard length, as the
  sync mirrored it).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db.models import Max, Q, QuerySet
from django.utils import timezone

from tables.domain.healing import DEFAULT_MAX_SEGMENT_COMPLETION_TIME_MS
from tables.domain.names import table_type_of
from tables.models import (
    AuditEntry,
    HealingRun,
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
    "doctor_segments",
    "error_segments",
    "freshness",
    "instances",
    "last_healing_runs",
    "last_synced",
    "leaders",
    "live_servers",
    "max_completion_ms",
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


# --- the ingestion doctor -------------------------------------------------------------------

COMPLETED_STATUSES = ("DONE", "UPLOADED")
DOCTOR_SEGMENT_FIELDS = (
    "table", "name", "partition", "sequence", "status", "start_offset", "end_offset",
    "metadata_mtime_ms", "ideal_states", "external_states",
)  # fmt: skip


def doctor_segments(
    table_ids: Collection[int],
    *,
    partitions: Mapping[int, Collection[int]] | None = None,
    latest: Collection[str] = (),
    with_metadata: bool = False,
) -> QuerySet[MirroredSegment]:
    """The segments the healer's decisions depend on (`tables.domain.doctor_facts.outlook`):
    those not DONE/UPLOADED, with an ERROR replica, OFFLINE on every replica, with a CONSUMING
    replica or not converged, plus the ones named in `latest` (each partition's latest segment
    of the IdealState, when it is none of those). Of the tables `table_ids`, or only of the
    `partitions` given per table id. Only `DOCTOR_SEGMENT_FIELDS` are loaded (and `metadata`
    `with_metadata`)."""
    interesting = (
        ~Q(status__in=COMPLETED_STATUSES)
        | Q(has_error=True)
        | Q(all_offline=True)
        | Q(display_state__in=("CONSUMING", "UPDATING", "ERROR"))
    )
    if latest:
        interesting |= Q(name__in=sorted(latest))
    rows = MirroredSegment.objects.filter(interesting)
    if partitions is not None:
        where = Q(pk__in=[])
        for table_id, numbers in sorted(partitions.items()):
            where |= Q(table_id=table_id, partition__in=sorted(numbers))
        rows = rows.filter(where)
    else:
        rows = rows.filter(table_id__in=sorted(table_ids))
    fields = (*DOCTOR_SEGMENT_FIELDS, "metadata") if with_metadata else DOCTOR_SEGMENT_FIELDS
    return rows.only(*fields).order_by("table_id", "name")


def last_healing_runs(tables: Collection[str]) -> dict[str, tuple[datetime, datetime | None]]:
    """Per table name (with type) that has healing runs: (its last run's start, its last
    scheduled run's start or None). One query."""
    if not tables:
        return {}
    rows = (
        HealingRun.objects.filter(table__in=sorted(tables))
        .values("table")
        .annotate(
            last=Max("started_at"),
            last_scheduled=Max("started_at", filter=Q(trigger=HealingRun.Trigger.SCHEDULE)),
        )
        .order_by()
    )
    return {row["table"]: (row["last"], row["last_scheduled"]) for row in rows}


def live_servers() -> frozenset[str]:
    """The servers the mirror has as live in ZooKeeper. One query."""
    rows = MirroredInstance.objects.filter(kind="SERVER", live=True)
    return frozenset(rows.values_list("name", flat=True))


def max_completion_ms(state: MirrorState | None = None) -> int:
    """The cluster's max.segment.completion.time.millis as the sync last read it, else Pinot's
    default. One query (none when given the state row)."""
    state = state if state is not None else mirror_state()
    return state.max_completion_ms or DEFAULT_MAX_SEGMENT_COMPLETION_TIME_MS
