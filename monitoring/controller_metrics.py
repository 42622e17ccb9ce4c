"""The controller-side Prometheus metrics: cluster state under Pinot's names and labels (§9.3).

The families are computed at scrape time from the database MIRROR of ZooKeeper (`tables.models`,
written by `tables.mirror.sync`, read through `tables.mirror.read_model` where a query is shared),
with a fixed number of aggregate queries (six; one more when a table is pauseless, two more when a
partition is paused or unreported; whatever the number of tables or partitions: the status checks
are joined to the tables' query), so a scrape stays cheap at 1,000 tables x 16 partitions and
works while ZooKeeper is down (`pinot_console_mirror_age_seconds` then grows). Three exceptions,
each answering from the mirror (or not at all) when its source cannot be read:
`pinot_controller_reingestedSegmentUploadsInProgress_Value`, read from Redis in one round trip
(below); the lead-controller health, read from ZooKeeper itself (`monitoring.leadership_live`,
five reads), so a controller that died since the mirror's last sync reads as dead at once, however
the worker's sync fares; and the stream's latest offset of the partitions no replica reports on
(paused ones included: `monitoring.partition_metrics`, `monitoring.stream_offsets`).

Families (all defined once, in `DEFINITIONS`):

- per table, Pinot's SegmentStatusChecker gauges as its JMX exporter names them:
  `pinot_controller_segmentsInErrorState_Value{table,tableType}` ((segment, replica) pairs in
  ERROR), `..._percentSegmentsAvailable_Value`, `..._tableConsumptionPaused_Value`,
  `..._missingConsumingSegmentTotalCount_Value`, `..._pauselessConsumptionEnabled_Value` and this
  project's `..._segmentsMissingDownloadUrl_Value` (not a Pinot metric: the table's COMMITTING
  segments and its DONE segments whose download URL is empty, i.e. not in the deep store yet);
  `table` is the raw name. While the table's
  last status check (`tables.models.TableStatusCheck`, the SegmentStatusChecker task with Pinot's
  exact semantics, `tables.domain.status_checks`) is fresh (at most `CHECK_FRESH_PERIODS` of
  STATUS_CHECKER_FREQUENCY_SECONDS old, 1 min when unscheduled), the gauges it computes take its
  values; otherwise those of the mirror sync's own counts. The gauges only the checker computes,
  `..._segmentsWithLessReplicas_Value`, `..._numberOfReplicas_Value`, `..._percentOfReplicas_Value`,
  `..._missingConsumingSegmentNewPartitionCount_Value` and
  `..._missingConsumingSegmentMaxDurationMinutes_Value`, are there only for tables with a fresh
  check (the missing-consuming ones for REALTIME tables whose IdealState has segments).
- per pauseless REALTIME table, RealtimeSegmentValidationManager's
  `pinot_controller_pauselessSegmentsInErrorCount_Value{table,tableType}` (Pinot's count in
  `repairSegmentsInErrorState`: LLC segments of the IdealState whose every ExternalView replica is
  ERROR, whatever their ZK status; COMMITTING ones are re-ingested, the others reset) and
  `..._pauselessSegmentsInUnrecoverableErrorCount_Value` (the same count when the healer may not
  repair them: a partial-upsert or dedup table in disasterRecoveryMode DEFAULT,
  `doctor_facts.committing_repair_allowed`; else 0). Computed from the mirror at each scrape, so
  they hold between healer runs; absent for other tables, as Pinot sets them only for pauseless
  ones.
- per partition (`monitoring.partition_metrics` says what each means): RealtimeConsumerMonitor's
  `pinot_controller_maxRecordsLag_Value` and
  `pinot_controller_maxRecordAvailabilityLagMs_Value{table,tableType,partition,paused}` (an
  unknown lag is absent, not 0; a paused partition's is the rows waiting, `paused="true"`), and
  the console's `pinot_console_partition_consumed_offset`, `..._upstream_offset`,
  `..._paused`, `..._replicas_up` and `..._replicas_expected{table,tableType,partition}`;
  per REALTIME table `pinot_console_paused_partitions{table,tableType}`; per server tag of the
  REALTIME tables `pinot_console_servers_live{tag}` and `pinot_console_servers_needed{tag}` (the
  highest replication on the tag). `missingConsumingSegmentTotalCount` counts paused partitions
  without a CONSUMING segment, as Pinot's (the IdealState's) does, also when it comes from the
  mirror's count, which leaves them out: alerts subtract `pinot_console_paused_partitions`.
- durable counters (`tables.models.DurableCounter`) as Pinot meters' `_Count`:
  `pinot_controller_<name>_Count{table,tableType}` (`llcStreamDataLoss`; Pinot's
  `segmentMissingDeepStoreLink`, commits ended with a blank deep-store location, and the
  deep-store upload repair's `llcSegmentsDeepStoreUploadRetrySuccess` and `...RetryError`;
  and `llcStateMachineAborts`, like every table family) and the two
  server meters Pinot's
  pauseless design names, with the server's prefix and labels:
  `pinot_server_segmentBuildFailure_Count{table,tableType,topic,partition}` (Pinot keys it by the
  consumer's client id `<table>_REALTIME-<topic>-<partition>`, which is the counter's stored key;
  a count stored under a table name only, such as the old `segmentBuildFailures` counter's, has
  empty `topic` and `partition`, i.e. none) and
  `pinot_server_segmentReingestionFailure_Count{table,tableType}` (per table; the old
  `reingestionFailures` counter's counts are added in). The servers export the build failures
  they saw themselves under the same name (`monitoring.server_metrics`, since the server
  started); this one counts every failed Spark build since the database was created: aggregate
  with `max by`, as for every family here. They are exposed untyped, as
  `monitoring.server_metrics` does, so the names keep Pinot's `_Count` (a Prometheus counter
  would append `_total`). Every mirrored REALTIME table (every mirrored partition, for the build
  failures) gets a 0 sample, so `increase()` sees its first failure; the counts of tables no
  longer mirrored (deleted) are not exposed, so their label sets go away.
  `pinot_controller_llcCompletionCallsRefused_Count{cause}` counts completion calls the lead
  controller refused (`tables.domain.completion_trust.Cause`; one durable counter per cause, every
  cause always sampled).
  `pinot_controller_controllerPeriodicTaskRun_Count{taskName}` and
  `..._controllerPeriodicTaskError_Count{taskName}` count the runs and failed runs of the
  controller periodic tasks (`tables.domain.periods.PERIODIC_TASKS`, each always sampled; Pinot
  keys these meters by task name).
- Pinot's global gauge `pinot_controller_reingestedSegmentUploadsInProgress_Value`: the
  `POST /segments/reingested` requests being processed right now by every controller (and web)
  process together, from leases in Redis (`monitoring.in_progress`: a process that dies
  mid-request stops counting within 30 s); no sample while Redis cannot be read.
- `LeadControllerManager`'s gauges, one series per controller (Pinot exports them per controller
  process, unlabelled; a scrape of the mirror sees every controller at once, hence the
  `controller` label): `pinot_controller_LeaderPartitionCount_Value` (Pinot's
  controllerLeaderPartitionCount after the JMX rule: the leadControllerResource partitions the
  controller is live MASTER of, 0 for a live controller with none),
  `pinot_controller_pinotControllerLeader_Value` (1 for the Helix cluster leader of
  `/CONTROLLER/LEADER`, 0 for every other live controller) and
  `pinot_controller_pinotLeadControllerResourceEnabled_Value` (per live controller, the
  resource's RESOURCE_ENABLED as 1/0; absent before the mirror first read it).
- the partitions whose tables have no lead controller, as ZooKeeper has it now
  (`monitoring.leadership_live`; the mirror sync's decision while ZooKeeper cannot be read: no
  live MASTER, and not led by the cluster leader because the resource is disabled):
  `pinot_console_lead_controller_partitions_without_master` (their count) and
  `pinot_console_lead_controller_leaderless_seconds{partition}` (per such partition, seconds
  since the mirror's `leaderless_since`; absent for a loss the mirror has not seen yet;
  `partition` is the number of `leadControllerResource_<n>`). The LeadControllerManager gauges
  above take the live controllers, cluster leader and RESOURCE_ENABLED from ZooKeeper too.
- this console's own: `pinot_console_live_instances{kind}`, `pinot_console_instances{kind}`,
  `pinot_console_tables{tableType}`, `pinot_console_mirror_age_seconds` (+Inf before the first
  sync),
  `pinot_console_mirror_last_sync_timestamp_seconds`, `pinot_console_mirror_sync_duration_seconds`
  and `pinot_console_mirror_sync_error` (1 while the last sync attempt failed).

The definitions (names, help, labels, where each value comes from) are `monitoring.definitions`;
a new durable counter needs one line in its `DEFINITIONS` and `COUNTERS`; names not defined there
are not exposed.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import redis
from django.conf import settings
from django.utils import timezone
from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from monitoring import leadership_live
from monitoring.definitions import (
    BUILD_FAILURE,
    CHECK_FRESH_PERIODS,
    CLIENT,
    COUNTERS,
    DEFINITIONS,
    LEGACY_COUNTERS,
    PAUSELESS_GAUGES,
    REALTIME,
    REFUSAL_COUNTERS,
    REINGESTION_FAILURE,
    REPAIR_CONFIG_PATHS,
    TABLE,
    TABLE_GAUGES,
    TASK_COUNTERS,
    UPLOADS_IN_PROGRESS,
    Definition,
)
from monitoring.in_progress import count_in_progress
from monitoring.partition_metrics import PartitionFacts, partition_families
from tables.domain.completion_trust import REFUSED_COUNTER, Cause
from tables.domain.doctor_facts import committing_repair_allowed
from tables.domain.names import raw_table_name
from tables.domain.periods import PERIODIC_TASKS
from tables.mirror import read_model
from tables.models import (
    DurableCounter,
    LeadControllerPartition,
    MirroredInstance,
    MirroredSegment,
    MirroredTable,
    MirrorState,
)
from tables.redisconn import get_redis

__all__ = [
    "BUILD_FAILURE",
    "COUNTERS",
    "DEFINITIONS",
    "REINGESTION_FAILURE",
    "ControllerCollector",
    "Definition",
    "controller_registry",
]

log = logging.getLogger(__name__)

REALTIME_SUFFIX = "_REALTIME"
ALWAYS_REPORTED_KINDS = ("SERVER", "CONTROLLER")
MISSING = "missingConsumingSegmentTotalCount"


# --- the collector --------------------------------------------------------------------------------


class ControllerCollector(Collector):
    """Builds every family from the mirror with a fixed number of aggregate queries."""

    def __init__(self, now: Callable[[], datetime] = timezone.now) -> None:
        self.now = now

    def collect(self) -> Iterator[Metric]:
        state = read_model.mirror_state()  # query 6, shared by the leadership and the mirror
        live = yield from self._instances()
        facts = PartitionFacts()
        yield from partition_families(live.servers, facts)
        realtime = yield from self._tables(facts, live)
        yield from self._pauseless(realtime)
        yield from self._counters(realtime, facts.partitions)
        yield self._uploads_in_progress()
        yield from self._leadership(live.controllers, state)
        yield from self._mirror(state)

    def _check_cutoff(self) -> datetime:
        """Status checks made before this are stale."""
        period_s = settings.STATUS_CHECKER_FREQUENCY_SECONDS or 60
        return self.now() - timedelta(seconds=CHECK_FRESH_PERIODS * period_s)

    def _tables(self, facts: PartitionFacts, live: LiveInstances) -> Iterator[Metric]:
        """Query 1: every table's gauges, its status check joined, the paused partitions and the
        servers each tag needs. Returns the REALTIME tables: raw name -> (topic, pauseless)."""
        mirror = [(k, g.mirror) for k, g in TABLE_GAUGES.items() if g.mirror]
        check = [(k, g.check) for k, g in TABLE_GAUGES.items() if g.check]
        rows = MirroredTable.objects.order_by("raw_name", "table_type").values_list(
            "raw_name",
            "table_type",
            "topic",
            "tenant",
            "replication",
            "status_check__checked_at",
            *[column for _, column in mirror],
            *[f"status_check__{column}" for _, column in check],
        )
        cutoff = self._check_cutoff()
        families = {key: DEFINITIONS[key].family() for key in TABLE_GAUGES}
        per_type: dict[str, int] = defaultdict(int)
        realtime: dict[str, tuple[str, bool]] = {}
        needed: dict[str, int] = {}
        paused = DEFINITIONS["pausedPartitions"].family()
        for raw, table_type, topic, tenant, replication, checked_at, *values in rows:
            per_type[table_type] += 1
            found = dict(zip([key for key, _ in mirror], values[: len(mirror)], strict=True))
            if table_type == REALTIME:
                realtime[raw] = (topic, bool(found.get("pauselessConsumptionEnabled")))
                paused.add_metric([raw, table_type], facts.paused.get(raw, 0))
                # The mirror leaves paused partitions out; Pinot reads the IdealState only.
                found[MISSING] = found.get(MISSING, 0) + facts.paused_missing_consuming.get(raw, 0)
                if tenant:
                    needed[tenant] = max(needed.get(tenant, 0), replication)
            if checked_at is not None and checked_at >= cutoff:
                checked = zip([key for key, _ in check], values[len(mirror) :], strict=True)
                found.update((key, value) for key, value in checked if value is not None)
            for key, gauge in TABLE_GAUGES.items():
                if key in found and (table_type == REALTIME or not gauge.realtime_only):
                    families[key].add_metric([raw, table_type], float(found[key]))
        yield from families.values()
        yield paused
        yield from _servers(needed, live.tags)
        tables = DEFINITIONS["tables"].family()
        for table_type in sorted({REALTIME, "OFFLINE", *per_type}):
            tables.add_metric([table_type], per_type[table_type])
        yield tables
        return realtime

    def _pauseless(self, realtime: dict[str, tuple[str, bool]]) -> Iterator[Metric]:
        """Query 7 (only when some table is pauseless): the pauseless tables' LLC segments with
        an ERROR replica, with the config values that decide whether the healer may repair them."""
        pauseless = sorted(raw for raw, (_topic, enabled) in realtime.items() if enabled)
        in_error: dict[str, int] = dict.fromkeys(pauseless, 0)
        allowed: dict[str, bool] = dict.fromkeys(pauseless, True)
        errors, unrecoverable = (DEFINITIONS[key].family() for key in PAUSELESS_GAUGES)
        if not pauseless:
            yield from (errors, unrecoverable)
            return
        rows = MirroredSegment.objects.filter(
            has_error=True,
            sequence__isnull=False,
            table__pauseless=True,
            table__table_type=REALTIME,
        ).values_list("table__raw_name", "ideal_states", "external_states", *REPAIR_CONFIG_PATHS)
        for raw, ideal, external, *config_values in rows:
            if raw not in in_error or not ideal or not external:
                continue
            allowed[raw] = committing_repair_allowed(_repair_config(config_values))
            in_error[raw] += all(state == "ERROR" for state in external.values())
        for raw in pauseless:
            errors.add_metric([raw, REALTIME], in_error[raw])
            unrecoverable.add_metric([raw, REALTIME], 0 if allowed[raw] else in_error[raw])
        yield from (errors, unrecoverable)

    def _counters(
        self, realtime: dict[str, tuple[str, bool]], partitions: dict[str, list[int]]
    ) -> Iterator[Metric]:
        """Query 3: the durable counters; a 0 for every REALTIME table (every partition, for the
        counters keyed by client id) that has none yet."""
        values: dict[str, dict[tuple[str, ...], int]] = {
            name: _zeros(DEFINITIONS[name].labels, realtime, partitions) for name in COUNTERS
        }
        refused: dict[Cause, int] = dict.fromkeys(Cause, 0)
        tasks = {name: dict.fromkeys(PERIODIC_TASKS, 0) for name in TASK_COUNTERS}
        names = (*COUNTERS, *LEGACY_COUNTERS, *REFUSAL_COUNTERS, *TASK_COUNTERS)
        rows = DurableCounter.objects.filter(name__in=names).values_list("name", "table", "value")
        for name, table, value in rows:
            if name in REFUSAL_COUNTERS:
                refused[REFUSAL_COUNTERS[name]] += value
                continue
            if name in TASK_COUNTERS:  # keyed by task name, not by table
                tasks[name][table] = tasks[name].get(table, 0) + value
                continue
            name = LEGACY_COUNTERS.get(name, name)
            key = _counter_key(DEFINITIONS[name].labels, table)
            if key[0] and key[0] not in realtime:
                continue  # a deleted table: its series end with it, no stale label set stays
            values[name][key] = values[name].get(key, 0) + value
        for name in COUNTERS:
            definition = DEFINITIONS[name]
            family = definition.family()
            for key in sorted(values[name]):
                if not key[0]:  # a cluster-wide count (empty table): Pinot's global meter
                    family.add_sample(family.name, {}, float(values[name][key]))
                else:
                    family.add_metric(list(key), float(values[name][key]))
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

    def _uploads_in_progress(self) -> Metric:
        """The one figure read from Redis (no query): re-ingested segment uploads in progress in
        every process (`monitoring.in_progress`); no sample while Redis cannot be read."""
        family = DEFINITIONS[UPLOADS_IN_PROGRESS].family()
        try:
            count = count_in_progress(get_redis(settings.REDIS_URL), settings.CLUSTER_NAME)
        except redis.RedisError as exc:
            log.warning("/metrics: cannot read the uploads in progress from Redis: %s", exc)
            return family
        family.add_metric([], count)
        return family

    def _instances(self) -> Iterator[Metric]:
        """Query 4: participants (kind, liveness, name, tags), counted by kind. Returns the live
        controllers and servers and the live servers' tags."""
        rows = MirroredInstance.objects.order_by("name").values_list("kind", "live", "name", "tags")
        known: dict[str, int] = dict.fromkeys(ALWAYS_REPORTED_KINDS, 0)
        live_count: dict[str, int] = dict.fromkeys(ALWAYS_REPORTED_KINDS, 0)
        live = LiveInstances()
        for kind, is_live, name, tags in rows:
            known[kind] = known.get(kind, 0) + 1
            live_count[kind] = live_count.get(kind, 0) + (1 if is_live else 0)
            if is_live and kind == "CONTROLLER":
                live.controllers.append(name)
            elif is_live and kind == "SERVER":
                live.servers.add(name)
                for tag in tags or []:
                    live.tags[tag] = live.tags.get(tag, 0) + 1
        live_family = DEFINITIONS["live_instances"].family()
        known_family = DEFINITIONS["instances"].family()
        for kind in sorted(known):
            live_family.add_metric([kind], live_count[kind])
            known_family.add_metric([kind], known[kind])
        yield live_family
        yield known_family
        return live

    def _leadership(self, live: list[str], state: MirrorState) -> Iterator[Metric]:
        """Query 5: the leadControllerResource partitions (one row each). What ZooKeeper says
        now (`monitoring.leadership_live`: live MASTERs, live controllers, cluster leader,
        RESOURCE_ENABLED) wins; the mirror's rows and state stand while ZooKeeper cannot be read.
        The mirror gives the leaderless partitions' since-times (absent when it has not seen the
        loss yet)."""
        rows = LeadControllerPartition.objects.order_by("partition_id").values_list(
            "partition_id", "controller", "leaderless_since"
        )
        since = {partition: at for partition, _controller, at in rows}
        masters = {partition: controller for partition, controller, _at in rows}
        leader, enabled = state.cluster_leader, state.lead_resource_enabled
        now_zk = leadership_live.read_live_leadership()
        if now_zk is not None:
            live, masters = now_zk.live_controllers, now_zk.masters
            leader, enabled = now_zk.cluster_leader, now_zk.resource_enabled
        fallback = enabled is False and bool(leader)
        led: dict[str, int] = dict.fromkeys(live, 0)
        orphans = DEFINITIONS["lead_controller_leaderless_seconds"].family()
        without = 0
        for partition in sorted(masters):
            controller = masters[partition]
            if controller:
                led[controller] = led.get(controller, 0) + 1
            elif not fallback:
                without += 1
                if since.get(partition) is not None:
                    age = max(0.0, (self.now() - since[partition]).total_seconds())
                    orphans.add_metric([str(partition)], age)
        counts = DEFINITIONS["LeaderPartitionCount"].family()
        for controller in sorted(led):
            counts.add_metric([controller], led[controller])
        total = DEFINITIONS["lead_controller_partitions_without_master"].family()
        total.add_metric([], without)
        roles = _controller_roles(live, leader, enabled)
        yield from (counts, *roles, total, orphans)

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


@dataclass
class LiveInstances:
    """The live participants query 4 found."""

    controllers: list[str] = field(default_factory=list)
    servers: set[str] = field(default_factory=set)
    tags: dict[str, int] = field(default_factory=dict)  # live servers per tag


def _servers(needed: dict[str, int], live_tags: dict[str, int]) -> Iterator[Metric]:
    """Live servers against what the REALTIME tables' server tags need, per tag."""
    live = DEFINITIONS["serversLive"].family()
    need = DEFINITIONS["serversNeeded"].family()
    for tag in sorted(needed):
        live.add_metric([tag], live_tags.get(tag, 0))
        need.add_metric([tag], needed[tag])
    yield from (live, need)


def _repair_config(values: list[object]) -> dict[str, object]:
    """The table config sections `committing_repair_allowed` reads, from query 7's JSON paths."""
    config: dict[str, object] = {}
    for path, value in zip(REPAIR_CONFIG_PATHS.values(), values, strict=True):
        if value is None:
            continue
        node = config
        for part in path[:-1]:
            node = node.setdefault(part, {})  # type: ignore[assignment]
        node[path[-1]] = value
    return config


def _client_id(key: str) -> tuple[str, str, str] | None:
    """Pinot's consumer client id `<table>_REALTIME-<topic>-<partition>` -> (raw table, topic,
    partition); None for anything else (a bare table name)."""
    at = key.find(REALTIME_SUFFIX + "-")
    if at <= 0:
        return None
    topic, _, partition = key[at + len(REALTIME_SUFFIX) + 1 :].rpartition("-")
    if not topic or not partition.isdigit():
        return None
    return key[:at], topic, partition


def _counter_key(labels: tuple[str, ...], stored: str) -> tuple[str, ...]:
    """The label values of a durable count stored under `stored` (a table name, raw or with its
    type, a client id for the counters keyed by one, or "" for a cluster-wide count); the label
    values always start with the raw table name."""
    if labels == CLIENT:
        parsed = _client_id(stored)
        if parsed is not None:
            return parsed[0], REALTIME, parsed[1], parsed[2]
        raw = raw_table_name(stored)
        return (raw, REALTIME, "", "") if raw else ("",)
    raw = raw_table_name(stored)
    if not raw:
        return ("",)
    return (raw, REALTIME) if labels == TABLE else (raw,)


def _zeros(
    labels: tuple[str, ...],
    realtime: dict[str, tuple[str, bool]],
    partitions: dict[str, list[int]],
) -> dict[tuple[str, ...], int]:
    """A 0 for every REALTIME table (every mirrored partition, for a counter keyed by client
    id), so `increase()` sees the first count."""
    if labels == CLIENT:
        return {
            (raw, REALTIME, topic, str(p)): 0
            for raw, (topic, _pauseless) in realtime.items()
            for p in partitions.get(raw, ())
        }
    if labels == TABLE:
        return {(raw, REALTIME): 0 for raw in realtime}
    return {(raw,): 0 for raw in realtime}


def _controller_roles(
    live: list[str], cluster_leader: str, resource_enabled: bool | None
) -> tuple[Metric, Metric]:
    """pinotControllerLeader (every live controller and the cluster leader) and
    pinotLeadControllerResourceEnabled (every live controller, once the mirror read it)."""
    leader = DEFINITIONS["pinotControllerLeader"].family()
    named = {*live, cluster_leader} - {""}
    for controller in sorted(named):
        leader.add_metric([controller], 1 if controller == cluster_leader else 0)
    enabled = DEFINITIONS["pinotLeadControllerResourceEnabled"].family()
    if resource_enabled is not None:
        for controller in live:
            enabled.add_metric([controller], 1 if resource_enabled else 0)
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
