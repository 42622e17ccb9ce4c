"""What the console's pages show, read from the database mirror only (never ZooKeeper).

The filters, sort keys and the mirror's freshness are the shared read model's
(`tables.mirror.read_model`, which `/api/v1/` and `/metrics` read too); this module adds what
only the pages need: their query-string conventions (`paused=yes|no`), paging, related rows for
the view models and the charts' samples.

Every list is filtered, sorted and paged in SQL, and every page costs a fixed number of queries
whatever the cluster's size: related rows come with `select_related` or one extra bulk query,
never one query per row. Rows are shaped into small view models (`rows.py`) with numbers already
formatted, so templates stay logic-free.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field, replace
from typing import Any

from django.db.models import Count, Q, Sum
from django.utils import timezone

from console.pages import display
from console.pages.paging import Page, paginate
from console.pages.rows import (
    DeepStoreRow,
    PartitionRow,
    PauseInfo,
    SegmentRow,
    TableRow,
    pause_info,
    replica_comparison,
)
from monitoring import charts
from tables.domain.doctor import Diagnosis
from tables.mirror import read_model
from tables.mirror.diagnose import diagnose_partition, diagnose_statuses, healer_timing
from tables.mirror.flags import table_flags
from tables.mirror.read_model import DEFAULT_TABLE_SORT, Freshness
from tables.models import (
    AuditEntry,
    ConsumptionSample,
    Health,
    LeadControllerPartition,
    LeadershipChange,
    MirroredInstance,
    MirroredSegment,
    MirroredTable,
    PartitionStatus,
)

__all__ = [
    "HISTORY_PER_PAGE",
    "MirrorStatus",
    "audit_log",
    "deep_store_rows",
    "error_segments",
    "find_table",
    "instances",
    "leaders",
    "mirror_status",
    "overview",
    "partition_detail",
    "segment_detail",
    "table_detail",
    "table_list",
]

CHART_WINDOW = dt.timedelta(hours=1)
TABLE_SORTS = read_model.TABLE_SORTS
SEGMENT_STATES = read_model.SEGMENT_STATES
INSTANCE_KINDS = read_model.INSTANCE_KINDS
HISTORY_PER_PAGE = 50  # leadership changes per page of the leaders page


def _yes_no(value: str) -> bool | None:
    """A page filter's `yes`/`no` as a boolean; anything else does not filter."""
    return {"yes": True, "no": False}.get(value)


# --- the mirror's own freshness -------------------------------------------------------------


@dataclass(frozen=True)
class MirrorStatus(Freshness):
    """The mirror's freshness (`read_model.freshness`) with its age as the pages write it."""

    @property
    def age_text(self) -> str:
        return display.duration(self.age_s)


def mirror_status(now: dt.datetime | None = None) -> MirrorStatus:
    return MirrorStatus(**vars(read_model.freshness(now=now)))


# --- overview and triage ----------------------------------------------------------------------


@dataclass(frozen=True)
class Overview:
    counters: dict[str, int]
    verdict_counts: list[tuple[str, str, int]]
    page: Page[PartitionRow]


def _pausers(tables: list[MirroredTable]) -> dict[str, AuditEntry]:
    """The last successful pause of each paused table in `tables` (one query)."""
    names = [t.name for t in tables if t.paused or t.paused_partitions]
    if not names:
        return {}
    found: dict[str, AuditEntry] = {}
    entries = AuditEntry.objects.filter(action="pause", result="OK", target__in=names)
    for entry in entries.order_by("-at", "-id").only("username", "target", "at", "reason"):
        found.setdefault(entry.target, entry)
    return found


def _partition_rows(statuses: list[PartitionStatus]) -> list[PartitionRow]:
    tables = list({s.table_id: s.table for s in statuses}.values())
    pausers = _pausers(tables)
    pauses = {t.pk: pause_info(t, pausers.get(t.name)) for t in tables}
    now = timezone.now()
    return [PartitionRow.build(s, pauses[s.table_id], now) for s in statuses]


def _triage_rows(statuses: list[PartitionStatus]) -> list[PartitionRow]:
    """The triage page's rows, each partition the doctor does not find healthy with its
    diagnosis (a fixed number of queries for the whole page: `diagnose_statuses`)."""
    rows = _partition_rows(statuses)
    found = diagnose_statuses(statuses, _now_ms(timezone.now()))
    out = []
    for row in rows:
        diagnosis = found.get((row.status.table_id, row.partition))
        sick = diagnosis is not None and not diagnosis.healthy
        out.append(replace(row, diagnosis=diagnosis) if sick else row)
    return out


def _now_ms(now: dt.datetime) -> int:
    return int(now.timestamp() * 1000)


def _table_rows(tables: list[MirroredTable]) -> list[TableRow]:
    flags = table_flags(tables, _now_ms(timezone.now()))
    return [TableRow(t, flags[t.pk]) for t in tables]


def _counters() -> dict[str, int]:
    tables = MirroredTable.objects.aggregate(
        tables=Count("id"),
        realtime=Count("id", filter=Q(table_type="REALTIME")),
        error_segments=Sum("error_segments", default=0),
        missing_download_url=Sum("missing_download_url", default=0),
        missing_consuming=Sum("missing_consuming", default=0),
        paused_tables=Count("id", filter=Q(paused=True)),
        bad_tables=Count("id", filter=Q(health=Health.BAD)),
    )
    instances = MirroredInstance.objects.aggregate(
        servers=Count("id", filter=Q(kind="SERVER")),
        live_servers=Count("id", filter=Q(kind="SERVER", live=True)),
        controllers=Count("id", filter=Q(kind="CONTROLLER")),
        live_controllers=Count("id", filter=Q(kind="CONTROLLER", live=True)),
    )
    return {**tables, **instances}


def overview(
    *, verdict: str = "", table: str = "", health: str = "", page: Any = 1, per_page: Any = None
) -> Overview:
    """Every partition of every realtime table, worst first, with the cluster's counters."""
    statuses = read_model.partitions(verdict=verdict, health=health, table_contains=table)
    statuses = statuses.defer("table__config").order_by(*read_model.PARTITIONS_WORST_FIRST)
    counted = PartitionStatus.objects.values("verdict").annotate(n=Count("id")).order_by("verdict")
    verdicts = [
        (row["verdict"], display.verdict_label(row["verdict"]), row["n"]) for row in counted
    ]
    result = paginate(statuses, page, per_page)
    return Overview(_counters(), verdicts, result.map(_triage_rows))


# --- tables -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableList:
    page: Page[TableRow]
    sort: str
    tenants: list[str]
    health_counts: list[tuple[str, int]]


def table_list(
    *,
    q: str = "",
    health: str = "",
    tenant: str = "",
    paused: str = "",
    table_type: str = "",
    sort: str = DEFAULT_TABLE_SORT,
    page: Any = 1,
    per_page: Any = None,
) -> TableList:
    """Tables filtered by name substring, health, tenant, pause state and type; sorted; paged."""
    tables = read_model.tables(
        q=q,
        health=[health] if health else (),
        tenant=tenant,
        paused=_yes_no(paused),
        table_type=table_type,
    ).defer("config")
    sort, order = read_model.table_order(sort)
    tenants = MirroredTable.objects.exclude(tenant="").values_list("tenant", flat=True).distinct()
    counted = MirroredTable.objects.values("health").annotate(n=Count("id")).order_by()
    counts = {row["health"]: row["n"] for row in counted}
    return TableList(
        paginate(tables.order_by(*order), page, per_page).map(_table_rows),
        sort,
        sorted(set(tenants)),
        [(h, counts[h]) for h in Health.values if counts.get(h)],
    )


def find_table(name: str) -> MirroredTable | None:
    """The table with typed name `name`, or for a raw name its REALTIME (else OFFLINE) table:
    the view redirects to the typed name when they differ."""
    return read_model.table_named(name)


@dataclass(frozen=True)
class TableDetail:
    table: MirroredTable
    pause: PauseInfo
    row: TableRow
    partitions: list[PartitionRow]
    segments: Page[SegmentRow]
    segment_state: str
    state_counts: list[tuple[str, int]]
    controller: str
    figures: dict[str, dict[str, Any]]
    recent_actions: list[AuditEntry] = field(default_factory=list)
    deep_store: list[DeepStoreRow] = field(default_factory=list)  # REALTIME tables only

    @property
    def segment_total(self) -> int:
        return sum(n for _state, n in self.state_counts)

    @property
    def config_json(self) -> str:
        return json.dumps(self.table.config or {}, indent=2, sort_keys=True)


def _segment_rows(segments: list[MirroredSegment], now: dt.datetime) -> list[SegmentRow]:
    return [SegmentRow.build(s, now) for s in segments]


def _figures(table: MirroredTable, now: dt.datetime, partition: int | None = None) -> dict:
    samples = ConsumptionSample.objects.filter(table=table, sampled_at__gte=now - CHART_WINDOW)
    if partition is not None:
        samples = samples.filter(partition=partition)
    points = samples.order_by("partition", "sampled_at").values_list(
        "partition", "sampled_at", "rows_per_s", "records_lag", "time_lag_ms"
    )
    return charts.ingestion_figures(list(points), now, CHART_WINDOW)


def deep_store_rows(table: MirroredTable, now: dt.datetime) -> list[DeepStoreRow]:
    """The table's segments not in the deep store yet (`segmentsMissingDownloadUrl`: COMMITTING,
    or DONE with an empty download URL), oldest first, each with the healer's next step. One
    query; two more (its healing runs, the guard) only when there are any."""
    missing = Q(status="COMMITTING") | Q(status="DONE", download_url="")
    found = list(table.segments.filter(missing).defer("metadata").order_by("partition", "sequence"))
    if not found:
        return []
    runs = read_model.last_healing_runs([table.name]).get(table.name)
    timing = healer_timing(_now_ms(now), read_model.max_completion_ms(), runs)
    for segment in found:
        segment.table = table  # no query per row
    return [DeepStoreRow.build(segment, timing) for segment in found]


def _controller_of(table: MirroredTable) -> str:
    if table.lead_partition is None:
        return ""
    lead = LeadControllerPartition.objects.filter(partition_id=table.lead_partition).first()
    return lead.controller if lead else ""


def table_detail(
    table: MirroredTable,
    *,
    segment_state: str = "",
    page: Any = 1,
    per_page: Any = None,
    with_charts: bool = True,
    now: dt.datetime | None = None,
) -> TableDetail:
    now = now or timezone.now()
    statuses = list(table.partitions.all().order_by("partition"))
    for status in statuses:
        status.table = table  # no query per row
    pausers = _pausers([table])
    pause = pause_info(table, pausers.get(table.name))
    segments = read_model.segments(table, state=[segment_state] if segment_state else ())
    segments = segments.defer("metadata").order_by("-created_ms", "-sequence", "name")
    counted = table.segments.values("display_state").annotate(n=Count("id")).order_by()
    counts = {row["display_state"]: row["n"] for row in counted}
    recent = AuditEntry.objects.filter(target__startswith=table.name).order_by("-at", "-id")[:10]
    return TableDetail(
        table=table,
        pause=pause,
        row=_table_rows([table])[0],
        partitions=[PartitionRow.build(s, pause, now) for s in statuses],
        segments=paginate(segments, page, per_page).map(lambda s: _segment_rows(s, now)),
        segment_state=segment_state,
        state_counts=[(state, counts.get(state, 0)) for state in SEGMENT_STATES],
        controller=_controller_of(table),
        figures=_figures(table, now) if with_charts else {},
        recent_actions=list(recent),
        deep_store=deep_store_rows(table, now) if table.table_type == "REALTIME" else [],
    )


@dataclass(frozen=True)
class PartitionDetail:
    table: MirroredTable
    number: int
    row: PartitionRow | None
    segments: Page[SegmentRow]
    figures: dict[str, dict[str, Any]]
    diagnosis: Diagnosis | None = None

    @property
    def rows(self) -> list[PartitionRow]:
        return [self.row] if self.row else []


def partition_detail(
    table: MirroredTable,
    number: int,
    *,
    page: Any = 1,
    per_page: Any = None,
    with_charts: bool = True,
    now: dt.datetime | None = None,
) -> PartitionDetail | None:
    """One stream partition: the ingestion doctor's diagnosis, its replicas, its segments (newest
    first), its charts; None if the mirror knows nothing of it."""
    now = now or timezone.now()
    status = table.partitions.filter(partition=number).first()
    segments = read_model.segments(table, partition=number).defer("metadata")
    if status is None and not segments.exists():
        return None
    row = None
    if status is not None:
        status.table = table
        row = PartitionRow.build(status, pause_info(table, _pausers([table]).get(table.name)), now)
    ordered = segments.order_by("-sequence", "-created_ms", "name")
    return PartitionDetail(
        table=table,
        number=number,
        row=row,
        segments=paginate(ordered, page, per_page).map(lambda s: _segment_rows(s, now)),
        figures=_figures(table, now, number) if with_charts else {},
        diagnosis=(
            diagnose_partition(table, number, status, _now_ms(now))
            if table.table_type == "REALTIME"
            else None
        ),
    )


@dataclass(frozen=True)
class SegmentDetail:
    segment: MirroredSegment
    row: SegmentRow
    replicas: list[dict[str, Any]]
    metadata: list[tuple[str, Any]]


def segment_detail(
    table: MirroredTable, name: str, now: dt.datetime | None = None
) -> SegmentDetail | None:
    segment = table.segments.filter(name=name).first()
    if segment is None:
        return None
    segment.table = table
    return SegmentDetail(
        segment=segment,
        row=SegmentRow.build(segment, now or timezone.now()),
        replicas=replica_comparison(segment),
        metadata=sorted((segment.metadata or {}).items()),
    )


# --- cluster-wide lists ---------------------------------------------------------------------


def error_segments(
    *, table: str = "", page: Any = 1, per_page: Any = None, now: dt.datetime | None = None
) -> Page[SegmentRow]:
    """Every segment with an ERROR replica or OFFLINE on all replicas, oldest first."""
    now = now or timezone.now()
    segments = read_model.error_segments(table_contains=table).defer("metadata", "table__config")
    return paginate(segments, page, per_page).map(lambda s: _segment_rows(s, now))


@dataclass(frozen=True)
class LeaderRow:
    """One leadControllerResource partition. `controller` is its live MASTER as mirrored;
    `leaderless_for` is set while its tables have no lead controller."""

    partition: LeadControllerPartition
    live: bool | None
    tables: list[str]
    matches: bool
    leaderless: bool = False
    leaderless_for: str = ""

    @property
    def number(self) -> int:
        return self.partition.partition_id


@dataclass(frozen=True)
class ControllerRow:
    """A controller participant (or a name the resource or the leader znode mentions)."""

    name: str
    live: bool | None  # None: no such instance in the mirror
    enabled: bool | None
    partitions: list[int]
    cluster_leader: bool


@dataclass(frozen=True)
class ChangeRow:
    change: LeadershipChange
    leaderless_text: str


@dataclass(frozen=True)
class Leaders:
    rows: list[LeaderRow]
    controllers: list[ControllerRow]
    cluster_leader: str
    resource_enabled: bool | None  # None: never mirrored
    history: Page[ChangeRow]

    @property
    def leaderless(self) -> list[LeaderRow]:
        """The partitions whose tables have no lead controller, the longest first."""
        rows = [r for r in self.rows if r.leaderless]
        last = dt.datetime.max.replace(tzinfo=dt.UTC)  # an unknown start sorts last
        return sorted(rows, key=lambda r: (r.partition.leaderless_since or last, r.number))

    @property
    def tables_affected(self) -> list[str]:
        return sorted({t for r in self.leaderless for t in r.tables})

    @property
    def led_partitions(self) -> int:
        return sum(1 for r in self.rows if r.partition.controller)

    @property
    def live_controllers(self) -> int:
        return sum(1 for c in self.controllers if c.live)


def _leader_rows(
    partitions: list[LeadControllerPartition],
    live: dict[str, bool],
    fallback: bool,
    needle: str,
    now: dt.datetime,
) -> list[LeaderRow]:
    rows = []
    for p in partitions:
        leaderless = not p.controller and not fallback
        since = p.leaderless_since
        waited = display.duration((now - since).total_seconds()) if since else "unknown"
        rows.append(
            LeaderRow(
                partition=p,
                live=live.get(p.controller) if p.controller else None,
                tables=sorted(p.tables or []),
                matches=bool(needle) and any(needle in t.lower() for t in p.tables or []),
                leaderless=leaderless,
                leaderless_for=waited if leaderless else "",
            )
        )
    return rows


def _controller_rows(
    instances: list[MirroredInstance], partitions: list[LeadControllerPartition], leader: str
) -> list[ControllerRow]:
    led: dict[str, list[int]] = {}
    for p in partitions:
        if p.controller:
            led.setdefault(p.controller, []).append(p.partition_id)
    known = {i.name: i for i in instances}
    names = sorted({*known, *led, *([leader] if leader else [])})
    return [
        ControllerRow(
            name=name,
            live=known[name].live if name in known else None,
            enabled=known[name].enabled if name in known else None,
            partitions=sorted(led.get(name, [])),
            cluster_leader=name == leader,
        )
        for name in names
    ]


def leadership_history(
    *, partition: int | None = None, controller: str = "", page: Any = 1, per_page: Any = None
) -> Page[ChangeRow]:
    """The cluster leader's LeadershipChange records, newest first, optionally of one partition
    and/or one controller (as `from` or `to`); two queries (count, page)."""
    changes = LeadershipChange.objects.all()
    if partition is not None:
        changes = changes.filter(partition_id=partition)
    if controller:
        changes = changes.filter(Q(from_controller=controller) | Q(to_controller=controller))
    return paginate(changes, page, per_page or HISTORY_PER_PAGE).map(
        lambda items: [ChangeRow(c, display.millis(c.leaderless_ms)) for c in items]
    )


def leaders(
    *,
    table: str = "",
    partition: int | None = None,
    controller: str = "",
    page: Any = 1,
    per_page: Any = None,
    now: dt.datetime | None = None,
) -> Leaders:
    """The leaders page: every leadControllerResource partition with its controller and tables,
    the controllers, the cluster leader and the leadership history (five queries). While
    RESOURCE_ENABLED is false and a cluster leader exists, no partition is leaderless: the
    cluster leader leads every table (Pinot's fallback)."""
    now = now or timezone.now()
    state = read_model.mirror_state()
    partitions = list(read_model.leaders())
    names = {p.controller for p in partitions if p.controller} | {state.cluster_leader}
    instances = list(
        MirroredInstance.objects.filter(Q(kind="CONTROLLER") | Q(name__in=names - {""}))
    )
    live = {i.name: i.live for i in instances}
    fallback = state.lead_resource_enabled is False and bool(state.cluster_leader)
    return Leaders(
        rows=_leader_rows(partitions, live, fallback, table.lower(), now),
        controllers=_controller_rows(instances, partitions, state.cluster_leader),
        cluster_leader=state.cluster_leader,
        resource_enabled=state.lead_resource_enabled,
        history=leadership_history(
            partition=partition, controller=controller, page=page, per_page=per_page
        ),
    )


@dataclass(frozen=True)
class InstanceRow:
    instance: MirroredInstance
    lead_partitions: list[int]


def instances(
    *, kind: str = "", live: str = "", page: Any = 1, per_page: Any = None
) -> Page[InstanceRow]:
    rows = read_model.instances(kind=kind, live=_yes_no(live))
    leads: dict[str, list[int]] = {}
    for pid, controller in LeadControllerPartition.objects.values_list(
        "partition_id", "controller"
    ):
        leads.setdefault(controller, []).append(pid)
    return paginate(rows, page, per_page).map(
        lambda items: [InstanceRow(i, sorted(leads.get(i.name, []))) for i in items]
    )


@dataclass(frozen=True)
class AuditLog:
    page: Page[AuditEntry]
    actions: list[str]
    results: list[str]


def audit_log(
    *,
    user: str = "",
    action: str = "",
    result: str = "",
    target: str = "",
    page: Any = 1,
    per_page: Any = None,
) -> AuditLog:
    entries = read_model.audit(user=user, action=action, result=result, target=target)
    actions = AuditEntry.objects.order_by("action").values_list("action", flat=True).distinct()
    return AuditLog(
        paginate(entries, page, per_page),
        list(actions),
        list(AuditEntry.Result.values),
    )
