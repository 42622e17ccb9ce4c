"""What the healing manager repairs, decided from a table's state (pure; round 2 §A.3, §A.6).

`plan_consuming_repairs` is Pinot's `ensureAllPartitionsConsuming` as a decision: from the
IdealState (segment -> instance -> state), the facts of every LLC segment's ZK metadata (status,
offsets, znode mtime), the stream's partitions and `now_ms`, it returns a `Plan`. For each
partition, whose *latest* segment is the highest sequence in ZooKeeper (not the IdealState), the
first matching case of Pinot's order applies:

1. latest in the IdealState with a CONSUMING replica and status DONE (COMMITTING for a pauseless
   table, `pauseless`): the controller stopped after commit step 1. Past the guard (znode mtime +
   `max_completion_ms`) the latest goes ONLINE and a new segment starts at its end offset
   (`COMMIT_STOPPED_AFTER_STEP1`); when the stream no longer has the partition the latest only goes
   ONLINE (`PARTITION_ENDED`). Before the guard: a `Wait`. (A pauseless latest that goes ONLINE
   unbuilt leaves its replicas waiting for a download URL, then ERROR: re-ingestion follows.)
2. same, IN_PROGRESS, with OFFLINE replicas and `partial_offline_repair`: those replicas go back to
   CONSUMING (`PARTIAL_OFFLINE`). Otherwise healthy.
3. latest in the IdealState with no CONSUMING replica: all replicas OFFLINE (the servers stopped
   consuming) -> a new segment from the latest's *start* offset (`ALL_REPLICAS_OFFLINE`); all ONLINE
   and not IN_PROGRESS (resume after pause, deleted consuming segment) -> from its *end* offset
   (`NO_CONSUMING_SEGMENT`); anything else is unexpected (a problem, no action). A partition the
   stream no longer has gets nothing.
4. latest not in the IdealState: the controller stopped after commit step 2. Past the guard (the
   latest's own mtime), when IN_PROGRESS: a CONSUMING segment of the partition goes ONLINE and the
   latest is added CONSUMING (`COMMIT_STOPPED_AFTER_STEP2`); with none found that is Pinot's
   "potential data loss" (`data_loss`), and the latest is added anyway. Other statuses: a problem.
Then every stream partition with no segment at all gets sequence 0 from the stream's earliest
offset (`NEW_PARTITION`). Paused partitions (`paused_partitions`) are left alone; the caller skips
the whole plan for a paused table, as Pinot does.
The guard of cases 1 and 4 (and of duplicate sequences, below) does not apply to a write older
than `takeover_ms`, the moment the table's current lead controller took it over: the former one
is fenced (dead, its ZooKeeper session ended, or it handed the partition over), so a commit it
left half-done is finished at once, not after MAX_SEGMENT_COMPLETION_TIME (Pinot waits that and
then the next validation run).

Beyond Pinot: two segments of one partition with one sequence number (a committer and a repair
that both made a next segment) are resolved by preferring the one in the IdealState.

`tables.domain.healing_apply.apply_repairs` applies the resolved repairs to an IdealState.

`plan_error_repairs` (in `tables.domain.error_repairs`, re-exported here) is Pinot's
`repairSegmentsInErrorState` for non-pauseless tables: an LLC
segment in both views with an ERROR replica in the ExternalView is reset (Helix-style, every replica
not OFFLINE goes to OFFLINE and follows the IdealState back) when its status is not IN_PROGRESS, or
when it is IN_PROGRESS with every replica in ERROR; an IN_PROGRESS segment with only some replicas
in ERROR is not touched; a COMMITTING one with every replica in ERROR needs re-ingestion.

`start_offset(zk_offset, earliest)` is Pinot's `selectStartOffset`: the ZK offset, or the stream's
earliest when that is later (data loss).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from tables.domain.error_repairs import ErrorRepair, ErrorRepairKind, plan_error_repairs
from tables.domain.idealstate import InstanceState
from tables.domain.names import LLCSegmentName

__all__ = [
    "DEFAULT_MAX_SEGMENT_COMPLETION_TIME_MS",
    "MAX_SEGMENT_COMPLETION_TIME_KEY",
    "ErrorRepair",
    "ErrorRepairKind",
    "Plan",
    "Repair",
    "RepairKind",
    "Resolved",
    "SegmentFacts",
    "Wait",
    "latest_by_partition",
    "max_completion_time_ms",
    "partition_segments",
    "plan_consuming_repairs",
    "plan_error_repairs",
    "start_offset",
]

# The guard (reference §6.5): cluster config key and Pinot's default.
MAX_SEGMENT_COMPLETION_TIME_KEY = "max.segment.completion.time.millis"
DEFAULT_MAX_SEGMENT_COMPLETION_TIME_MS = 300_000


def max_completion_time_ms(raw: str | None) -> int:
    """The guard from the cluster config's value: Pinot's default when absent, not a number, or
    not positive (Pinot ignores such values)."""
    try:
        value = int(raw) if raw else 0
    except ValueError:
        value = 0
    return value if value > 0 else DEFAULT_MAX_SEGMENT_COMPLETION_TIME_MS


DONE, IN_PROGRESS, COMMITTING = "DONE", "IN_PROGRESS", "COMMITTING"
CONSUMING, ONLINE, OFFLINE, ERROR = (
    InstanceState.CONSUMING,
    InstanceState.ONLINE,
    InstanceState.OFFLINE,
    InstanceState.ERROR,
)


class RepairKind(StrEnum):
    COMMIT_STOPPED_AFTER_STEP1 = "commitStoppedAfterStep1"
    PARTITION_ENDED = "partitionEnded"
    PARTIAL_OFFLINE = "partialOfflineReplicas"
    ALL_REPLICAS_OFFLINE = "allReplicasOffline"
    NO_CONSUMING_SEGMENT = "noConsumingSegment"
    COMMIT_STOPPED_AFTER_STEP2 = "commitStoppedAfterStep2"
    NEW_PARTITION = "newPartition"
    DUPLICATE_SEQUENCE = "duplicateSequence"


class OffsetFrom(StrEnum):
    END = "endOffset"
    START = "startOffset"
    EARLIEST = "earliest"


@dataclass(frozen=True)
class SegmentFacts:
    """One LLC segment's ZK metadata, as the healer needs it."""

    name: str
    status: str
    start_offset: str | None
    end_offset: str | None
    mtime_ms: int

    @property
    def llc(self) -> LLCSegmentName:
        parsed = LLCSegmentName.parse(self.name)
        if parsed is None:
            raise ValueError(f"{self.name} is not an LLC segment name")
        return parsed


@dataclass(frozen=True)
class Repair:
    """One partition's repair, before offsets and names are resolved.

    `new_from`: where a new CONSUMING segment starts (None: no new segment; EARLIEST: the stream's
    earliest offset, `offset` is then None). `to_online`: segments whose replicas all go ONLINE.
    `add_latest`: the latest segment itself is added CONSUMING (case 4). `to_consuming`: replicas
    of `segment` that go back from OFFLINE to CONSUMING (partial repair)."""

    kind: RepairKind
    partition: int
    segment: str | None
    reason: str
    new_from: OffsetFrom | None = None
    offset: str | None = None
    sequence: int = 0
    to_online: tuple[str, ...] = ()
    add_latest: bool = False
    to_consuming: tuple[str, ...] = ()
    data_loss: bool = False
    drop: tuple[str, ...] = ()  # stray ZK metadata to delete (duplicate sequence)


@dataclass(frozen=True)
class Wait:
    """A partition left alone until `until_ms` (the guard: a commit may still be in flight)."""

    partition: int
    segment: str
    kind: RepairKind
    until_ms: int
    reason: str


@dataclass
class Plan:
    repairs: list[Repair] = field(default_factory=list)
    waits: list[Wait] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def for_partition(self, partition: int) -> Repair | Wait | None:
        for item in (*self.repairs, *self.waits):
            if item.partition == partition:
                return item
        return None


@dataclass(frozen=True)
class Resolved:
    """A repair ready to write: the new segment's name and the instances it goes to."""

    repair: Repair
    new_segment: str | None = None
    instances: tuple[str, ...] = ()


def start_offset(zk_offset: int, earliest: int | None) -> tuple[int, bool]:
    """Pinot's selectStartOffset: (offset, data lost) — the stream's earliest when it is past the
    ZK offset."""
    if earliest is not None and earliest > zk_offset:
        return earliest, True
    return zk_offset, False


def _states(ideal: Mapping[str, Mapping[str, str]], segment: str) -> Mapping[str, str] | None:
    return ideal.get(segment)


def latest_by_partition(
    segments: Iterable[SegmentFacts], ideal: Mapping[str, Mapping[str, str]]
) -> tuple[dict[int, SegmentFacts], dict[int, list[SegmentFacts]]]:
    """Each partition's latest segment (highest sequence; on a tie the one in the IdealState, then
    the newest name), and the strays that share its sequence number without being in it."""
    by_key: dict[tuple[int, int], list[SegmentFacts]] = defaultdict(list)
    for facts in segments:
        parsed = LLCSegmentName.parse(facts.name)
        if parsed is not None:
            by_key[(parsed.partition_group_id, parsed.sequence_number)].append(facts)
    latest: dict[int, SegmentFacts] = {}
    strays: dict[int, list[SegmentFacts]] = {}
    for (partition, sequence), found in sorted(by_key.items()):
        current = latest.get(partition)
        if current is not None and current.llc.sequence_number > sequence:
            continue
        ranked = sorted(found, key=lambda f: (f.name in ideal, f.name), reverse=True)
        latest[partition] = ranked[0]
        strays[partition] = ranked[1:]
    return latest, strays


def plan_consuming_repairs(
    ideal: Mapping[str, Mapping[str, str]],
    segments: Iterable[SegmentFacts],
    *,
    stream_partitions: Collection[int] | None,
    now_ms: int,
    max_completion_ms: int,
    partial_offline_repair: bool = False,
    paused_partitions: Collection[int] = (),
    takeover_ms: int | None = None,
    pauseless: bool = False,
) -> Plan:
    """The repairs of `ensureAllPartitionsConsuming` (see the module docstring).

    `stream_partitions` None means the stream could not be asked: nothing is planned that depends
    on it (partition end, new partitions), and partitions are assumed to still exist.
    `takeover_ms` (ZooKeeper's clock) is when the table's current lead controller took the table
    over: a guarded write older than that was made by a lead controller that no longer leads the
    table, so no commit of it can still finish, and the case is repaired at once. `pauseless`: the
    table commits pauselessly, so commit step 1 leaves COMMITTING, not DONE (Pinot's
    `statusPostStep1`), and case 1 looks for that status."""
    guard = _Guard(max_completion_ms, takeover_ms)
    post_step1 = COMMITTING if pauseless else DONE
    plan = Plan()
    latest, strays = latest_by_partition(segments, ideal)
    for partition in sorted(latest):
        if partition in paused_partitions:
            continue
        facts = latest[partition]
        exists = stream_partitions is None or partition in stream_partitions
        if strays.get(partition):
            _plan_strays(plan, partition, facts, strays[partition], now_ms, guard)
        _plan_partition(
            plan, ideal, facts, exists, now_ms, guard, partial_offline_repair, post_step1
        )
    if stream_partitions is not None:
        for partition in sorted(set(stream_partitions) - set(latest) - set(paused_partitions)):
            plan.repairs.append(
                Repair(
                    RepairKind.NEW_PARTITION,
                    partition,
                    None,
                    f"stream partition {partition} has no segment yet: a first segment starts "
                    "at the stream's earliest offset",
                    new_from=OffsetFrom.EARLIEST,
                    sequence=0,
                )
            )
    return plan


@dataclass(frozen=True)
class _Guard:
    """When a guarded case may be repaired (`until`: past it, repair)."""

    max_completion_ms: int
    takeover_ms: int | None = None

    def until(self, facts: SegmentFacts) -> int:
        if self.takeover_ms is not None and facts.mtime_ms < self.takeover_ms:
            return facts.mtime_ms - 1  # left by a former lead controller: nothing to wait for
        return facts.mtime_ms + self.max_completion_ms


def _plan_strays(
    plan: Plan,
    partition: int,
    latest: SegmentFacts,
    strays: Sequence[SegmentFacts],
    now_ms: int,
    guard: _Guard,
) -> None:
    old = [s.name for s in strays if now_ms > guard.until(s)]
    if old:
        plan.repairs.append(
            Repair(
                RepairKind.DUPLICATE_SEQUENCE,
                partition,
                latest.name,
                f"{', '.join(old)} share sequence {latest.llc.sequence_number} with "
                f"{latest.name} but are in no IdealState: left by a commit that lost a race",
                drop=tuple(old),
            )
        )


def _plan_partition(
    plan: Plan,
    ideal: Mapping[str, Mapping[str, str]],
    facts: SegmentFacts,
    exists: bool,
    now_ms: int,
    guard: _Guard,
    partial_offline_repair: bool,
    post_step1: str = DONE,
) -> None:
    states = _states(ideal, facts.name)
    if states is None:
        _plan_missing_from_idealstate(plan, ideal, facts, now_ms, guard)
    elif CONSUMING in states.values():
        _plan_consuming(
            plan, facts, states, exists, now_ms, guard, partial_offline_repair, post_step1
        )
    else:
        _plan_no_consuming(plan, facts, states, exists)


def _plan_consuming(
    plan: Plan,
    facts: SegmentFacts,
    states: Mapping[str, str],
    exists: bool,
    now_ms: int,
    guard: _Guard,
    partial_offline_repair: bool,
    post_step1: str = DONE,
) -> None:
    name = facts.llc
    partition = name.partition_group_id
    if facts.status == post_step1:
        until = guard.until(facts)
        kind = RepairKind.COMMIT_STOPPED_AFTER_STEP1 if exists else RepairKind.PARTITION_ENDED
        if now_ms <= until:
            plan.waits.append(
                Wait(
                    partition,
                    facts.name,
                    kind,
                    until,
                    f"{facts.name} is {post_step1} but still CONSUMING in the IdealState: a "
                    "commit may still be finishing its last step",
                )
            )
            return
        if not exists:
            plan.repairs.append(
                Repair(
                    kind,
                    partition,
                    facts.name,
                    f"{facts.name} is {post_step1} but still CONSUMING and the stream no longer "
                    f"has partition {partition}: its replicas go ONLINE, no new segment",
                    to_online=(facts.name,),
                )
            )
            return
        plan.repairs.append(
            Repair(
                kind,
                partition,
                facts.name,
                f"{facts.name} is {post_step1} but still CONSUMING in the IdealState: the "
                "controller stopped after commit step 1; its replicas go ONLINE and a new segment "
                f"starts at its end offset {facts.end_offset}",
                new_from=OffsetFrom.END,
                offset=facts.end_offset,
                sequence=name.sequence_number + 1,
                to_online=(facts.name,),
            )
        )
        return
    if facts.status == IN_PROGRESS and partial_offline_repair:
        offline = tuple(sorted(i for i, s in states.items() if s == OFFLINE))
        if offline:
            plan.repairs.append(
                Repair(
                    RepairKind.PARTIAL_OFFLINE,
                    partition,
                    facts.name,
                    f"{', '.join(offline)} stopped consuming {facts.name} while other replicas "
                    "go on: back to CONSUMING",
                    to_consuming=offline,
                )
            )


def _plan_no_consuming(
    plan: Plan, facts: SegmentFacts, states: Mapping[str, str], exists: bool
) -> None:
    name = facts.llc
    partition = name.partition_group_id
    values = list(states.values())
    all_offline = bool(values) and all(s == OFFLINE for s in values)
    all_online_done = (
        bool(values) and all(s == ONLINE for s in values) and facts.status != IN_PROGRESS
    )
    if not all_offline and not all_online_done:
        plan.problems.append(
            f"partition {partition}: {facts.name} ({facts.status}) has replicas "
            f"{dict(sorted(states.items()))} and none CONSUMING: unexpected, not repaired"
        )
        return
    if not exists:
        return  # the partition reached its end of life
    if all_offline:
        plan.repairs.append(
            Repair(
                RepairKind.ALL_REPLICAS_OFFLINE,
                partition,
                facts.name,
                f"every replica of {facts.name} is OFFLINE (the servers stopped consuming it): "
                f"a new segment consumes again from its start offset {facts.start_offset}",
                new_from=OffsetFrom.START,
                offset=facts.start_offset,
                sequence=name.sequence_number + 1,
            )
        )
        return
    plan.repairs.append(
        Repair(
            RepairKind.NO_CONSUMING_SEGMENT,
            partition,
            facts.name,
            f"partition {partition} has no CONSUMING segment after {facts.name} ({facts.status}, "
            f"ONLINE): a new segment starts at its end offset {facts.end_offset}",
            new_from=OffsetFrom.END,
            offset=facts.end_offset,
            sequence=name.sequence_number + 1,
        )
    )


def _plan_missing_from_idealstate(
    plan: Plan,
    ideal: Mapping[str, Mapping[str, str]],
    facts: SegmentFacts,
    now_ms: int,
    guard: _Guard,
) -> None:
    partition = facts.llc.partition_group_id
    until = guard.until(facts)
    kind = RepairKind.COMMIT_STOPPED_AFTER_STEP2
    if now_ms <= until:
        plan.waits.append(
            Wait(
                partition,
                facts.name,
                kind,
                until,
                f"{facts.name} has metadata but is not in the IdealState yet: a commit may "
                "still be finishing its last step",
            )
        )
        return
    if facts.status != IN_PROGRESS:
        plan.problems.append(
            f"partition {partition}: {facts.name} is {facts.status} but not in the IdealState: "
            "unexpected, not repaired"
        )
        return
    consuming = [
        segment
        for segment in partition_segments(ideal, partition)
        if CONSUMING in ideal[segment].values()
    ]
    if consuming:
        reason = (
            f"{facts.name} was created but never added to the IdealState: the controller "
            f"stopped after commit step 2; {consuming[0]} goes ONLINE and {facts.name} CONSUMING"
        )
    else:
        reason = (
            f"{facts.name} was created but never added to the IdealState, and no segment of "
            f"partition {partition} is CONSUMING (potential data loss): it is added CONSUMING"
        )
    plan.repairs.append(
        Repair(
            kind,
            partition,
            facts.name,
            reason,
            to_online=tuple(consuming[:1]),
            add_latest=True,
            data_loss=not consuming,
        )
    )


def partition_segments(ideal: Mapping[str, Mapping[str, str]], partition: int) -> list[str]:
    found = []
    for segment in ideal:
        parsed = LLCSegmentName.parse(segment)
        if parsed is not None and parsed.partition_group_id == partition:
            found.append((parsed.sequence_number, segment))
    return [segment for _, segment in sorted(found)]
