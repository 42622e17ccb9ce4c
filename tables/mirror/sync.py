"""ZooKeeper -> database mirror, incremental by znode version.

    report = sync_cluster(ctx)            # the beat task `tables.sync_mirror`, `manage.py sync_zk`

Contract:
- `sync_cluster(ctx, now_ms=None) -> SyncReport` brings the mirror models of `tables.models`
  (MirroredTable, MirroredSegment, MirroredInstance, LeadControllerPartition, PartitionStatus,
  ConsumptionSample, MirrorState "zk") up to date with the cluster of `ctx`. It never raises for
  what it finds in ZooKeeper: a missing cluster, an unreachable service or any other failure is
  recorded in the report's `error` and in MirrorState, leaving the mirror as it was; a table whose
  znodes cannot be decoded is skipped (rows and versions unchanged) and listed in `tables_failed`.
- Cost: each mirrored table keeps the versions of its IdealState, ExternalView and table config.
  Every known table is probed with ONE request (a transaction of `check` ops; an `exists` per
  znode mirrored as absent), all tables' probes pipelined together with the cluster listings, so
  a sync where nothing changed costs two pipelined round trips in all (listings + probes, then
  instances + lead controller), whatever the number of tables, and reads no segment metadata.
  Known limit: a table deleted and re-created between two syncs whose three znodes come back at
  the very versions mirrored (e.g. all still 0) is not noticed until one of them changes.
  The probe also checks the metadata version of each segment not yet DONE/UPLOADED and of each
  unassigned one (`MirroredTable.unassigned_segments`): a commit's step 1 (metadata DONE) changes
  no IdealState, and the doctor must see a controller that stopped right after it.
  Changed and new tables are read as `tables.mirror.tables` describes (segment metadata only for
  new/changed/not-DONE segments, many znodes per multiRead request).
- Every sync also refreshes instances (CONFIGS/PARTICIPANT + LIVEINSTANCES), the
  leadControllerResource partitions, PartitionStatus from the servers' live state in Redis and
  the triage (`tables.mirror.partitions`), and sets `last_synced = now` on every table, instance
  and leadControllerResource partition row it confirmed, with one UPDATE per model. Segment and
  PartitionStatus rows are confirmed with their table and are not rewritten: their own
  `last_synced` is when the row was last written (inserted or changed, `now` of that sync), and
  the time of the last sync that confirmed one is its table's `last_synced` (what /api/v1 shows
  as their `synced`). Rewriting 160,000 segment rows was most of an unchanged sync's database
  time. Tables and segments gone from ZooKeeper lose their rows.
- leadControllerResource (read with `/CONTROLLER/LEADER` and its resource config): a partition's
  `controller` is its ExternalView MASTER only while that MASTER is live (the same sync's
  instances; a stale view counts as no MASTER). With no live MASTER a partition is leaderless,
  unless RESOURCE_ENABLED is "false" and a cluster leader exists (it then leads every table, as
  in Pinot). `leaderless_since` is the `at` of its latest `LeadershipChange` if that change took
  its MASTER away (blank `to_controller`), else the time already mirrored (unless a later change
  gave it a MASTER), else now; cleared while led. One query reads the changes, only while some
  partition is leaderless. `MirrorState.cluster_leader` (`Controller_<id of the leader znode>`,
  blank: none) and `lead_resource_enabled` are recorded with the sync's state.
- Every sync also reads each REALTIME table's stream partition count (`tables.mirror.streams`,
  cached per topic for a few seconds) and mirrors the cluster config's
  max.segment.completion.time.millis in `MirrorState.max_completion_ms`.
- Then, with HEALING_TRIGGER_FROM_MIRROR, each REALTIME table where a healing run would repair
  something now (`tables.mirror.diagnose.due_repairs`: a consuming repair past its guard, unless
  the table is paused, or an ERROR replica to reset) gets one run requested
  (`tables.healing_triggers.request_healing`, debounced per table); the tables are listed in the
  report's `healing_requested`. A failure there is a warning, never a failed sync.
- Python's cyclic garbage collector is paused while a sync runs (and restored after): a full
  sync allocates millions of short-lived objects that form no cycles (decoded znodes, row
  values), and the collections they trigger scan every live object, a sixth of a full sync and
  a fifth of an unchanged one. Reference counting still frees them as usual.
- A second `sync_cluster` can run concurrently only by mistake (the beat entry expires before the
  next run); it would do the same writes.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from tables import healing_triggers, live_state
from tables.cluster.context import ClusterContext
from tables.domain import triage
from tables.domain.healing import (
    DEFAULT_MAX_SEGMENT_COMPLETION_TIME_MS,
    MAX_SEGMENT_COMPLETION_TIME_KEY,
    max_completion_time_ms,
)
from tables.domain.leadership import LEAD_CONTROLLER_RESOURCE, lead_partition
from tables.domain.names import table_type_of
from tables.domain.znrecord import ZNRecord
from tables.mirror.bulk import DB_CHUNK, chunks, update_rows
from tables.mirror.diagnose import due_repairs
from tables.mirror.leaders import LeadReads, sync_lead_controller
from tables.mirror.partitions import live_index, sync_partitions
from tables.mirror.read_model import COMPLETED_STATUSES, MIRROR_NAME
from tables.mirror.streams import apply_stream_partitions, read_stream_partitions
from tables.mirror.tables import sync_changed_tables
from tables.mirror.zk_reads import Batch, Pending, ReadCounters, Znode, record_of
from tables.models import (
    LeadControllerPartition,
    MirroredInstance,
    MirroredSegment,
    MirroredTable,
    MirrorState,
)
from tables.redisconn import get_redis

__all__ = ["ClusterMissing", "SyncReport", "sync_cluster", "thresholds"]

log = logging.getLogger(__name__)

INSTANCE_KINDS = {
    "Server_": "SERVER",
    "Controller_": "CONTROLLER",
    "Broker_": "BROKER",
    "Minion_": "MINION",
}
INSTANCE_FIELDS = [
    "kind", "host", "port", "admin_port", "tags", "enabled", "live", "session_id",
    "config_version",
]  # fmt: skip


class ClusterMissing(Exception):
    """The cluster's root (IDEALSTATES) does not exist in ZooKeeper."""


@dataclass
class SyncReport:
    tables_seen: int = 0
    tables_changed: int = 0  # read from ZooKeeper (changed versions or new to the mirror)
    tables_unchanged: int = 0
    tables_created: int = 0
    tables_deleted: int = 0
    tables_failed: dict[str, str] = field(default_factory=dict)
    segments_read: int = 0  # segment metadata znodes read
    segments_written: int = 0  # segment rows created or updated
    segments_deleted: int = 0
    partitions: int = 0
    partitions_written: int = 0
    instances: int = 0
    samples_written: int = 0
    samples_pruned: int = 0
    table_probes: int = 0  # one per known table
    zk_requests: int = 0
    zk_round_trips: int = 0
    duration_ms: int = 0
    max_completion_ms: int | None = None  # the cluster's guard length, when read
    cluster_leader: str | None = None  # participant id of /CONTROLLER/LEADER ("": none), when read
    lead_resource_enabled: bool | None = None  # leadControllerResource's RESOURCE_ENABLED
    lead_leaderless: int = 0  # leadControllerResource partitions without a live MASTER
    healing_requested: list[str] = field(default_factory=list)  # tables a run was requested for
    warnings: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error

    def _lead_lines(self) -> list[str]:
        if self.cluster_leader is None:
            return []
        mode = "enabled" if self.lead_resource_enabled else "disabled"
        return [
            f"lead controllers: cluster leader {self.cluster_leader or 'none'}, resource {mode}, "
            f"{self.lead_leaderless} partitions without a live MASTER"
        ]

    def lines(self) -> list[str]:
        out = [
            f"tables: {self.tables_seen} seen, {self.tables_changed} changed "
            f"({self.tables_created} new), {self.tables_unchanged} unchanged, "
            f"{self.tables_deleted} deleted, {len(self.tables_failed)} failed",
            f"segments: {self.segments_read} metadata read, {self.segments_written} written, "
            f"{self.segments_deleted} deleted",
            f"partitions: {self.partitions} ({self.partitions_written} written), "
            f"samples: {self.samples_written} written, {self.samples_pruned} pruned, "
            f"instances: {self.instances}",
            f"zookeeper: {self.zk_requests} requests in {self.zk_round_trips} round trips "
            f"({self.table_probes} table probes)",
            *self._lead_lines(),
            f"duration: {self.duration_ms} ms",
        ]
        if self.healing_requested:
            out.append(f"healing runs requested: {', '.join(self.healing_requested)}")
        out += [f"failed: {name}: {why}" for name, why in sorted(self.tables_failed.items())]
        out += [f"warning: {w}" for w in self.warnings]
        if self.error:
            out.append(f"error: {self.error}")
        return out


def thresholds(commit_limit_ms: int = DEFAULT_MAX_SEGMENT_COMPLETION_TIME_MS) -> triage.Thresholds:
    """The triage thresholds from settings (STALLED_AFTER_SECONDS, TRIAGE_*) and the cluster's
    MAX_SEGMENT_COMPLETION_TIME (`commit_limit_ms`)."""
    return triage.Thresholds(
        commit_limit_ms=commit_limit_ms,
        stalled_after_s=float(settings.STALLED_AFTER_SECONDS),
        lagging_records=int(settings.TRIAGE_LAGGING_RECORDS),
        lagging_time_ms=int(settings.TRIAGE_LAGGING_TIME_MS),
        idle_after_s=float(settings.TRIAGE_IDLE_AFTER_SECONDS),
        report_grace_s=float(settings.TRIAGE_REPORT_GRACE_SECONDS),
    )


def _moment(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def sync_cluster(ctx: ClusterContext, now_ms: int | None = None) -> SyncReport:
    """Bring the mirror up to date with ZooKeeper; see the module docstring."""
    started = time.perf_counter()
    now_ms = ctx.now_ms() if now_ms is None else now_ms
    now = _moment(now_ms)
    report = SyncReport()
    counters = ReadCounters()
    try:
        with _collector_paused():
            _sync(ctx, now_ms, report, counters)
    except ClusterMissing as exc:
        report.error = str(exc)
    except Exception as exc:  # recorded for the console; the next beat tries again
        log.exception("mirror sync failed")
        report.error = f"{type(exc).__name__}: {exc}"
    report.zk_requests = counters.requests
    report.zk_round_trips = counters.round_trips
    report.table_probes = counters.probes
    report.segments_read = counters.segment_reads
    report.duration_ms = int((time.perf_counter() - started) * 1000)
    _record_state(report, now)
    return report


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the sync, restored after (see the contract)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def record_unreachable(error: str, now_ms: int) -> SyncReport:
    """Record a sync that could not start (ZooKeeper unreachable), so pages show why."""
    report = SyncReport(error=error)
    _record_state(report, _moment(now_ms))
    return report


def _record_state(report: SyncReport, now: datetime) -> None:
    problems = [f"{name}: {why}" for name, why in sorted(report.tables_failed.items())]
    problems += report.warnings
    if report.error:
        problems.insert(0, report.error)
    try:
        state, _ = MirrorState.objects.get_or_create(name=MIRROR_NAME)
        state.last_attempt = now
        if report.ok:
            state.last_synced = now
        state.duration_ms = report.duration_ms
        state.tables_read = report.tables_changed
        state.segments_read = report.segments_read
        if report.max_completion_ms is not None:
            state.max_completion_ms = report.max_completion_ms
        if report.cluster_leader is not None:
            state.cluster_leader = report.cluster_leader
            state.lead_resource_enabled = report.lead_resource_enabled
        state.error = "\n".join(problems)[:10_000]
        state.save()
    except Exception:  # the database itself is failing: nothing more to record it in
        log.exception("could not record the mirror state")


def _checks(
    ctx: ClusterContext, table: MirroredTable, open_segments: Mapping[int, list[tuple[str, int]]]
) -> list[tuple[str, int]]:
    paths = ctx.paths
    return [
        (paths.idealstate(table.name), table.idealstate_version),
        (paths.externalview(table.name), table.externalview_version),
        (paths.table_config(table.name), table.config_version),
        *((paths.segment(table.name, name), v) for name, v in open_segments.get(table.pk, ())),
    ]


def _open_segments(existing: Mapping[str, MirroredTable]) -> dict[int, list[tuple[str, int]]]:
    """Per known table: (segment, metadata version) of its segments whose metadata may still
    change without its IdealState changing (not DONE/UPLOADED, DONE without a download URL: the
    deep-store repair fills it in later, or unassigned)."""
    found: dict[int, list[tuple[str, int]]] = {}
    ids = sorted(t.pk for t in existing.values())
    for id_chunk in chunks(ids, DB_CHUNK):
        rows = (
            MirroredSegment.objects.filter(table_id__in=id_chunk, metadata_version__gte=0)
            .exclude(Q(status__in=COMPLETED_STATUSES) & ~Q(status="DONE", download_url=""))
            .values_list("table_id", "name", "metadata_version")
        )
        for table_id, name, version in rows:
            found.setdefault(table_id, []).append((name, version))
    for table in existing.values():
        for item in table.unassigned_segments or []:
            if isinstance(item, dict) and isinstance(item.get("version"), int):
                found.setdefault(table.pk, []).append((str(item["name"]), item["version"]))
    return found


def _sync(ctx: ClusterContext, now_ms: int, report: SyncReport, counters: ReadCounters) -> None:
    paths = ctx.paths
    now = _moment(now_ms)
    existing = {t.name: t for t in MirroredTable.objects.all()}
    open_segments = _open_segments(existing)

    # Round trip 1: the listings, and one version probe per known table.
    batch = Batch(ctx.client, counters)
    ideal_names = batch.children(paths.idealstates)
    config_names = batch.children(paths.table_configs)
    participants = batch.children(paths.participant_configs)
    lives = batch.children(paths.liveinstances)
    probes = {
        name: batch.probe(_checks(ctx, table, open_segments)) for name, table in existing.items()
    }
    batch.wait()
    if ideal_names.result() is None:
        raise ClusterMissing(
            f"cluster {paths.cluster} not found in ZooKeeper ({paths.idealstates} is missing)"
        )
    names = sorted(
        {
            n
            for n in (ideal_names.result() or []) + (config_names.result() or [])
            if table_type_of(n)
        }
    )

    # Round trip 2: instances and the lead controller resource.
    batch = Batch(ctx.client, counters)
    configs = {n: batch.get(paths.participant_config(n)) for n in participants.result() or []}
    live_nodes = {n: batch.get(paths.liveinstance(n)) for n in lives.result() or []}
    lead = LeadReads(
        ideal=batch.get(paths.idealstate(LEAD_CONTROLLER_RESOURCE)),
        view=batch.get(paths.externalview(LEAD_CONTROLLER_RESOURCE)),
        leader=batch.get(paths.controller_leader),
        config=batch.get(paths.resource_config(LEAD_CONTROLLER_RESOURCE)),
    )
    cluster_config = batch.get(paths.cluster_config)
    batch.wait()

    changed = [n for n in names if n not in existing or not probes[n].result()]
    report.tables_seen = len(names)
    report.tables_changed = len(changed)
    report.tables_unchanged = len(names) - len(changed)

    with transaction.atomic():
        instances = _sync_instances(configs, live_nodes, now, report)
        lead_n = sync_lead_controller(lead, names, instances, now, report)

    result = sync_changed_tables(ctx.client, paths, changed, existing, counters, now, lead_n)
    report.tables_failed = result.failed
    report.tables_created = result.tables_created
    report.segments_written = result.segments_written
    report.segments_deleted = result.segments_deleted
    report.warnings += result.warnings

    gone = (set(existing) - set(names)) | result.vanished
    gone_ids = [existing[n].pk for n in gone if n in existing]
    for id_chunk in chunks(gone_ids, DB_CHUNK):
        MirroredTable.objects.filter(pk__in=id_chunk).delete()
    report.tables_deleted = len(gone_ids)

    synced = [
        existing[n] for n in names if n in existing and n not in gone and n not in result.failed
    ]
    live = _live_state(ctx, instances, report)
    commit_limit_ms = _commit_limit_ms(cluster_config, report)
    report.max_completion_ms = commit_limit_ms
    _stream_partitions(ctx, synced, report)
    with transaction.atomic():
        moved = []
        for table in synced:
            wanted = lead_partition(table.raw_name, lead_n) if lead_n else None
            if table.name not in result.shapes and table.lead_partition != wanted:
                table.lead_partition = wanted
                moved.append(table)
        update_rows(MirroredTable, moved, ["lead_partition"])
        partitions = sync_partitions(
            synced,
            result.shapes,
            live,
            now_ms,
            thresholds(commit_limit_ms),
            float(settings.MIRROR_SAMPLE_SECONDS),
            float(settings.MIRROR_SAMPLE_RETENTION_SECONDS),
        )
        _confirm(synced, existing, now)
    report.partitions = partitions.partitions
    report.partitions_written = partitions.partitions_written
    report.samples_written = partitions.samples_written
    report.samples_pruned = partitions.samples_pruned
    _request_healing(ctx, synced, now_ms, commit_limit_ms, report)


def _stream_partitions(
    ctx: ClusterContext, tables: list[MirroredTable], report: SyncReport
) -> None:
    """Mirror each REALTIME table's stream partition count (see the module docstring)."""
    try:
        apply_stream_partitions(tables, read_stream_partitions(tables, ctx.redis_url))
    except Exception as exc:  # the stream's Redis: partitions stay as last mirrored
        report.warnings.append(f"stream partitions not read: {type(exc).__name__}: {exc}")


def _request_healing(
    ctx: ClusterContext,
    tables: list[MirroredTable],
    now_ms: int,
    commit_limit_ms: int,
    report: SyncReport,
) -> None:
    """Request a healing run of each table with a repair due now (see the module docstring)."""
    if not settings.HEALING_TRIGGER_FROM_MIRROR:
        return
    try:
        due = due_repairs(tables, now_ms, commit_limit_ms)
        for table, reasons in sorted(due.items()):
            if healing_triggers.request_healing(table, reasons[0], redis_url=ctx.redis_url):
                report.healing_requested.append(table)
    except Exception as exc:  # Redis or the broker: the next sync asks again
        log.warning("mirror: healing runs not requested: %s", exc)
        report.warnings.append(f"healing runs not requested: {type(exc).__name__}: {exc}")


def _confirm(
    synced: list[MirroredTable], existing: Mapping[str, MirroredTable], now: datetime
) -> None:
    """`last_synced = now` on every table, instance and lead controller partition this sync
    confirmed: one UPDATE per model. A table's `last_synced` also stands for its segment and
    PartitionStatus rows (confirmed exactly when it is), which keep the time they were written."""
    confirmed = {t.pk for t in synced}
    skipped = [t.pk for t in existing.values() if t.pk not in confirmed]
    MirroredTable.objects.exclude(pk__in=skipped).update(last_synced=now)
    MirroredInstance.objects.update(last_synced=now)
    LeadControllerPartition.objects.update(last_synced=now)


def _record(znode: Znode | None, what: str, report: SyncReport) -> ZNRecord | None:
    return record_of(znode, what, report.warnings)


def _commit_limit_ms(config: Pending[Znode | None], report: SyncReport) -> int:
    """The cluster's MAX_SEGMENT_COMPLETION_TIME, as `LLCSegmentManager.max_completion_time_ms`
    reads it (read in the same round trip as the instances)."""
    record = _record(config.result(), "cluster config", report)
    return max_completion_time_ms(
        record.simple_fields.get(MAX_SEGMENT_COMPLETION_TIME_KEY) if record else None
    )


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def _instance_values(
    name: str, config: Znode | None, live: Znode | None, report: SyncReport
) -> dict[str, object]:
    kind = next((k for prefix, k in INSTANCE_KINDS.items() if name.startswith(prefix)), "OTHER")
    record = _record(config, f"instance config {name}", report)
    simple = record.simple_fields if record else {}
    live_record = _record(live, f"live instance {name}", report)
    host, port = simple.get("HELIX_HOST", ""), _int(simple.get("HELIX_PORT"))
    if not host:  # Helix ids are <prefix><host>_<port>
        bare = name.split("_", 1)[1] if kind != "OTHER" else name
        host, _, tail = bare.rpartition("_")
        host, port = (host, _int(tail)) if host else (bare, None)
    return {
        "kind": kind,
        "host": host,
        "port": port,
        "admin_port": _int(simple.get("adminPort")),
        "tags": list(record.list_fields.get("TAG_LIST", [])) if record else [],
        "enabled": simple.get("HELIX_ENABLED", "true").lower() != "false",
        "live": live is not None,
        "session_id": (live_record.simple_fields.get("SESSION_ID", "") if live_record else ""),
        "config_version": -1 if config is None else config.version,
    }


def _sync_instances(
    configs: Mapping[str, Pending[Znode | None]],
    lives: Mapping[str, Pending[Znode | None]],
    now: datetime,
    report: SyncReport,
) -> dict[str, MirroredInstance]:
    rows = {row.name: row for row in MirroredInstance.objects.all()}
    creates, updates = [], []
    found: dict[str, MirroredInstance] = {}
    for name in sorted(set(configs) | set(lives)):
        config = configs[name].result() if name in configs else None
        live = lives[name].result() if name in lives else None
        if config is None and live is None:
            continue
        values = _instance_values(name, config, live, report)
        row = rows.get(name)
        if row is None:
            row = MirroredInstance(name=name, last_synced=now, **values)
            creates.append(row)
        elif any(getattr(row, k) != v for k, v in values.items()):
            for key, value in values.items():
                setattr(row, key, value)
            updates.append(row)
        found[name] = row
    MirroredInstance.objects.bulk_create(creates)
    MirroredInstance.objects.bulk_update(updates, INSTANCE_FIELDS)
    gone = [row.pk for name, row in rows.items() if name not in found]
    MirroredInstance.objects.filter(pk__in=gone).delete()
    report.instances = len(found)
    return found


def _live_state(
    ctx: ClusterContext, instances: Mapping[str, MirroredInstance], report: SyncReport
) -> dict[tuple[str, str], dict[str, live_state.PartitionLive]]:
    servers = sorted(n for n, row in instances.items() if row.kind == "SERVER" and row.live)
    if not servers:
        return {}
    try:
        published = live_state.read_all(get_redis(ctx.redis_url), ctx.paths.cluster, servers)
    except Exception as exc:  # Redis down: every partition reads as not reporting
        report.warnings.append(f"live state unavailable: {type(exc).__name__}: {exc}")
        return {}
    return live_index(published)
