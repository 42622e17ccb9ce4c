"""Console-side records. ZooKeeper stays the truth for the cluster; the rows here are either a
MIRROR of it (read model for pages and /metrics, written only by `tables.mirror.sync`) or what only
the console keeps (jobs, durable counters, the audit log).

Mirror contract:
- `MirroredTable`, `MirroredSegment`, `MirroredInstance`, `LeadControllerPartition` and
  `PartitionStatus` are written by `tables.mirror.sync` alone; pages, /api/v1 and /metrics only
  read them (through `tables.mirror.read_model` where a query is shared) and never read ZooKeeper.
  Each row keeps the znode version(s) it was built from and `last_synced`: for tables, instances
  and leadControllerResource partitions the time of the sync that last confirmed the row (so pages
  can show staleness). `MirroredSegment` and `PartitionStatus` rows are confirmed with their table
  and not rewritten when unchanged: their `last_synced` is the time the row was last written
  (inserted or changed), and the time of the last sync that confirmed one is its table's
  `last_synced` (what /api/v1 shows as their `synced`).
- `PartitionStatus` is one row per (table, stream partition): the consuming segment from the
  IdealState, the replicas' live figures as the servers last published them, and the triage
  verdict (`tables.domain.triage`). `ConsumptionSample` is its time series (pruned to
  MIRROR_SAMPLE_RETENTION_SECONDS).

- `Job`: one row per attempt of a background run (a Spark segment build, a re-ingestion). An
  attempt that died with its process stays RUNNING until the next attempt of the same work marks it
  ABANDONED.
- `DurableCounter`: monotonically increasing counts (segmentBuildFailure, segmentReingestionFailure,
  ...) per table, incremented atomically in the database, so they survive worker restarts and are
  shared by every process. `monitoring` exposes them on /metrics.
- `FailedBuild`: a segment whose build failed for a reason waiting cannot cure, backing off.
- `AuditEntry`: one row per state-changing action, from a page or the API, allowed or refused.

Written by the controller's periodic tasks (`tables.tasks`), read by /api/v1 and /metrics:
- `HealingRun`: one row per (run, table) of the healing manager (Pinot's
  RealtimeSegmentValidationManager): its trigger, times, the repairs made, what it waits for, what
  it skipped, and the error of a run that failed. `record` is idempotent per (run_id, table) (a
  task delivered twice records once); the newest `RUNS_KEPT_PER_TABLE` runs of a table are kept.
- `TableStatusCheck`: the last SegmentStatusChecker result of a mirrored table
  (`tables.domain.status_checks`), one row per table, deleted with the table's mirror row.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import models
from django.db.models import F, Q

from tables.domain import triage

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _moment(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


class Job(models.Model):
    """An attempt of a background job, with its outcome."""

    class Kind(models.TextChoices):
        BUILD = "BUILD", "segment build"
        REINGEST = "REINGEST", "re-ingestion"

    class Status(models.TextChoices):
        RUNNING = "RUNNING"
        SUCCEEDED = "SUCCEEDED"
        FAILED = "FAILED"
        ABANDONED = "ABANDONED"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    table = models.CharField(max_length=255, db_index=True)
    segment = models.CharField(max_length=255, db_index=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    # indexed: a batched build's tasks look up their outcome by it (`tables.builds`)
    task_id = models.CharField(max_length=64, blank=True, db_index=True)
    worker = models.CharField(max_length=255, blank=True, help_text="host:pid of the attempt")
    rows = models.BigIntegerField(null=True)
    incomplete_rows = models.BigIntegerField(null=True)
    bytes = models.BigIntegerField(null=True)
    duration_ms = models.BigIntegerField(null=True)
    error = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["kind", "table", "segment", "status"])]

    def __str__(self) -> str:
        return f"{self.kind} {self.segment} {self.status}"


class DurableCounter(models.Model):
    """A named count per table (empty table = cluster-wide)."""

    name = models.CharField(max_length=64)
    table = models.CharField(max_length=255, blank=True, default="")
    value = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["name", "table"], name="counter_per_table")]

    def __str__(self) -> str:
        return f"{self.name}{{{self.table}}}={self.value}"

    @classmethod
    def increment(cls, name: str, table: str = "", by: int = 1) -> None:
        """Atomic in the database: concurrent increments from any process all count."""
        cls.objects.get_or_create(name=name, table=table)
        cls.objects.filter(name=name, table=table).update(value=F("value") + by)

    @classmethod
    def value_of(cls, name: str, table: str = "") -> int:
        row = cls.objects.filter(name=name, table=table).first()
        return 0 if row is None else row.value


class FailedBuild(models.Model):
    """A segment whose committed build failed deterministically and now backs off
    (`tables.build_backoffs`, `tables.domain.build_backoff`): one row per (table, segment),
    written by the servers' committers, cleared by a successful build or an operator."""

    table = models.CharField(max_length=255, help_text="with type: t_REALTIME")
    segment = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64, help_text="table config and schema it failed on")
    failures = models.IntegerField(default=0, help_text="deterministic failures in a row")
    first_failure_at = models.DateTimeField()
    last_failure_at = models.DateTimeField()
    next_retry_at = models.DateTimeField()
    error = models.TextField(blank=True)
    servers = models.JSONField(default=list, blank=True, help_text="the servers that tried")

    class Meta:
        ordering = ["-last_failure_at", "table", "segment"]
        constraints = [
            models.UniqueConstraint(fields=["table", "segment"], name="failed_build_per_segment")
        ]

    def __str__(self) -> str:
        return f"{self.segment} failed {self.failures}x"


# --- the mirror of ZooKeeper (written by tables.mirror.sync only) -------------------------------


# A table's (or partition's) overall verdict, worst last: the domain's `triage.Health` (what each
# value means is written there) as Django choices, so the two cannot drift apart.
Health = models.TextChoices("Health", [(h.name, h.value) for h in triage.Health])
HEALTH_RANK = triage.HEALTH_RANK


class MirroredTable(models.Model):
    """A table: its config summary, pause state, IdealState/ExternalView digest and verdict."""

    name = models.CharField(max_length=255, unique=True, help_text="with type: t_REALTIME")
    raw_name = models.CharField(max_length=255, db_index=True)
    table_type = models.CharField(max_length=16)
    tenant = models.CharField(max_length=255, blank=True, help_text="server tag")
    replication = models.IntegerField(default=1)
    stream_type = models.CharField(max_length=64, blank=True)
    topic = models.CharField(max_length=255, blank=True)
    flush_rows = models.BigIntegerField(null=True)
    flush_time = models.CharField(max_length=32, blank=True)
    pauseless = models.BooleanField(default=False)
    config = models.JSONField(default=dict, blank=True, help_text="the table config, REST form")
    # Pause state (reference §4.2) and the design's partition-level pause.
    paused = models.BooleanField(default=False)
    pause_reason = models.CharField(max_length=64, blank=True)
    pause_comment = models.TextField(blank=True)
    pause_time = models.CharField(max_length=64, blank=True, help_text="pauseState.timeInMillis")
    paused_partitions = models.JSONField(default=list, blank=True)
    # The IdealState's HELIX_ENABLED is "false" (PUT /tables/{t}/state?state=disable): its
    # servers hold every replica OFFLINE, which is then no error.
    disabled = models.BooleanField(default=False)
    # Counts derived from the IdealState, ExternalView and segment metadata.
    num_partitions = models.IntegerField(default=0)
    segment_count = models.IntegerField(default=0)
    consuming_count = models.IntegerField(default=0)
    error_replicas = models.IntegerField(default=0, help_text="(segment, replica) pairs in ERROR")
    error_segments = models.IntegerField(default=0, help_text="ERROR or all-OFFLINE segments")
    missing_download_url = models.IntegerField(default=0)
    missing_consuming = models.IntegerField(default=0, help_text="partitions without CONSUMING")
    percent_available = models.IntegerField(default=100)
    max_records_lag = models.BigIntegerField(default=0)
    max_time_lag_ms = models.BigIntegerField(default=0)
    rows_per_s = models.FloatField(default=0.0)
    health = models.CharField(max_length=16, choices=Health.choices, default=Health.GOOD)
    health_rank = models.SmallIntegerField(default=0, db_index=True)
    health_reason = models.CharField(max_length=255, blank=True)
    lead_partition = models.IntegerField(null=True)
    # For the ingestion doctor and mirror-triggered healing (tables.mirror.diagnose): the stream's
    # partition count (null: unknown) or why it could not be read, and the LLC segment metadata
    # znodes newer than anything in the IdealState (a commit or repair that stopped before its
    # IdealState write): [{name, status, startOffset, endOffset, mtimeMs, version}].
    stream_partitions = models.IntegerField(null=True)
    stream_error = models.CharField(max_length=255, blank=True)
    unassigned_segments = models.JSONField(default=list, blank=True)
    # Znode versions the row was built from (-1: the znode did not exist).
    config_version = models.IntegerField(default=-1)
    idealstate_version = models.IntegerField(default=-1)
    externalview_version = models.IntegerField(default=-1)
    last_synced = models.DateTimeField()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class MirroredSegment(models.Model):
    """A segment: IdealState vs ExternalView per replica, and its ZK metadata."""

    table = models.ForeignKey(MirroredTable, on_delete=models.CASCADE, related_name="segments")
    name = models.CharField(max_length=255)
    partition = models.IntegerField(null=True)
    sequence = models.IntegerField(null=True)
    created_ms = models.BigIntegerField(null=True, help_text="from the LLC name")
    ideal_states = models.JSONField(default=dict, help_text="instance -> IdealState state")
    external_states = models.JSONField(default=dict, help_text="instance -> ExternalView state")
    # One word for filtering: CONSUMING, ONLINE, ERROR, OFFLINE, UPDATING (IS != EV).
    display_state = models.CharField(max_length=16, db_index=True)
    has_error = models.BooleanField(default=False)
    all_offline = models.BooleanField(default=False)
    # ZK metadata (reference §2.1); metadata_version -1 when the znode is missing.
    status = models.CharField(max_length=16, blank=True)
    start_offset = models.CharField(max_length=64, blank=True)
    end_offset = models.CharField(max_length=64, blank=True)
    total_docs = models.BigIntegerField(null=True)
    size_bytes = models.BigIntegerField(null=True)
    download_url = models.TextField(blank=True)
    crc = models.CharField(max_length=32, blank=True)
    start_time_ms = models.BigIntegerField(null=True)
    end_time_ms = models.BigIntegerField(null=True)
    creation_time_ms = models.BigIntegerField(null=True)
    metadata = models.JSONField(default=dict, help_text="the znode's simpleFields")
    metadata_version = models.IntegerField(default=-1)
    metadata_mtime_ms = models.BigIntegerField(null=True)
    last_synced = models.DateTimeField()

    class Meta:
        ordering = ["table", "partition", "sequence", "name"]
        constraints = [models.UniqueConstraint(fields=["table", "name"], name="segment_per_table")]
        indexes = [
            models.Index(fields=["table", "partition"]),
            models.Index(fields=["table", "display_state"]),
            models.Index(fields=["has_error"]),
        ]

    def __str__(self) -> str:
        return self.name


class MirroredInstance(models.Model):
    """A participant of the cluster (server, controller, broker, minion)."""

    name = models.CharField(max_length=255, unique=True)
    kind = models.CharField(max_length=16, help_text="SERVER, CONTROLLER, BROKER, MINION, OTHER")
    host = models.CharField(max_length=255, blank=True)
    port = models.IntegerField(null=True)
    admin_port = models.IntegerField(null=True)
    tags = models.JSONField(default=list)
    enabled = models.BooleanField(default=True)
    live = models.BooleanField(default=False)
    session_id = models.CharField(max_length=64, blank=True)
    config_version = models.IntegerField(default=-1)
    last_synced = models.DateTimeField()

    class Meta:
        ordering = ["kind", "name"]

    def __str__(self) -> str:
        return self.name


class LeadControllerPartition(models.Model):
    """A partition of leadControllerResource, its MASTER and the tables it leads."""

    partition_id = models.IntegerField(unique=True)
    name = models.CharField(max_length=64)
    controller = models.CharField(max_length=255, blank=True, help_text="MASTER in the EV")
    tables = models.JSONField(default=list)
    last_synced = models.DateTimeField()
    leaderless_since = models.DateTimeField(
        null=True, blank=True, help_text="since when no live controller is its MASTER"
    )

    class Meta:
        ordering = ["partition_id"]

    def __str__(self) -> str:
        return self.name


class PartitionStatus(models.Model):
    """One stream partition of a realtime table: consuming segment, replicas' live figures, verdict.

    `replicas` maps server -> {state (EV), currentOffset, upstreamOffset, recordsLag,
    availabilityLagMs, rowsPerSecond, consumerState, phase, lastConsumedMs, updatedMs}; a server
    that published nothing recently has only its EV state.
    """

    table = models.ForeignKey(MirroredTable, on_delete=models.CASCADE, related_name="partitions")
    partition = models.IntegerField()
    consuming_segment = models.CharField(max_length=255, blank=True)
    latest_segment = models.CharField(max_length=255, blank=True)
    replicas = models.JSONField(default=dict)
    current_offset = models.BigIntegerField(null=True, help_text="the most advanced replica")
    upstream_offset = models.BigIntegerField(null=True)
    records_lag = models.BigIntegerField(default=0, db_index=True, help_text="worst replica")
    time_lag_ms = models.BigIntegerField(default=0, db_index=True, help_text="worst replica")
    rows_per_s = models.FloatField(default=0.0)
    progressed_at = models.DateTimeField(null=True, help_text="when an offset last moved")
    stalled_s = models.BigIntegerField(default=0, db_index=True)
    lost_offsets = models.BigIntegerField(default=0)
    verdict = models.CharField(max_length=32, db_index=True)
    verdict_detail = models.CharField(max_length=255, blank=True)
    health = models.CharField(max_length=16, choices=Health.choices, default=Health.GOOD)
    health_rank = models.SmallIntegerField(default=0, db_index=True)
    last_synced = models.DateTimeField()

    class Meta:
        ordering = ["table", "partition"]
        constraints = [
            models.UniqueConstraint(fields=["table", "partition"], name="partition_per_table")
        ]

    def __str__(self) -> str:
        return f"{self.table.name}/{self.partition}"


class ConsumptionSample(models.Model):
    """A point of a partition's ingestion time series (charts over the last hour)."""

    table = models.ForeignKey(MirroredTable, on_delete=models.CASCADE, related_name="samples")
    partition = models.IntegerField()
    sampled_at = models.DateTimeField()
    current_offset = models.BigIntegerField(null=True)
    records_lag = models.BigIntegerField(default=0)
    time_lag_ms = models.BigIntegerField(default=0)
    rows_per_s = models.FloatField(default=0.0)

    class Meta:
        ordering = ["table", "partition", "sampled_at"]
        indexes = [
            models.Index(fields=["table", "sampled_at"]),
            models.Index(fields=["sampled_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.table_id}/{self.partition}@{self.sampled_at:%H:%M:%S}"


class MirrorState(models.Model):
    """One row per mirror (name "zk"): when it last synced, how long it took, and any error."""

    name = models.CharField(max_length=32, unique=True)
    last_synced = models.DateTimeField(null=True)
    last_attempt = models.DateTimeField(null=True)
    duration_ms = models.IntegerField(default=0)
    tables_read = models.IntegerField(default=0, help_text="tables whose znodes changed")
    segments_read = models.IntegerField(default=0)
    error = models.TextField(blank=True)
    # The cluster config's max.segment.completion.time.millis (null: not set, Pinot's default).
    max_completion_ms = models.BigIntegerField(null=True)
    # The Helix cluster leader (`/CONTROLLER/LEADER`, as the participant id Controller_<h>_<p>;
    # blank: none) and leadControllerResource's RESOURCE_ENABLED (null: never synced).
    cluster_leader = models.CharField(max_length=255, blank=True)
    lead_resource_enabled = models.BooleanField(null=True)

    def __str__(self) -> str:
        return f"mirror {self.name} synced {self.last_synced}"


# --- the audit log ------------------------------------------------------------------------------


class AuditEntry(models.Model):
    """Who did (or tried) what, to which target, why, with what result."""

    class Result(models.TextChoices):
        OK = "OK"
        DENIED = "DENIED"  # refused for lack of permission (403)
        REJECTED = "REJECTED"  # bad input (4xx)
        FAILED = "FAILED"  # allowed but failed (5xx)

    at = models.DateTimeField(db_index=True)
    username = models.CharField(max_length=150, db_index=True)
    role = models.CharField(max_length=16, blank=True)
    action = models.CharField(max_length=64, db_index=True)
    target = models.CharField(max_length=512, db_index=True, help_text="table, table/partition...")
    reason = models.TextField(blank=True)
    result = models.CharField(max_length=16, choices=Result.choices)
    status_code = models.IntegerField(null=True)
    detail = models.JSONField(default=dict, blank=True)
    source = models.CharField(max_length=16, help_text="page or api")
    remote_addr = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.username} {self.action} {self.target}"

    @property
    def summary(self) -> str:
        """One line on what the action did, from `detail` (pages show it beside the reason)."""
        detail = self.detail if isinstance(self.detail, dict) else {}
        if "error" in detail:
            return str(detail["error"])
        parts = []
        if detail.get("segments") and isinstance(detail["segments"][0], dict):  # a resume
            made = detail["segments"]
            parts.append(f"{len(made)} new consuming segment(s)")
            for s in made:
                reason, previous = s.get("startReason"), s.get("previousOffset")
                if s.get("skipped"):
                    parts.append(
                        f"{s['segment']}: skipped {s['skipped']} offset(s) from {previous} "
                        f"({reason})"
                    )
                elif reason:
                    parts.append(
                        f"{s['segment']}: starts at {s['startOffset']}, not {previous} ({reason})"
                    )
        elif detail.get("consumingSegments") is not None:  # a pause
            if not detail.get("written", True):
                parts.append("already paused")
            parts.append(f"{len(detail['consumingSegments'])} segment(s) to commit")
        elif detail.get("segments"):  # a force commit
            parts.append(f"{len(detail['segments'])} segment(s) to commit")
        elif detail.get("jobId"):  # a re-ingestion
            parts.append(f"job {detail['jobId']} on {detail.get('server') or 'a server'}")
        return "; ".join(parts)


# --- the controller's periodic tasks (written by tables.tasks) ------------------------------------


class HealingRun(models.Model):
    """One run of the healing manager on one table (a `HealingReport`), or its failure."""

    class Trigger(models.TextChoices):
        SCHEDULE = "schedule", "beat schedule"
        MIRROR = "mirror", "mirror sync (a repairable state seen)"
        API = "api", "operator (GET /periodictask/run)"
        LEADER = "leader", "a controller became the table's lead controller"

    RUNS_KEPT_PER_TABLE = 500

    table = models.CharField(max_length=255, help_text="with type: t_REALTIME")
    run_id = models.CharField(max_length=64, db_index=True)
    trigger = models.CharField(max_length=16, choices=Trigger.choices)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    actions = models.JSONField(default=list, blank=True, help_text="repairs made (HealingAction)")
    action_count = models.IntegerField(default=0)
    waiting = models.JSONField(default=list, blank=True, help_text="left alone for now, and why")
    skipped = models.JSONField(default=list, blank=True, help_text="parts of the run not done")
    error = models.TextField(blank=True)
    lead_controller = models.CharField(
        max_length=255, blank=True, help_text="the lead controller the run was made on behalf of"
    )

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["run_id", "table"], name="healing_run_per_table")
        ]
        indexes = [models.Index(fields=["table", "-started_at"], name="healing_run_table_time")]

    def __str__(self) -> str:
        return f"{self.run_id} {self.table} {self.action_count} action(s)"

    @classmethod
    def record(cls, report: dict[str, Any]) -> HealingRun:
        """Store a `HealingReport.as_dict()` (a failed run: the same keys, with `error`; either
        with `leadController`, the controller the run acted for), then prune the table's runs
        beyond the newest RUNS_KEPT_PER_TABLE."""
        actions = list(report.get("actions") or [])
        row, _ = cls.objects.update_or_create(
            run_id=str(report["runId"])[:64],
            table=str(report["table"])[:255],
            defaults={
                "trigger": str(report["trigger"]),
                "started_at": _moment(int(report["startedMs"])),
                "finished_at": _moment(int(report.get("finishedMs") or report["startedMs"])),
                "actions": actions,
                "action_count": len(actions),
                "waiting": list(report.get("waiting") or []),
                "skipped": list(report.get("skipped") or []),
                "error": str(report.get("error") or ""),
                "lead_controller": str(report.get("leadController") or "")[:255],
            },
        )
        cls.prune(row.table)
        return row

    @classmethod
    def prune(cls, table: str, keep: int | None = None) -> int:
        """Delete the runs of `table` older than its newest `keep`; returns how many."""
        keep = max(1, cls.RUNS_KEPT_PER_TABLE if keep is None else keep)
        rows = cls.objects.filter(table=table).order_by("-started_at", "-id")
        oldest_kept = next(iter(rows.values_list("started_at", "id")[keep - 1 : keep]), None)
        if oldest_kept is None:
            return 0
        at, pk = oldest_kept
        older = Q(started_at__lt=at) | Q(started_at=at, id__lt=pk)
        deleted, _ = cls.objects.filter(older, table=table).delete()
        return deleted

    def as_dict(self) -> dict[str, Any]:
        """The API's shape: the report's keys, times as ISO 8601 and epoch milliseconds."""
        return {
            "runId": self.run_id,
            "table": self.table,
            "trigger": self.trigger,
            "startedAt": self.started_at.isoformat(),
            "finishedAt": self.finished_at.isoformat(),
            "durationMs": int((self.finished_at - self.started_at).total_seconds() * 1000),
            "actions": self.actions,
            "waiting": self.waiting,
            "skipped": self.skipped,
            "error": self.error or None,
            "leadController": self.lead_controller or None,
        }


class TableStatusCheck(models.Model):
    """The last SegmentStatusChecker result of a table (Pinot's gauge names in the comments)."""

    table = models.OneToOneField(
        MirroredTable, on_delete=models.CASCADE, related_name="status_check", primary_key=True
    )
    checked_at = models.DateTimeField(db_index=True)
    segments_in_error_state = models.IntegerField(default=0)  # segmentsInErrorState
    percent_segments_available = models.IntegerField(default=100)  # percentSegmentsAvailable
    segments_with_less_replicas = models.IntegerField(default=0)  # segmentsWithLessReplicas
    number_of_replicas = models.IntegerField(default=1)  # numberOfReplicas
    percent_of_replicas = models.IntegerField(default=100)  # percentOfReplicas
    table_consumption_paused = models.BooleanField(default=False)  # tableConsumptionPaused
    # missingConsumingSegment{TotalCount,NewPartitionCount,MaxDurationMinutes}; null: not computed
    # (not a REALTIME table, or an IdealState without segments, as Pinot leaves them).
    missing_consuming_total = models.IntegerField(null=True)
    missing_consuming_new_partitions = models.IntegerField(null=True)
    missing_consuming_max_minutes = models.BigIntegerField(null=True)
    stream_known = models.BooleanField(
        default=False, help_text="the stream's partitions and offsets were read for this check"
    )
    details = models.JSONField(default=dict, blank=True, help_text="the segments counted")

    def __str__(self) -> str:
        return f"status of {self.table_id} at {self.checked_at:%H:%M:%S}"


class LeadershipChange(models.Model):
    """A change of a leadControllerResource partition's MASTER, as the cluster leader saw it:
    from whom to whom (blank: nobody), when and why. `to_controller` blank means the partition
    lost its MASTER at `at`; the tables of the partition had no lead controller from then on."""

    HISTORY_KEPT = 5000

    partition_id = models.IntegerField()
    from_controller = models.CharField(max_length=255, blank=True)
    to_controller = models.CharField(max_length=255, blank=True)
    at = models.DateTimeField()
    reason = models.CharField(max_length=500, blank=True)
    cluster_leader = models.CharField(max_length=255, blank=True, help_text="who recorded it")
    leaderless_ms = models.BigIntegerField(
        null=True, blank=True, help_text="how long the partition had no MASTER before `to`"
    )

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["partition_id", "-at"], name="leadership_partition_time")]

    def __str__(self) -> str:
        return f"{self.partition_id}: {self.from_controller or '-'} -> {self.to_controller or '-'}"
