"""Mirror rows for page tests, written straight to the database (as `tables.mirror.sync` would).

Each helper takes the fields a test cares about and fills the rest with plausible values.
`cluster(tables=N, partitions=P)` builds a whole small cluster in bulk.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.utils import timezone

from tables.models import (
    HEALTH_RANK,
    AuditEntry,
    ConsumptionSample,
    LeadControllerPartition,
    MirroredInstance,
    MirroredSegment,
    MirroredTable,
    MirrorState,
    PartitionStatus,
)

VERDICT_HEALTH = {
    "CONSUMING": "GOOD",
    "LAGGING": "WARNING",
    "STALLED": "BAD",
    "PAUSED": "PAUSED",
    "NO_UPSTREAM_DATA": "GOOD",
    "CONSUMER_ERROR": "BAD",
    "MISSING_CONSUMING_SEGMENT": "BAD",
    "OFFSET_UNAVAILABLE": "BAD",
    "NOT_REPORTING": "WARNING",
    "COMMITTING": "GOOD",
}
START_MS = 1_700_000_000_000


def llc_name(raw: str, partition: int, sequence: int) -> str:
    return f"{raw}__{partition}__{sequence}__20231114T2213Z"


def mirror_state(age_s: float = 1.0, **fields: Any) -> MirrorState:
    now = timezone.now()
    defaults = {"last_synced": now - dt.timedelta(seconds=age_s), "duration_ms": 42}
    state, _ = MirrorState.objects.update_or_create(name="zk", defaults={**defaults, **fields})
    return state


def table(raw: str = "events", table_type: str = "REALTIME", **fields: Any) -> MirroredTable:
    health = fields.pop("health", "GOOD")
    values: dict[str, Any] = {
        "name": f"{raw}_{table_type}",
        "raw_name": raw,
        "table_type": table_type,
        "tenant": "DefaultTenant",
        "replication": 2,
        "stream_type": "redis" if table_type == "REALTIME" else "",
        "topic": f"{raw}-topic" if table_type == "REALTIME" else "",
        "flush_rows": 100_000,
        "flush_time": "6h",
        "health": health,
        "health_rank": HEALTH_RANK[health],
        "last_synced": timezone.now(),
        "config": {"tableName": f"{raw}_{table_type}", "tableType": table_type},
    }
    values.update(fields)
    return MirroredTable.objects.create(**values)


def replica(
    state: str = "CONSUMING", offset: int = 1000, upstream: int = 1000, **fields: Any
) -> dict[str, Any]:
    now_ms = int(timezone.now().timestamp() * 1000)
    values = {
        "state": state,
        "currentOffset": offset,
        "upstreamOffset": upstream,
        "recordsLag": upstream - offset,
        "availabilityLagMs": 0,
        "rowsPerSecond": 12.5,
        "consumerState": "CONSUMING",
        "phase": "CONSUMING",
        "lastConsumedMs": now_ms,
        "updatedMs": now_ms,
    }
    values.update(fields)
    return values


def partition(
    owner: MirroredTable, number: int = 0, verdict: str = "CONSUMING", **fields: Any
) -> PartitionStatus:
    health = fields.pop("health", VERDICT_HEALTH.get(verdict, "GOOD"))
    values: dict[str, Any] = {
        "table": owner,
        "partition": number,
        "consuming_segment": llc_name(owner.raw_name, number, 1),
        "latest_segment": llc_name(owner.raw_name, number, 1),
        "replicas": {"Server_a_8001": replica(), "Server_b_8002": replica()},
        "current_offset": 1000,
        "upstream_offset": 1000,
        "verdict": verdict,
        "health": health,
        "health_rank": HEALTH_RANK[health],
        "last_synced": timezone.now(),
    }
    values.update(fields)
    return PartitionStatus.objects.create(**values)


def segment(
    owner: MirroredTable, partition_id: int = 0, sequence: int = 0, **fields: Any
) -> MirroredSegment:
    state = fields.pop("display_state", "ONLINE")
    ev = "CONSUMING" if state == "CONSUMING" else "ONLINE"
    name = fields.pop("name", llc_name(owner.raw_name, partition_id, sequence))
    values: dict[str, Any] = {
        "table": owner,
        "name": name,
        "partition": partition_id,
        "sequence": sequence,
        "created_ms": START_MS + sequence * 60_000,
        "ideal_states": {"Server_a_8001": ev, "Server_b_8002": ev},
        "external_states": {"Server_a_8001": ev, "Server_b_8002": ev},
        "display_state": state,
        "status": "IN_PROGRESS" if state == "CONSUMING" else "DONE",
        "start_offset": str(sequence * 100),
        "end_offset": "" if state == "CONSUMING" else str(sequence * 100 + 100),
        "total_docs": 100,
        "size_bytes": 2048,
        "download_url": "" if state == "CONSUMING" else f"file:///deep/{name}",
        "metadata": {"segment.realtime.status": "DONE", "segment.name": name},
        "metadata_version": 1,
        "last_synced": timezone.now(),
    }
    values.update(fields)
    return MirroredSegment.objects.create(**values)


def instance(name: str, kind: str = "SERVER", live: bool = True, **fields: Any) -> MirroredInstance:
    values = {"host": "localhost", "port": 8000, "tags": ["DefaultTenant_REALTIME"]}
    values.update(fields)
    return MirroredInstance.objects.create(
        name=name, kind=kind, live=live, last_synced=timezone.now(), **values
    )


def lead_partition(pid: int, controller: str, tables: list[str]) -> LeadControllerPartition:
    return LeadControllerPartition.objects.create(
        partition_id=pid,
        name=f"leadControllerResource_{pid}",
        controller=controller,
        tables=tables,
        last_synced=timezone.now(),
    )


def sample(owner: MirroredTable, number: int, ago_s: float, **fields: Any) -> ConsumptionSample:
    values = {"current_offset": 1000, "records_lag": 5, "time_lag_ms": 1500, "rows_per_s": 10.0}
    values.update(fields)
    return ConsumptionSample.objects.create(
        table=owner,
        partition=number,
        sampled_at=timezone.now() - dt.timedelta(seconds=ago_s),
        **values,
    )


def audit(
    username: str = "alice",
    action: str = "pause",
    target: str = "",
    at: dt.datetime | None = None,
    **fields: Any,
) -> AuditEntry:
    values = {"role": "operator", "result": "OK", "source": "page", "reason": ""}
    values.update(fields)
    return AuditEntry.objects.create(
        at=at or timezone.now(), username=username, action=action, target=target, **values
    )


def cluster(tables: int, partitions: int = 2, start: int = 0) -> list[MirroredTable]:
    """`tables` realtime tables with `partitions` partitions each and two segments per partition,
    in bulk (a few queries)."""
    now = timezone.now()
    created = MirroredTable.objects.bulk_create(
        MirroredTable(
            name=f"t{i:04d}_REALTIME",
            raw_name=f"t{i:04d}",
            table_type="REALTIME",
            tenant=f"tenant{i % 3}",
            num_partitions=partitions,
            segment_count=partitions * 2,
            max_records_lag=i,
            last_synced=now,
        )
        for i in range(start, start + tables)
    )
    PartitionStatus.objects.bulk_create(
        PartitionStatus(
            table=t,
            partition=p,
            consuming_segment=llc_name(t.raw_name, p, 1),
            replicas={"Server_a_8001": replica(offset=10 * p)},
            records_lag=p,
            verdict="CONSUMING",
            last_synced=now,
        )
        for t in created
        for p in range(partitions)
    )
    MirroredSegment.objects.bulk_create(
        MirroredSegment(
            table=t,
            name=llc_name(t.raw_name, p, seq),
            partition=p,
            sequence=seq,
            display_state="CONSUMING" if seq else "ONLINE",
            ideal_states={"Server_a_8001": "ONLINE"},
            external_states={"Server_a_8001": "ONLINE"},
            last_synced=now,
        )
        for t in created
        for p in range(partitions)
        for seq in range(2)
    )
    return created
