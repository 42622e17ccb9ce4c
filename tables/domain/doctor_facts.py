"""The ingestion doctor's inputs and outputs, and the healer's outlook over them (pure).

Part of `tables.domain.doctor` (read its docstring): `SegmentView`, `ReplicaReport` and
`PartitionView` are what the database mirror knows of a partition; `HealerTiming` the clock and
the healer's settings; `Evidence` and `Diagnosis` what the doctor answers. `outlook(...)` runs the
healer's own decisions (`tables.domain.healing.plan_consuming_repairs` and `plan_error_repairs`)
over mirrored segments; `Outlook.due()` lists the repairs a run would make now.
`clock(ms, now_ms)` writes a time as the doctor does (UTC); `repair_text` / `wait_text` say in a
few words what a repair (or one held back by its guard) changes; `custom_map` reads a segment's
custom.map as the mirror keeps it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from tables.domain.healing import (
    DEFAULT_MAX_SEGMENT_COMPLETION_TIME_MS,
    ErrorRepair,
    Plan,
    Repair,
    RepairKind,
    SegmentFacts,
    Wait,
    plan_consuming_repairs,
    plan_error_repairs,
)
from tables.domain.names import LLCSegmentName

__all__ = [
    "ACTION_LABELS",
    "DEFAULT_MAX_COMPLETION_MS",
    "Action",
    "Diagnosis",
    "Evidence",
    "HealerTiming",
    "Outlook",
    "PartitionView",
    "ReplicaReport",
    "SegmentView",
    "Source",
    "clock",
    "custom_map",
    "outlook",
    "repair_text",
    "wait_text",
]

DEFAULT_MAX_COMPLETION_MS = DEFAULT_MAX_SEGMENT_COMPLETION_TIME_MS  # the guard's default
ERROR = "ERROR"


class Source(StrEnum):
    METADATA = "ZooKeeper metadata"
    IDEALSTATE = "IdealState"
    EXTERNALVIEW = "ExternalView"
    SERVER = "server report"
    STREAM = "stream"
    HEALER = "healer"


class Action(StrEnum):
    """What an operator can do about a diagnosis."""

    RUN_HEALER = "run-healer"
    RESET_SEGMENT = "reset-segment"
    RESUME = "resume"
    CHECK_STREAM = "check-stream"
    CHECK_SERVERS = "check-servers"


ACTION_LABELS = {
    Action.RUN_HEALER: "Run healer now",
    Action.RESET_SEGMENT: "Reset segment",
    Action.RESUME: "Resume consumption",
    Action.CHECK_STREAM: "Check the stream",
    Action.CHECK_SERVERS: "Check the servers",
}


@dataclass(frozen=True)
class SegmentView:
    """One LLC segment as the mirror has it. `status` "" means no ZK metadata is mirrored; empty
    `ideal` means the segment is not in the IdealState (a metadata znode newer than it)."""

    name: str
    status: str = ""
    start_offset: str = ""
    end_offset: str = ""
    mtime_ms: int | None = None
    ideal: Mapping[str, str] = field(default_factory=dict)
    external: Mapping[str, str] = field(default_factory=dict)
    custom: Mapping[str, str] = field(default_factory=dict)  # the metadata's custom.map

    @property
    def llc(self) -> LLCSegmentName | None:
        return LLCSegmentName.parse(self.name)

    @property
    def partition(self) -> int | None:
        parsed = self.llc
        return None if parsed is None else parsed.partition_group_id

    @property
    def sequence(self) -> int:
        parsed = self.llc
        return -1 if parsed is None else parsed.sequence_number

    def facts(self) -> SegmentFacts:
        return SegmentFacts(
            self.name,
            self.status,
            self.start_offset or None,
            self.end_offset or None,
            self.mtime_ms or 0,
        )


@dataclass(frozen=True)
class ReplicaReport:
    """What one server last published about the partition (`tables.live_state`)."""

    server: str
    phase: str = ""
    consumer_state: str = ""
    current_offset: int | None = None
    upstream_offset: int | None = None
    lost_offsets: int = 0
    stopped_reason: str = ""
    updated_ms: int | None = None


@dataclass(frozen=True)
class PartitionView:
    """Everything the mirror knows of one stream partition."""

    table: str
    partition: int
    segments: Sequence[SegmentView] = ()  # at least its latest, CONSUMING and ERROR segments
    replicas: Mapping[str, str] = field(default_factory=dict)  # IS replica -> EV state
    reports: Sequence[ReplicaReport] = ()
    verdict: str = ""  # the mirror's triage verdict and its detail
    verdict_detail: str = ""
    table_paused: bool = False
    partition_paused: bool = False
    pause_text: str = ""
    stream_partitions: int | None = None  # None: unknown
    stream_error: str = ""
    live_servers: frozenset[str] | None = None  # servers live in ZooKeeper (None: unknown)


@dataclass(frozen=True)
class HealerTiming:
    """The clock and the healer's settings, as the doctor needs them."""

    now_ms: int
    max_completion_ms: int = DEFAULT_MAX_COMPLETION_MS
    error_auto_reset: bool = True
    partial_offline_repair: bool = False
    mirror_triggers: bool = True  # the mirror sync requests a run when it sees a repair due
    last_run_ms: int | None = None
    next_run_ms: int | None = None  # the next scheduled run, when known


@dataclass(frozen=True)
class Evidence:
    source: Source
    text: str
    at_ms: int | None = None
    at_text: str = ""


@dataclass(frozen=True)
class Diagnosis:
    partition: int
    healthy: bool
    headline: str
    evidence: tuple[Evidence, ...] = ()
    fix: str = ""
    due_ms: int | None = None
    actions: tuple[Action, ...] = ()
    segment: str = ""  # the segment an action (Reset) is about
    kind: str = ""  # a RepairKind / ErrorRepairKind value, or the doctor's own word
    next_step: str = ""  # the fix in a few words (the triage page's short form)

    @property
    def action_labels(self) -> list[tuple[str, str]]:
        return [(str(a), ACTION_LABELS[a]) for a in self.actions]

    @property
    def can_run_healer(self) -> bool:
        return Action.RUN_HEALER in self.actions


def clock(ms: int, now_ms: int) -> str:
    """`12:03:10 UTC` on the day of `now_ms`, else `2024-05-01 12:03:10 UTC`."""
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    today = datetime.fromtimestamp(now_ms / 1000, UTC).date()
    shape = "%H:%M:%S UTC" if moment.date() == today else "%Y-%m-%d %H:%M:%S UTC"
    return moment.strftime(shape)


# --- what the healer would do -----------------------------------------------------------------


@dataclass
class Outlook:
    """The healer's decisions over the mirror's facts of a table (or of one partition)."""

    plan: Plan
    errors: list[ErrorRepair]
    paused: bool
    error_auto_reset: bool = True

    def consuming_item(self, partition: int) -> Repair | Wait | None:
        return self.plan.for_partition(partition)

    def problems(self, partition: int) -> list[str]:
        return [p for p in self.plan.problems if p.startswith(f"partition {partition}:")]

    def error_repairs(self, partition: int) -> list[ErrorRepair]:
        return [e for e in self.errors if _partition_of(e.segment) == partition]

    def due(self) -> list[str]:
        """The reasons of the repairs a run would make now (none of a paused table's consuming
        repairs, none of the ERROR resets when automatic reset is off)."""
        reasons = [] if self.paused else [r.reason for r in self.plan.repairs]
        if self.error_auto_reset:
            reasons += [e.reason for e in self.errors]
        return reasons


def _partition_of(segment: str) -> int | None:
    parsed = LLCSegmentName.parse(segment)
    return None if parsed is None else parsed.partition_group_id


def outlook(
    segments: Iterable[SegmentView],
    *,
    now_ms: int,
    max_completion_ms: int = DEFAULT_MAX_COMPLETION_MS,
    stream_partitions: int | Iterable[int] | None = None,
    paused: bool = False,
    paused_partitions: Iterable[int] = (),
    error_auto_reset: bool = True,
    partial_offline_repair: bool = False,
    errors_only: Iterable[SegmentView] = (),
) -> Outlook:
    """`plan_consuming_repairs` and `plan_error_repairs` over mirrored segments. `segments` must
    hold each partition's latest segment (highest sequence with metadata), its segments with a
    CONSUMING replica and its segments with an ERROR replica; older ones change nothing.
    `stream_partitions`: a count, the partition numbers, or None when unknown. `errors_only`:
    segments with an ERROR replica of partitions left out of `segments` (a caller that knows
    them to consume normally), for the ERROR repairs alone."""
    rows = list(segments)
    extra = list(errors_only)
    ideal = {s.name: dict(s.ideal) for s in rows if s.ideal}
    facts = [s.facts() for s in rows if s.status and s.llc is not None]
    if isinstance(stream_partitions, int):
        stream: set[int] | None = set(range(stream_partitions))
    else:
        stream = None if stream_partitions is None else set(stream_partitions)
    plan = plan_consuming_repairs(
        ideal,
        facts,
        stream_partitions=stream,
        now_ms=now_ms,
        max_completion_ms=max_completion_ms,
        partial_offline_repair=partial_offline_repair,
        paused_partitions=set(paused_partitions),
    )
    failing = [s for s in (*rows, *extra) if ERROR in s.external.values()]
    errors, _all_error = plan_error_repairs(
        {s.name: dict(s.ideal) for s in failing if s.ideal},
        {s.name: dict(s.external) for s in failing},
        {s.name: s.status for s in failing if s.status},
    )
    return Outlook(plan, errors, paused, error_auto_reset)


def custom_map(raw: str | Mapping[str, str] | None) -> dict[str, str]:
    """A segment's custom.map as the mirror keeps it (compact JSON text) -> a dict."""
    if isinstance(raw, Mapping):
        return {str(k): str(v) for k, v in raw.items()}
    if not raw:
        return {}
    try:
        found = json.loads(raw)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def wait_text(wait: Wait, segment: SegmentView | None) -> str:
    """What the repair a guard holds back will change."""
    if wait.kind is RepairKind.COMMIT_STOPPED_AFTER_STEP1:
        end = segment.end_offset if segment else "?"
        return f"{wait.segment} goes ONLINE and a new segment starts at its end offset {end}"
    if wait.kind is RepairKind.COMMIT_STOPPED_AFTER_STEP2:
        return f"{wait.segment} is added CONSUMING and the segment consuming before it goes ONLINE"
    return f"{wait.segment} goes ONLINE, with no new segment"


def repair_text(repair: Repair) -> str:
    """What a repair changes, in a few words."""
    name, kind = repair.segment, repair.kind
    if kind is RepairKind.COMMIT_STOPPED_AFTER_STEP1:
        return f"{name} goes ONLINE and a new segment starts at its end offset {repair.offset}"
    if kind is RepairKind.PARTITION_ENDED:
        return f"{name} goes ONLINE, with no new segment"
    if kind is RepairKind.COMMIT_STOPPED_AFTER_STEP2:
        if repair.to_online:
            return f"{repair.to_online[0]} goes ONLINE and {name} is added CONSUMING"
        return f"{name} is added CONSUMING (no segment of the partition consumes: data may be lost)"
    if kind is RepairKind.ALL_REPLICAS_OFFLINE:
        return (
            f"a new segment consumes again from {name}'s start offset {repair.offset} (from the "
            "stream's earliest offset if the stream dropped it)"
        )
    if kind is RepairKind.NO_CONSUMING_SEGMENT:
        return f"a new segment starts at {name}'s end offset {repair.offset}"
    if kind is RepairKind.NEW_PARTITION:
        return "a first segment starts at the stream's earliest offset"
    if kind is RepairKind.PARTIAL_OFFLINE:
        return f"{', '.join(repair.to_consuming)} go back to CONSUMING"
    return repair.reason
