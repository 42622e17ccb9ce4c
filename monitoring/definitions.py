"""The one table of the controller-side metric definitions (`monitoring.controller_metrics`
reads the mirror and fills them; its docstring says what each family means).

`DEFINITIONS` maps a key to the exposed family (name, type, help, labels); the other tables say
where a family's values come from: `TABLE_GAUGES` (MirroredTable / TableStatusCheck columns),
`PARTITION_GAUGES` (PartitionStatus columns), `PAUSELESS_GAUGES` (computed from the mirrored
segments), and the durable counters (`tables.models.DurableCounter` names: `COUNTERS`, with
`LEGACY_COUNTERS` the names two of them had before they took Pinot's, `TASK_COUNTERS`,
`REFUSAL_COUNTERS`), and `UPLOADS_IN_PROGRESS`, the one family read from Redis at scrape time
(`monitoring.in_progress`). A new durable counter needs one line in `DEFINITIONS` and in
`COUNTERS`; names not defined here are not exposed.

`SERVER_DEFINITIONS` are an ingestion server's own families (`monitoring.server_metrics`, served
on the server's admin port), apart from the controller's because no controller scrape has them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from prometheus_client.core import GaugeMetricFamily, UnknownMetricFamily

from tables.domain.completion_trust import REFUSED_COUNTER, Cause, refusal_counter_name
from tables.domain.periods import TASK_ERROR_COUNTER, TASK_RUN_COUNTER

__all__ = [
    "BUILD_FAILURE",
    "CHECK_FRESH_PERIODS",
    "CLIENT",
    "COUNTERS",
    "DEEP_STORE_LINK_MISSING",
    "DEFINITIONS",
    "LEGACY_COUNTERS",
    "PARTITION",
    "PARTITION_GAUGES",
    "PARTITION_LAG",
    "PAUSELESS_GAUGES",
    "REALTIME",
    "REFUSAL_COUNTERS",
    "REINGESTION_FAILURE",
    "REPAIR_CONFIG_PATHS",
    "SERVER_DEFINITIONS",
    "TABLE",
    "TABLE_GAUGES",
    "TASK_COUNTERS",
    "UPLOADS_IN_PROGRESS",
    "UPLOAD_RETRY_ERROR",
    "UPLOAD_RETRY_SUCCESS",
    "Definition",
    "TableGauge",
]

REALTIME = "REALTIME"
# Pinot's server meters, kept as durable counters under these names (`tables.builds` counts them).
BUILD_FAILURE = "segmentBuildFailure"
REINGESTION_FAILURE = "segmentReingestionFailure"
# Pinot's controller meters of the commit end and of the deep-store upload repair, kept as durable
# counters per table under these names (the commit path and the healer count them).
DEEP_STORE_LINK_MISSING = "segmentMissingDeepStoreLink"
UPLOAD_RETRY_SUCCESS = "llcSegmentsDeepStoreUploadRetrySuccess"
UPLOAD_RETRY_ERROR = "llcSegmentsDeepStoreUploadRetryError"
# Pinot's global controller gauge: the re-ingested segment uploads in progress, from Redis
# (`monitoring.in_progress`).
UPLOADS_IN_PROGRESS = "reingestedSegmentUploadsInProgress"

TABLE = ("table", "tableType")
PARTITION = ("table", "tableType", "partition")
CLIENT = ("table", "tableType", "topic", "partition")  # Pinot's consumer client id
# The lag gauges carry `paused` ("true"/"false"): lag is reported while paused (rows waiting), and
# alerts leave paused partitions out with `paused="false"`.
PARTITION_LAG = (*PARTITION, "paused")


@dataclass(frozen=True)
class Definition:
    """One metric family: its exposed name, type, help text and label names."""

    name: str
    kind: Literal["gauge", "untyped"]
    help: str
    labels: tuple[str, ...] = ()

    def family(self) -> GaugeMetricFamily | UnknownMetricFamily:
        cls = GaugeMetricFamily if self.kind == "gauge" else UnknownMetricFamily
        return cls(self.name, self.help, labels=list(self.labels))


def _gauge(name: str, help: str, labels: tuple[str, ...] = ()) -> Definition:
    return Definition(name, "gauge", help, labels)


def _count(
    name: str, help: str, labels: tuple[str, ...] = TABLE, prefix: str = "pinot_controller_"
) -> Definition:
    return Definition(f"{prefix}{name}_Count", "untyped", help, labels)


# --- the one table of definitions -----------------------------------------------------------------

DEFINITIONS: dict[str, Definition] = {
    # Per table (SegmentStatusChecker / MissingConsumingSegmentFinder / SCM; reference §9.2).
    "segmentsInErrorState": _gauge(
        "pinot_controller_segmentsInErrorState_Value",
        "Number of (segment, replica) pairs in ERROR state in the table's ExternalView "
        "(Pinot SegmentStatusChecker semantics).",
        TABLE,
    ),
    "percentSegmentsAvailable": _gauge(
        "pinot_controller_percentSegmentsAvailable_Value",
        "Percentage of the table's segments with at least one ONLINE or CONSUMING replica "
        "in the ExternalView (integer, 100 when all are queryable).",
        TABLE,
    ),
    "tableConsumptionPaused": _gauge(
        "pinot_controller_tableConsumptionPaused_Value",
        "1 while the realtime table's consumption is paused (IdealState isTablePaused), else 0.",
        TABLE,
    ),
    "missingConsumingSegmentTotalCount": _gauge(
        "pinot_controller_missingConsumingSegmentTotalCount_Value",
        "Stream partitions of the realtime table that have no CONSUMING segment in the IdealState.",
        TABLE,
    ),
    "segmentsWithLessReplicas": _gauge(
        "pinot_controller_segmentsWithLessReplicas_Value",
        "Segments with fewer replicas ONLINE or CONSUMING in the ExternalView than in the "
        "IdealState (Pinot SegmentStatusChecker; segments changed within the wait-for-push time "
        "are not counted).",
        TABLE,
    ),
    "numberOfReplicas": _gauge(
        "pinot_controller_numberOfReplicas_Value",
        "The fewest replicas ONLINE or CONSUMING in the ExternalView over the table's segments "
        "(Pinot SegmentStatusChecker).",
        TABLE,
    ),
    "percentOfReplicas": _gauge(
        "pinot_controller_percentOfReplicas_Value",
        "The lowest percentage of a segment's IdealState replicas that are ONLINE or CONSUMING "
        "in the ExternalView (Pinot SegmentStatusChecker).",
        TABLE,
    ),
    "missingConsumingSegmentNewPartitionCount": _gauge(
        "pinot_controller_missingConsumingSegmentNewPartitionCount_Value",
        "Stream partitions with neither a CONSUMING nor an ONLINE segment in the IdealState "
        "(new partitions, or a first segment deleted; Pinot MissingConsumingSegmentFinder).",
        TABLE,
    ),
    "missingConsumingSegmentMaxDurationMinutes": _gauge(
        "pinot_controller_missingConsumingSegmentMaxDurationMinutes_Value",
        "Minutes the longest-missing partition has been without a CONSUMING segment while rows "
        "wait in the stream (Pinot MissingConsumingSegmentFinder).",
        TABLE,
    ),
    "pauselessConsumptionEnabled": _gauge(
        "pinot_controller_pauselessConsumptionEnabled_Value",
        "1 when the realtime table uses pauseless consumption "
        "(the next segment starts consuming before the committed one is built), else 0.",
        TABLE,
    ),
    "segmentsMissingDownloadUrl": _gauge(
        "pinot_controller_segmentsMissingDownloadUrl_Value",
        "Segments not in the deep store yet: COMMITTING (pauseless, between commit start and "
        "commit end) and DONE with an empty download URL (peer-download commits); the healer "
        "uploads a server's copy or re-ingests them. The console's own metric, not Pinot's.",
        TABLE,
    ),
    "pauselessSegmentsInErrorCount": _gauge(
        "pinot_controller_pauselessSegmentsInErrorCount_Value",
        "Segments of a pauseless table with every ExternalView replica in ERROR (Pinot's "
        "RealtimeSegmentValidationManager count; COMMITTING ones need re-ingestion).",
        TABLE,
    ),
    "pauselessSegmentsInUnrecoverableErrorCount": _gauge(
        "pinot_controller_pauselessSegmentsInUnrecoverableErrorCount_Value",
        "Segments of a pauseless table with every replica in ERROR that the healer may not "
        "repair: a partial-upsert or dedup table in disasterRecoveryMode DEFAULT (else 0).",
        TABLE,
    ),
    # Per partition (RealtimeConsumerMonitor), from the replicas' published figures.
    "maxRecordsLag": _gauge(
        "pinot_controller_maxRecordsLag_Value",
        "Records behind the stream's latest offset, worst consuming replica of the partition; "
        'paused="true" while the table or the partition is paused (the rows waiting).',
        PARTITION_LAG,
    ),
    "maxRecordAvailabilityLagMs": _gauge(
        "pinot_controller_maxRecordAvailabilityLagMs_Value",
        "Milliseconds between now and the stream time of the last consumed record, worst "
        "consuming replica of the partition (0 when caught up); paused as for maxRecordsLag.",
        PARTITION_LAG,
    ),
    "partitionConsumedOffset": _gauge(
        "pinot_console_partition_consumed_offset",
        "The next offset the partition's most advanced replica consumes (each row counted once: "
        "rate() of it is the partition's ingestion rate, whatever the replication).",
        PARTITION,
    ),
    "partitionUpstreamOffset": _gauge(
        "pinot_console_partition_upstream_offset",
        "The stream partition's latest offset as the replicas last saw it (rate() of it is the "
        "rate rows arrive upstream).",
        PARTITION,
    ),
    "partitionPaused": _gauge(
        "pinot_console_partition_paused",
        "1 while the partition is paused (its table's pause, or listed in pausedPartitions), "
        "else 0; every partition of every REALTIME table.",
        PARTITION,
    ),
    "pausedPartitions": _gauge(
        "pinot_console_paused_partitions",
        "Partitions of the REALTIME table that are paused (all of them while the table is "
        "paused, else those listed in pausedPartitions).",
        TABLE,
    ),
    "partitionReplicasUp": _gauge(
        "pinot_console_partition_replicas_up",
        "Replicas of the partition's consuming (else latest) segment ONLINE or CONSUMING in the "
        "ExternalView on a live server.",
        PARTITION,
    ),
    "partitionReplicasExpected": _gauge(
        "pinot_console_partition_replicas_expected",
        "The table's replication (replicasPerPartition): what partitionReplicasUp should read.",
        PARTITION,
    ),
    "serversLive": _gauge(
        "pinot_console_servers_live",
        "Live servers carrying the tag (a REALTIME table's server tenant tag).",
        ("tag",),
    ),
    "serversNeeded": _gauge(
        "pinot_console_servers_needed",
        "Servers a tag needs: the highest replication of the REALTIME tables on that tag.",
        ("tag",),
    ),
    # Durable counters (tables.models.DurableCounter), keyed by their DurableCounter name.
    BUILD_FAILURE: _count(
        BUILD_FAILURE,
        "Segment builds (Spark) that failed, per consumer client id (table, topic, partition), "
        "since the cluster's database was created.",
        CLIENT,
        "pinot_server_",
    ),
    REINGESTION_FAILURE: _count(
        REINGESTION_FAILURE,
        "Re-ingestions of segments from the stream that failed, since the cluster's database "
        "was created.",
        TABLE,
        "pinot_server_",
    ),
    "llcStreamDataLoss": _count(
        "llcStreamDataLoss",
        "Times a partition had to resume past offsets the stream had already dropped "
        "(rows lost upstream before they were committed).",
    ),
    DEEP_STORE_LINK_MISSING: _count(
        DEEP_STORE_LINK_MISSING,
        "Segment commits that ended with a blank deep-store location (Pinot's controller meter in "
        "commit end; a peer:// location is not blank and is not counted).",
    ),
    UPLOAD_RETRY_SUCCESS: _count(
        UPLOAD_RETRY_SUCCESS,
        "Deep-store upload repairs that succeeded: a server uploaded its copy of a segment that "
        "had no deep-store copy (COMMITTING, or DONE with an empty download URL).",
    ),
    UPLOAD_RETRY_ERROR: _count(
        UPLOAD_RETRY_ERROR,
        "Deep-store upload repairs that failed (no server could upload its copy, or the segment's "
        "metadata could not be updated); the healer tries again at its next run.",
    ),
    "llcStateMachineAborts": _count(
        "llcStateMachineAborts",
        "Segment completion state machines aborted (commit timed out or failed) "
        "on the lead controller.",
    ),
    REFUSED_COUNTER: _count(
        REFUSED_COUNTER,
        "Segment completion calls the lead controller refused, by cause: no or a bad cluster "
        "token, an instance that is not live, not a replica of the segment, or an offset past "
        "the stream partition's end. The FSM and ZooKeeper were left unchanged.",
        ("cause",),
    ),
    TASK_RUN_COUNTER: _count(
        TASK_RUN_COUNTER,
        "Runs of a controller periodic task (the healing manager, the segment status checker), "
        "by task name.",
        ("taskName",),
    ),
    TASK_ERROR_COUNTER: _count(
        TASK_ERROR_COUNTER,
        "Runs of a controller periodic task that failed (could not list the tables, or a "
        "table's run failed), by task name.",
        ("taskName",),
    ),
    # Cluster.
    UPLOADS_IN_PROGRESS: _gauge(
        f"pinot_controller_{UPLOADS_IN_PROGRESS}_Value",
        "POST /segments/reingested requests (servers completing a re-ingested segment) being "
        "processed right now by any controller process (Pinot's global gauge; a process that "
        "died mid-request stops counting within 30 s). Absent while Redis cannot be read.",
    ),
    "LeaderPartitionCount": _gauge(
        "pinot_controller_LeaderPartitionCount_Value",
        "leadControllerResource partitions this controller is MASTER of while live "
        "(Pinot's controllerLeaderPartitionCount; one series per live controller, from the "
        "resource's ExternalView).",
        ("controller",),
    ),
    "pinotControllerLeader": _gauge(
        "pinot_controller_pinotControllerLeader_Value",
        "1 for the Helix cluster leader among the controllers (/CONTROLLER/LEADER), which "
        "assigns the leadControllerResource partitions; 0 for every other live controller.",
        ("controller",),
    ),
    "pinotLeadControllerResourceEnabled": _gauge(
        "pinot_controller_pinotLeadControllerResourceEnabled_Value",
        "1 while leadControllerResource is enabled (RESOURCE_ENABLED), 0 when disabled: the "
        "cluster leader then leads every table. One series per live controller.",
        ("controller",),
    ),
    "lead_controller_partitions_without_master": _gauge(
        "pinot_console_lead_controller_partitions_without_master",
        "leadControllerResource partitions with no live MASTER controller (and not led by the "
        "cluster leader as the disabled resource's fallback): their tables have no lead "
        "controller, so segments of those tables cannot commit.",
    ),
    "lead_controller_leaderless_seconds": _gauge(
        "pinot_console_lead_controller_leaderless_seconds",
        "Seconds since each leadControllerResource partition without a lead controller lost it "
        "(the cluster leader's record of the loss, else when the mirror first saw it).",
        ("partition",),
    ),
    "live_instances": _gauge(
        "pinot_console_live_instances",
        "Participants with a live instance znode in ZooKeeper, by kind (SERVER, CONTROLLER, ...).",
        ("kind",),
    ),
    "instances": _gauge(
        "pinot_console_instances",
        "Participants with an instance config in ZooKeeper, live or not, by kind.",
        ("kind",),
    ),
    "tables": _gauge(
        "pinot_console_tables",
        "Tables in the console's mirror of ZooKeeper, by table type (REALTIME, OFFLINE).",
        ("tableType",),
    ),
    # The mirror itself.
    "mirror_age_seconds": _gauge(
        "pinot_console_mirror_age_seconds",
        "Seconds since the ZooKeeper mirror last synced successfully (+Inf before the first "
        "sync); every other metric here is at most this old.",
    ),
    "mirror_last_sync_timestamp_seconds": _gauge(
        "pinot_console_mirror_last_sync_timestamp_seconds",
        "Unix time of the mirror's last successful sync (absent before the first sync).",
    ),
    "mirror_sync_duration_seconds": _gauge(
        "pinot_console_mirror_sync_duration_seconds",
        "How long the mirror's last sync of ZooKeeper took.",
    ),
    "mirror_sync_error": _gauge(
        "pinot_console_mirror_sync_error",
        "1 while the mirror's last sync attempt failed, else 0.",
    ),
}


@dataclass(frozen=True)
class TableGauge:
    """Where a per-table gauge comes from: a `MirroredTable` column (the mirror sync's counts)
    and/or a `TableStatusCheck` column, which wins while the check is fresh (a null there: absent
    from the check, the mirror's value stands)."""

    mirror: str | None
    check: str | None
    realtime_only: bool = False


TABLE_GAUGES: dict[str, TableGauge] = {
    "segmentsInErrorState": TableGauge("error_replicas", "segments_in_error_state"),
    "percentSegmentsAvailable": TableGauge("percent_available", "percent_segments_available"),
    "segmentsWithLessReplicas": TableGauge(None, "segments_with_less_replicas"),
    "numberOfReplicas": TableGauge(None, "number_of_replicas"),
    "percentOfReplicas": TableGauge(None, "percent_of_replicas"),
    "segmentsMissingDownloadUrl": TableGauge("missing_download_url", None),
    "tableConsumptionPaused": TableGauge("paused", "table_consumption_paused", True),
    "missingConsumingSegmentTotalCount": TableGauge(
        "missing_consuming", "missing_consuming_total", True
    ),
    "missingConsumingSegmentNewPartitionCount": TableGauge(
        None, "missing_consuming_new_partitions", True
    ),
    "missingConsumingSegmentMaxDurationMinutes": TableGauge(
        None, "missing_consuming_max_minutes", True
    ),
    "pauselessConsumptionEnabled": TableGauge("pauseless", None, True),
}
# Pauseless error gauges (query 7): definition keys.
PAUSELESS_GAUGES = ("pauselessSegmentsInErrorCount", "pauselessSegmentsInUnrecoverableErrorCount")
# The config values `committing_repair_allowed` reads, as JSON paths of MirroredTable.config.
REPAIR_CONFIG_PATHS = {
    "table__config__upsertConfig__mode": ("upsertConfig", "mode"),
    "table__config__dedupConfig__dedupEnabled": ("dedupConfig", "dedupEnabled"),
    "table__config__ingestionConfig__streamIngestionConfig__disasterRecoveryMode": (
        "ingestionConfig",
        "streamIngestionConfig",
        "disasterRecoveryMode",
    ),
}
# A status check older than this many checker periods is stale: the mirror's counts stand.
CHECK_FRESH_PERIODS = 3

# Per-partition gauges: definition key -> PartitionStatus column.
PARTITION_GAUGES: dict[str, str] = {
    "maxRecordsLag": "records_lag",
    "maxRecordAvailabilityLagMs": "time_lag_ms",
}
# Durable counters exposed (DurableCounter.name == definition key).
COUNTERS: tuple[str, ...] = (
    BUILD_FAILURE,
    REINGESTION_FAILURE,
    "llcStreamDataLoss",
    DEEP_STORE_LINK_MISSING,
    UPLOAD_RETRY_SUCCESS,
    UPLOAD_RETRY_ERROR,
    "llcStateMachineAborts",
)
# Counts stored under the names these counters had before they took Pinot's: added in.
LEGACY_COUNTERS: dict[str, str] = {
    "segmentBuildFailures": BUILD_FAILURE,
    "reingestionFailures": REINGESTION_FAILURE,
}
# Durable counters keyed by periodic task name (DurableCounter.table holds the task's name).
TASK_COUNTERS: tuple[str, ...] = (TASK_RUN_COUNTER, TASK_ERROR_COUNTER)
# Cluster-wide durable counters of refused completion calls, one per cause.
REFUSAL_COUNTERS: dict[str, Cause] = {refusal_counter_name(cause): cause for cause in Cause}


# --- an ingestion server's own families (monitoring.server_metrics) -------------------------------

SERVER_DEFINITIONS: dict[str, Definition] = {
    "realtimeRowsConsumed": _count(
        "realtimeRowsConsumed",
        "Rows consumed since the server started, per consumer client id; without labels the "
        "server-wide total.",
        CLIENT,
        "pinot_server_",
    ),
    "llcPartitionConsuming": _gauge(
        "pinot_server_llcPartitionConsuming_Value",
        "1 while the partition's segment is being consumed (not while holding or committing).",
        CLIENT,
    ),
    "pauselessConsumptionEnabled": _gauge(
        "pinot_server_pauselessConsumptionEnabled_Value",
        "1 when the partition's newest consumer on this server consumes in pauseless mode (its "
        "table's pauselessConsumptionEnabled when it started: it commits without stopping), else "
        "0; only partitions with a consumer on this server.",
        CLIENT,
    ),
    BUILD_FAILURE: _count(
        BUILD_FAILURE,
        "Segment builds this server asked for that failed, since it started.",
        CLIENT,
        "pinot_server_",
    ),
    "realtimeIngestionOffsetLag": _gauge(
        "pinot_server_realtimeIngestionOffsetLag_Value",
        "Latest upstream offset minus the next offset to consume.",
        PARTITION,
    ),
    "realtimeIngestionDelayMs": _gauge(
        "pinot_server_realtimeIngestionDelayMs_Value",
        "Milliseconds between now and the stream time of the last consumed message (0 when the "
        "partition is caught up).",
        PARTITION,
    ),
    "realtimeIngestionUpstreamOffset": _gauge(
        "pinot_server_realtimeIngestionUpstreamOffset_Value",
        "The stream partition's latest offset, as the consumer last saw it.",
        PARTITION,
    ),
    "realtimeIngestionConsumingOffset": _gauge(
        "pinot_server_realtimeIngestionConsumingOffset_Value",
        "The next offset the partition's consumer reads.",
        PARTITION,
    ),
}
