"""The mirror of leadControllerResource (`tables.mirror.sync` reads its znodes in the instances'
round trip and calls `sync_lead_controller`; the contract is in that module's docstring):
each partition's live MASTER, its tables, and since when it has had none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from django.db.models import OuterRef, Subquery

from tables.domain.leadership import LEAD_CONTROLLER_RESOURCE, lead_partition, partition_name
from tables.domain.names import raw_table_name
from tables.domain.znrecord import ZNRecord
from tables.mirror.zk_reads import Pending, Znode, record_of
from tables.models import LeadControllerPartition, LeadershipChange, MirroredInstance

__all__ = ["CONTROLLER_PREFIX", "LEAD_FIELDS", "LeadReads", "sync_lead_controller"]


class LeadReport(Protocol):
    """What this module fills in of `tables.mirror.sync.SyncReport`."""

    warnings: list[str]
    cluster_leader: str | None
    lead_resource_enabled: bool | None
    lead_leaderless: int


CONTROLLER_PREFIX = "Controller_"
LEAD_FIELDS = ["name", "controller", "tables", "leaderless_since"]


def _record(znode: Znode | None, what: str, report: LeadReport) -> ZNRecord | None:
    return record_of(znode, what, report.warnings)


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


@dataclass(frozen=True)
class LeadReads:
    """The lead controller resource's znodes, read in the instances' round trip."""

    ideal: Pending[Znode | None]
    view: Pending[Znode | None]
    leader: Pending[Znode | None]  # /CONTROLLER/LEADER
    config: Pending[Znode | None]  # /CONFIGS/RESOURCE/leadControllerResource


def _cluster_leader(reads: LeadReads, report: LeadReport) -> tuple[str, bool]:
    """(participant id of the Helix cluster leader, "" if none; RESOURCE_ENABLED)."""
    leader = _record(reads.leader.result(), "cluster leader", report)
    name = leader.id if leader is not None else ""
    if name and not name.startswith(CONTROLLER_PREFIX):  # Helix writes <host>_<port>
        name = CONTROLLER_PREFIX + name
    config = _record(reads.config.result(), f"{LEAD_CONTROLLER_RESOURCE} config", report)
    enabled = config is None or config.simple_fields.get("RESOURCE_ENABLED") != "false"
    return name, enabled


def _live_master(view: ZNRecord | None, i: int, live: set[str]) -> str:
    states = view.map_fields.get(partition_name(i), {}) if view is not None else {}
    return next(iter(sorted(c for c, s in states.items() if s == "MASTER" and c in live)), "")


def _leaderless_since(
    rows: Mapping[int, LeadControllerPartition], leaderless: list[int], now: datetime
) -> dict[int, datetime]:
    """Since when each leaderless partition has had no MASTER (see the module docstring)."""
    if not leaderless:
        return {}
    newest = LeadershipChange.objects.filter(partition_id=OuterRef("partition_id"))
    newest = newest.order_by("-at", "-id").values("pk")[:1]
    latest = {
        pid: (to, at)
        for pid, to, at in LeadershipChange.objects.filter(
            partition_id__in=leaderless, pk=Subquery(newest)
        ).values_list("partition_id", "to_controller", "at")
    }
    found: dict[int, datetime] = {}
    for i in leaderless:
        to, at = latest.get(i, (None, None))
        known = rows[i].leaderless_since if i in rows else None
        if to == "" and at is not None:
            found[i] = at  # the cluster leader recorded the loss
        elif known is not None and (at is None or at <= known):
            found[i] = known
        else:
            found[i] = now
    return found


def sync_lead_controller(
    reads: LeadReads,
    tables: list[str],
    instances: Mapping[str, MirroredInstance],
    now: datetime,
    report: LeadReport,
) -> int | None:
    """Mirror leadControllerResource (see the module docstring); returns its number of
    partitions (None when absent)."""
    leader, enabled = _cluster_leader(reads, report)
    report.cluster_leader, report.lead_resource_enabled = leader, enabled
    ideal_record = _record(reads.ideal.result(), LEAD_CONTROLLER_RESOURCE, report)
    view = _record(reads.view.result(), f"{LEAD_CONTROLLER_RESOURCE} external view", report)
    count = None
    if ideal_record is not None:
        count = _int(ideal_record.simple_fields.get("NUM_PARTITIONS")) or len(
            set(ideal_record.map_fields) | set(ideal_record.list_fields)
        )
    if not count:
        LeadControllerPartition.objects.all().delete()
        return None
    led: dict[int, list[str]] = {i: [] for i in range(count)}
    for table in tables:
        led[lead_partition(raw_table_name(table), count)].append(table)
    live = {name for name, row in instances.items() if row.live}
    masters = {i: _live_master(view, i, live) for i in range(count)}
    fallback = not enabled and bool(leader)  # the cluster leader leads every table
    rows = {row.partition_id: row for row in LeadControllerPartition.objects.all()}
    orphans = [i for i, master in masters.items() if not master and not fallback]
    since = _leaderless_since(rows, orphans, now)
    report.lead_leaderless = len(orphans)
    creates, updates = [], []
    for i in range(count):
        values = {
            "name": partition_name(i),
            "controller": masters[i],
            "tables": led[i],
            "leaderless_since": since.get(i),
        }
        row = rows.get(i)
        if row is None:
            creates.append(LeadControllerPartition(partition_id=i, last_synced=now, **values))
        elif any(getattr(row, k) != v for k, v in values.items()):
            for key, value in values.items():
                setattr(row, key, value)
            updates.append(row)
    LeadControllerPartition.objects.bulk_create(creates)
    LeadControllerPartition.objects.bulk_update(updates, LEAD_FIELDS)
    LeadControllerPartition.objects.filter(partition_id__gte=count).delete()
    return count
