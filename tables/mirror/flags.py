"""Flags read from the database mirror that pages, /api/v1, /healthz and the sync share.

- `under_replicated(status, replication)`: the partition's consuming segment has fewer replicas
  CONSUMING or ONLINE in the ExternalView (the states kept in `PartitionStatus.replicas`) than the
  table's replication.
- `never_committed_reasons(tables, now_ms)`: table id -> why it never commits
  (`tables.domain.table_checks.never_committed`), for the tables given as (table, rows arriving).
  Only tables whose segments are all CONSUMING can qualify: one query for those.
- `table_flags(tables, now_ms)`: per table of a page, whether its lag is known, its
  under-replicated partitions and its never-committed reason: two queries for the whole page.
- `ingestion_problems(now_ms)`: (table, reason) for every unpaused REALTIME table whose rows wait
  upstream while nothing was consumed or committed for a multiple of its flush time: two
  aggregate queries whatever the number of tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Count, Max, Min, Q

from tables.domain import table_checks, triage
from tables.models import MirroredSegment, MirroredTable, PartitionStatus

__all__ = [
    "COMMITTED_STATUSES",
    "TableFlags",
    "ingestion_problems",
    "never_committed_reasons",
    "table_flags",
    "under_replicated",
]

COMMITTED_STATUSES = ("DONE", "UPLOADED")
REALTIME = "REALTIME"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ev_states(replicas: Any) -> dict[str, str]:
    if not isinstance(replicas, dict):
        return {}
    return {r: str(v.get("state") or "") for r, v in replicas.items() if isinstance(v, dict)}


def under_replicated(consuming_segment: str, replicas: Any, replication: int) -> bool:
    """Fewer replicas of the consuming segment up in the ExternalView than `replication`."""
    if not consuming_segment or replication <= 0:
        return False
    return triage.replicas_up(_ev_states(replicas)) < replication


def never_committed_reasons(
    tables: Iterable[tuple[MirroredTable, bool]],
    now_ms: int,
    factor: float = table_checks.FLUSH_FACTOR,
) -> dict[int, str]:
    """table id -> reason, for the (table, rows arriving) pairs that never committed."""
    candidates = {
        table.pk: table
        for table, arriving in tables
        if arriving
        and table.table_type == REALTIME
        and not table.paused
        and 0 < table.segment_count <= table.consuming_count
    }
    if not candidates:
        return {}
    rows = (
        MirroredSegment.objects.filter(table_id__in=sorted(candidates))
        .values("table_id")
        .annotate(
            first=Min("creation_time_ms"),
            named=Min("created_ms"),
            done=Count("id", filter=Q(status__in=COMMITTED_STATUSES)),
        )
        .order_by()
    )
    out: dict[int, str] = {}
    for row in rows:
        table = candidates[row["table_id"]]
        reason = table_checks.never_committed(
            first_created_ms=row["first"] if row["first"] is not None else row["named"],
            committed=row["done"] > 0,
            flush_ms=table_checks.flush_time_ms(table.flush_time),
            rows_arriving=True,
            now_ms=now_ms,
            factor=factor,
        )
        if reason:
            out[table.pk] = reason
    return out


def _arriving(table: MirroredTable) -> bool:
    return table.rows_per_s > 0 or table.max_records_lag > 0


@dataclass(frozen=True)
class TableFlags:
    lag_known: bool = False
    under_replicated: tuple[int, ...] = field(default=())
    never_committed: str = ""


def table_flags(tables: Sequence[MirroredTable], now_ms: int) -> dict[int, TableFlags]:
    """The flags of `tables` (a page of them); tables without partitions know no lag."""
    known: dict[int, bool] = {}
    short: dict[int, list[int]] = {}
    replication = {t.pk: t.replication for t in tables}
    rows = PartitionStatus.objects.filter(table_id__in=list(replication)).values_list(
        "table_id", "partition", "upstream_offset", "consuming_segment", "replicas"
    )
    for table_id, partition, upstream, consuming, replicas in rows:
        known[table_id] = known.get(table_id, False) or triage.lag_known(upstream)
        if under_replicated(consuming, replicas, replication[table_id]):
            short.setdefault(table_id, []).append(partition)
    never = never_committed_reasons(((t, _arriving(t)) for t in tables), now_ms)
    return {
        t.pk: TableFlags(
            lag_known=known.get(t.pk, False),
            under_replicated=tuple(sorted(short.get(t.pk, []))),
            never_committed=never.get(t.pk, ""),
        )
        for t in tables
    }


def _ms(moment: datetime | None) -> int | None:
    return None if moment is None else (moment - _EPOCH) // timedelta(milliseconds=1)


def ingestion_problems(now_ms: int) -> list[tuple[str, str]]:
    """(table, reason) of every unpaused REALTIME table whose ingestion is down."""
    tables = {
        t.pk: t
        for t in MirroredTable.objects.filter(table_type=REALTIME, paused=False).only(
            "name", "flush_time", "paused"
        )
    }
    if not tables:
        return []
    partitions = (
        PartitionStatus.objects.filter(table_id__in=list(tables))
        .values("table_id")
        .annotate(
            waiting=Max("records_lag", filter=Q(upstream_offset__isnull=False)),
            progressed=Max("progressed_at"),
        )
        .order_by()
    )
    segments = dict(
        MirroredSegment.objects.filter(table_id__in=list(tables))
        .values("table_id")
        .annotate(newest=Max("created_ms"))
        .order_by()
        .values_list("table_id", "newest")
    )
    out = []
    for row in partitions:
        table = tables[row["table_id"]]
        reason = table_checks.ingestion_problem(
            rows_waiting=(row["waiting"] or 0) > 0,
            last_progress_ms=_ms(row["progressed"]),
            last_commit_ms=segments.get(table.pk),
            flush_ms=table_checks.flush_time_ms(table.flush_time),
            now_ms=now_ms,
        )
        if reason:
            out.append((table.name, reason))
    return sorted(out)
