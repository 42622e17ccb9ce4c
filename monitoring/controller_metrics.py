"""The controller-side Prometheus metrics: cluster state under Pinot's names and labels (§9.3).

Every family is computed at scrape time from the database MIRROR of ZooKeeper (`tables.models`,
written by `tables.mirror.sync`, read through `tables.mirror.read_model` where a query is shared),
never from ZooKeeper itself, with a fixed number of aggregate queries (six, whatever the number of
tables or partitions: the status checks are joined to the tables' query), so a scrape stays cheap
at 1,000 tables x 16 partitions and works while ZooKeeper is down
(`pinot_console_mirror_age_seconds` then grows).

Families (all defined once, in `DEFINITIONS`):

- per table, Pinot's SegmentStatusChecker gauges as its JMX exporter names them:
  `pinot_controller_segmentsInErrorState_Value{table,tableType}` ((segment, replica) pairs in
  ERROR), `..._percentSegmentsAvailable_Value`, `..._tableConsumptionPaused_Value`,
  `..._missingConsumingSegmentTotalCount_Value`, `..._pauselessConsumptionEnabled_Value` and this
  project's `..._segmentsMissingDownloadUrl_Value`; `table` is the raw name. While the table's
  last status check (`tables.models.TableStatusCheck`, the SegmentStatusChecker task with Pinot's
  exact semantics, `tables.domain.status_checks`) is fresh (at most `CHECK_FRESH_PERIODS` of
  STATUS_CHECKER_FREQUENCY_SECONDS old, 1 min when unscheduled), the gauges it computes take its
  values; otherwise those of the mirror sync's own counts. The gauges only the checker computes,
  `..._segmentsWithLessReplicas_Value`, `..._numberOfReplicas_Value`, `..._percentOfReplicas_Value`,
  `..._missingConsumingSegmentNewPartitionCount_Value` and
  `..._missingConsumingSegmentMaxDurationMinutes_Value`, are there only for tables with a fresh
  check (the missing-consuming ones for REALTIME tables whose IdealState has segments).
- per partition, RealtimeConsumerMonitor's `pinot_controller_maxRecordsLag_Value` and
  `pinot_controller_maxRecordAvailabilityLagMs_Value{table,tableType,partition}`, only for
  partitions whose lag is known (`triage.lag_known`: a reporting replica knows its upstream
  offset); an unknown lag is absent, not 0.
- durable counters (`tables.models.DurableCounter`) as Pinot meters' `_Count`:
  `pinot_controller_<name>_Count{table,tableType}` (`llcStateMachineAborts`: `{table}` only, as
  Pinot keys that meter by raw table). They are exposed untyped, as `monitoring.server_metrics`
  does, so the names keep Pinot's `_Count` (a Prometheus counter would append `_total`). Every
  mirrored REALTIME table gets a 0 sample, so `increase()` sees a table's first failure; the
  counts of tables no longer mirrored (deleted) are not exposed, so their label sets go away.
  `pinot_controller_llcCompletionCallsRefused_Count{cause}` counts completion calls the lead
  controller refused (`tables.domain.completion_trust.Cause`; one durable counter per cause, every
  cause always sampled).
  `pinot_controller_controllerPeriodicTaskRun_Count{taskName}` and
  `..._controllerPeriodicTaskError_Count{taskName}` count the runs and failed runs of the
  controller periodic tasks (`tables.domain.periods.PERIODIC_TASKS`, each always sampled; Pinot
  keys these meters by task name).
- `LeadControllerManager`'s gauges, one series per controller (Pinot exports them per controller
  process, unlabelled; a scrape of the mirror sees every controller at once, hence the
  `controller` label): `pinot_controller_LeaderPartitionCount_Value` (Pinot's
  controllerLeaderPartitionCount after the JMX rule: the leadControllerResource partitions the
  controller is live MASTER of, 0 for a live controller with none),
  `pinot_controller_pinotControllerLeader_Value` (1 for the Helix cluster leader of
  `/CONTROLLER/LEADER`, 0 for every other live controller) and
  `pinot_controller_pinotLeadControllerResourceEnabled_Value` (per live controller, the
  resource's RESOURCE_ENABLED as 1/0; absent before the mirror first read it).
- the partitions whose tables have no lead controller, as the mirror sync decided
  (`tables.mirror.sync`: no live MASTER, and not led by the cluster leader because the resource
  is disabled): `pinot_console_lead_controller_partitions_without_master` (their count) and
  `pinot_console_lead_controller_leaderless_seconds{partition}` (per such partition, seconds
  since `leaderless_since`; `partition` is the number of `leadControllerResource_<n>`).
- this console's own: `pinot_console_live_instances{kind}`, `pinot_console_instances{kind}`,
  `pinot_console_tables{tableType}`, `pinot_console_mirror_age_seconds` (+Inf before the first
  sync),
  `pinot_console_mirror_last_sync_timestamp_seconds`, `pinot_console_mirror_sync_duration_seconds`
  and `pinot_console_mirror_sync_error` (1 while the last sync attempt failed).

A new durable counter needs one line in `DEFINITIONS`; names not defined there are not exposed.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from django.conf import settings
from django.db.models import Case, CharField, Count, F, Value, When
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric, UnknownMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from tables.domain.completion_trust import REFUSED_COUNTER, Cause, refusal_counter_name
from tables.domain.names import raw_table_name
from tables.domain.periods import PERIODIC_TASKS, TASK_ERROR_COUNTER, TASK_RUN_COUNTER
from tables.mirror import read_model
from tables.models import (
    DurableCounter,
    LeadControllerPartition,
    MirroredInstance,
    MirroredTable,
    MirrorState,
    PartitionStatus,
)

__all__ = [
    "COUNTERS",
    "DEFINITIONS",
    "ControllerCollector",
    "Definition",
    "controller_registry",
]

REALTIME = "REALTIME"
ALWAYS_REPORTED_KINDS = ("SERVER", "CONTROLLER")

TABLE = ("table", "tableType")
PARTITION = ("table", "tableType", "partition")


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


def _count(name: str, help: str, labels: tuple[str, ...] = TABLE) -> Definition:
    return Definition(f"pinot_controller_{name}_Count", "untyped", help, labels)


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
        "Committed segments whose ZK metadata has no deep-store download URL "
        "(peer-download commits not yet uploaded; repaired by the validation manager).",
        TABLE,
    ),
    # Per partition (RealtimeConsumerMonitor), from the replicas' published figures.
    "maxRecordsLag": _gauge(
        "pinot_controller_maxRecordsLag_Value",
        "Records behind the stream's latest offset, worst consuming replica of the partition.",
        PARTITION,
    ),
    "maxRecordAvailabilityLagMs": _gauge(
        "pinot_controller_maxRecordAvailabilityLagMs_Value",
        "Milliseconds between now and the stream time of the last consumed record, worst "
        "consuming replica of the partition (0 when caught up).",
        PARTITION,
    ),
    # Durable counters (tables.models.DurableCounter), keyed by their DurableCounter name.
    "segmentBuildFailures": _count(
        "segmentBuildFailures",
        "Segment builds (Spark) that failed, since the cluster's database was created.",
    ),
    "reingestionFailures": _count(
        "reingestionFailures",
        "Re-ingestions of ERROR segments that failed, since the cluster's database was created.",
    ),
    "llcStreamDataLoss": _count(
        "llcStreamDataLoss",
        "Times a partition had to resume past offsets the stream had already dropped "
        "(rows lost upstream before they were committed).",
    ),
    "llcStateMachineAborts": _count(
        "llcStateMachineAborts",
        "Segment completion state machines aborted (commit timed out or failed) "
        "on the lead controller.",
        ("table",),
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
# A status check older than this many checker periods is stale: the mirror's counts stand.
CHECK_FRESH_PERIODS = 3

# Per-partition gauges: definition key -> PartitionStatus column.
PARTITION_GAUGES: dict[str, str] = {
    "maxRecordsLag": "records_lag",
    "maxRecordAvailabilityLagMs": "time_lag_ms",
}
# Durable counters exposed (DurableCounter.name == definition key).
COUNTERS: tuple[str, ...] = (
    "segmentBuildFailures",
    "reingestionFailures",
    "llcStreamDataLoss",
    "llcStateMachineAborts",
)
# Durable counters keyed by periodic task name (DurableCounter.table holds the task's name).
TASK_COUNTERS: tuple[str, ...] = (TASK_RUN_COUNTER, TASK_ERROR_COUNTER)
# Cluster-wide durable counters of refused completion calls, one per cause.
REFUSAL_COUNTERS: dict[str, Cause] = {refusal_counter_name(cause): cause for cause in Cause}


# --- the collector --------------------------------------------------------------------------------


class ControllerCollector(Collector):
    """Builds every family from the mirror with a fixed number of aggregate queries."""

    def __init__(self, now: Callable[[], datetime] = timezone.now) -> None:
        self.now = now

    def collect(self) -> Iterator[Metric]:
        state = read_model.mirror_state()  # query 6, shared by the leadership and the mirror
        realtime = yield from self._tables()
        yield from self._partitions()
        yield from self._counters(realtime)
        live_controllers = yield from self._instances()
        yield from self._leadership(live_controllers, state)
        yield from self._mirror(state)

    def _check_cutoff(self) -> datetime:
        """Status checks made before this are stale."""
        period_s = settings.STATUS_CHECKER_FREQUENCY_SECONDS or 60
        return self.now() - timedelta(seconds=CHECK_FRESH_PERIODS * period_s)

    def _tables(self) -> Iterator[Metric]:
        """Query 1: every table's gauges, its status check joined. Returns the raw names of the
        REALTIME tables."""
        mirror = [(k, g.mirror) for k, g in TABLE_GAUGES.items() if g.mirror]
        check = [(k, g.check) for k, g in TABLE_GAUGES.items() if g.check]
        rows = MirroredTable.objects.order_by("raw_name", "table_type").values_list(
            "raw_name",
            "table_type",
            "status_check__checked_at",
            *[column for _, column in mirror],
            *[f"status_check__{column}" for _, column in check],
        )
        cutoff = self._check_cutoff()
        families = {key: DEFINITIONS[key].family() for key in TABLE_GAUGES}
        per_type: dict[str, int] = defaultdict(int)
        realtime: list[str] = []
        for raw, table_type, checked_at, *values in rows:
            per_type[table_type] += 1
            if table_type == REALTIME:
                realtime.append(raw)
            found = dict(zip([key for key, _ in mirror], values[: len(mirror)], strict=True))
            if checked_at is not None and checked_at >= cutoff:
                checked = zip([key for key, _ in check], values[len(mirror) :], strict=True)
                found.update((key, value) for key, value in checked if value is not None)
            for key, gauge in TABLE_GAUGES.items():
                if key in found and (table_type == REALTIME or not gauge.realtime_only):
                    families[key].add_metric([raw, table_type], float(found[key]))
        yield from families.values()
        tables = DEFINITIONS["tables"].family()
        for table_type in sorted({REALTIME, "OFFLINE", *per_type}):
            tables.add_metric([table_type], per_type[table_type])
        yield tables
        return realtime

    def _partitions(self) -> Iterator[Metric]:
        """Query 2: every partition's known lag, joined to its table's names."""
        known = PartitionStatus.objects.filter(upstream_offset__isnull=False)
        rows = known.order_by("table__raw_name", "table__table_type", "partition").values_list(
            "table__raw_name", "table__table_type", "partition", *PARTITION_GAUGES.values()
        )
        families = {key: DEFINITIONS[key].family() for key in PARTITION_GAUGES}
        for raw, table_type, partition, *values in rows:
            labels = [raw, table_type, str(partition)]
            for key, value in zip(PARTITION_GAUGES, values, strict=True):
                families[key].add_metric(labels, float(value))
        yield from families.values()

    def _counters(self, realtime: list[str]) -> Iterator[Metric]:
        """Query 3: the durable counters; a 0 for every REALTIME table that has none yet."""
        values: dict[str, dict[str, int]] = {name: dict.fromkeys(realtime, 0) for name in COUNTERS}
        mirrored = set(realtime)
        refused: dict[Cause, int] = dict.fromkeys(Cause, 0)
        tasks = {name: dict.fromkeys(PERIODIC_TASKS, 0) for name in TASK_COUNTERS}
        names = (*COUNTERS, *REFUSAL_COUNTERS, *TASK_COUNTERS)
        rows = DurableCounter.objects.filter(name__in=names).values_list("name", "table", "value")
        for name, table, value in rows:
            if name in REFUSAL_COUNTERS:
                refused[REFUSAL_COUNTERS[name]] += value
                continue
            if name in TASK_COUNTERS:  # keyed by task name, not by table
                tasks[name][table] = tasks[name].get(table, 0) + value
                continue
            raw = raw_table_name(table)
            if raw and raw not in mirrored:
                continue  # a deleted table: its series end with it, no stale label set stays
            values[name][raw] = values[name].get(raw, 0) + value
        for name in COUNTERS:
            definition = DEFINITIONS[name]
            family = definition.family()
            for raw in sorted(values[name]):
                if not raw:  # a cluster-wide count (empty table): Pinot's global meter, unlabelled
                    family.add_sample(family.name, {}, float(values[name][raw]))
                elif definition.labels == TABLE:
                    family.add_metric([raw, REALTIME], float(values[name][raw]))
                else:
                    family.add_metric([raw], float(values[name][raw]))
            yield family
        family = DEFINITIONS[REFUSED_COUNTER].family()
        for cause in sorted(refused):
            family.add_metric([str(cause)], float(refused[cause]))
        yield family
        for name in TASK_COUNTERS:
            family = DEFINITIONS[name].family()
            for task in sorted(tasks[name]):
                family.add_metric([task], float(tasks[name][task]))
            yield family

    def _instances(self) -> Iterator[Metric]:
        """Query 4: participants counted by kind and liveness, controllers one by one. Returns
        the names of the live controllers."""
        controller = Case(
            When(kind="CONTROLLER", then=F("name")), default=Value(""), output_field=CharField()
        )
        rows = MirroredInstance.objects.annotate(controller=controller).values_list(
            "kind", "live", "controller"
        )
        known: dict[str, int] = dict.fromkeys(ALWAYS_REPORTED_KINDS, 0)
        live: dict[str, int] = dict.fromkeys(ALWAYS_REPORTED_KINDS, 0)
        controllers: list[str] = []
        for kind, is_live, name, n in rows.annotate(n=Count("id")).order_by():
            known[kind] = known.get(kind, 0) + n
            live[kind] = live.get(kind, 0) + (n if is_live else 0)
            if name and is_live:
                controllers.append(name)
        live_family = DEFINITIONS["live_instances"].family()
        known_family = DEFINITIONS["instances"].family()
        for kind in sorted(known):
            live_family.add_metric([kind], live[kind])
            known_family.add_metric([kind], known[kind])
        yield live_family
        yield known_family
        return sorted(controllers)

    def _leadership(self, live: list[str], state: MirrorState) -> Iterator[Metric]:
        """Query 5: the leadControllerResource partitions (one row each), with the live
        controllers and the mirror's cluster leader and RESOURCE_ENABLED."""
        rows = LeadControllerPartition.objects.order_by("partition_id").values_list(
            "partition_id", "controller", "leaderless_since"
        )
        fallback = state.lead_resource_enabled is False and bool(state.cluster_leader)
        led: dict[str, int] = dict.fromkeys(live, 0)
        orphans = DEFINITIONS["lead_controller_leaderless_seconds"].family()
        without = 0
        for partition, controller, since in rows:
            if controller:
                led[controller] = led.get(controller, 0) + 1
            elif not fallback:
                without += 1
                if since is not None:
                    age = max(0.0, (self.now() - since).total_seconds())
                    orphans.add_metric([str(partition)], age)
        counts = DEFINITIONS["LeaderPartitionCount"].family()
        for controller in sorted(led):
            counts.add_metric([controller], led[controller])
        total = DEFINITIONS["lead_controller_partitions_without_master"].family()
        total.add_metric([], without)
        yield from (counts, *_controller_roles(live, state), total, orphans)

    def _mirror(self, state: MirrorState) -> Iterator[Metric]:
        """The mirror's own state (`read_model.freshness` of query 6's row)."""
        mirror = read_model.freshness(state, now=self.now())
        age = DEFINITIONS["mirror_age_seconds"].family()
        timestamp = DEFINITIONS["mirror_last_sync_timestamp_seconds"].family()
        if mirror.last_synced is None or mirror.age_s is None:
            age.add_metric([], math.inf)
        else:
            age.add_metric([], mirror.age_s)
            timestamp.add_metric([], mirror.last_synced.timestamp())
        duration = DEFINITIONS["mirror_sync_duration_seconds"].family()
        duration.add_metric([], mirror.duration_ms / 1000)
        failing = DEFINITIONS["mirror_sync_error"].family()
        failing.add_metric([], 1 if mirror.error else 0)
        yield from (age, timestamp, duration, failing)


def _controller_roles(live: list[str], state: MirrorState) -> tuple[Metric, Metric]:
    """pinotControllerLeader (every live controller and the cluster leader) and
    pinotLeadControllerResourceEnabled (every live controller, once the mirror read it)."""
    leader = DEFINITIONS["pinotControllerLeader"].family()
    named = {*live, state.cluster_leader} - {""}
    for controller in sorted(named):
        leader.add_metric([controller], 1 if controller == state.cluster_leader else 0)
    enabled = DEFINITIONS["pinotLeadControllerResourceEnabled"].family()
    if state.lead_resource_enabled is not None:
        for controller in live:
            enabled.add_metric([controller], 1 if state.lead_resource_enabled else 0)
    return leader, enabled


_registry: CollectorRegistry | None = None


def controller_registry() -> CollectorRegistry:
    """The process's registry holding the one `ControllerCollector` (created on first use)."""
    global _registry
    if _registry is None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(ControllerCollector())
        _registry = registry
    return _registry
