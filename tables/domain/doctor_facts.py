"""The ingestion doctor's inputs and outputs, and the healer's outlook over them (pure).

Part of `tables.domain.doctor` (read its docstring): `SegmentView`, `ReplicaReport` and
`PartitionView` are what the database mirror knows of a partition; `HealerTiming` the clock and
the healer's settings; `Evidence` and `Diagnosis` what the doctor answers. `outlook(...)` runs the
healer's own decisions (`tables.domain.healing.plan_consuming_repairs` and `plan_error_repairs`)
over mirrored segments; `Outlook.due()` lists the repairs a run would make now.
`clock(ms, now_ms)` writes a time as the doctor does (UTC); `when_due` / `when_waiting` say when
the healer acts; `repair_text` / `wait_text` say in a few words what a repair (or one held back by
its guard) changes; `custom_map` reads a segment's custom.map as the mirror keeps it.

Segments without a deep-store copy (pauseless consumption, round 2 §B.4, §B.5, §A.6, §C.4):
`missing_download_url(status, url)` is the console's `segmentsMissingDownloadUrl` rule (COMMITTING,
or DONE with an empty `segment.download.url`: a peer-download commit); `committing_repair_allowed`
is Pinot's `allowRepairOfCommittingSegments` (the table's `disasterRecoveryMode` is ALWAYS, or it
is neither partial upsert nor dedup); `deep_store_step(segment, ...)` says what the healer does
next about such a segment and when, in the healer's order: every replica ERROR and COMMITTING ->
re-ingestion from the stream (no guard), or nothing at all when the DR mode forbids it
(unrecoverable); a pauseless table's segment within `max.segment.completion.time.millis` of its
metadata write -> wait for the commit to end; past it, COMMITTING with a CONSUMING replica in the
IdealState (the controller stopped after commit start) -> the consuming repair; an ONLINE
replica -> that server uploads its copy (`uploadCommittedSegment`); ERROR replicas -> reset; else
no server can give it (the upload waits). The mirror sync requests healer runs for consuming
repairs and ERROR resets (`tables.mirror.diagnose.due_repairs`), not for uploads: an upload is
due on the next scheduled run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
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
from tables.domain.stream_config import DisasterRecoveryMode, disaster_recovery_mode
from tables.domain.triage import format_duration

__all__ = [
    "ACTION_LABELS",
    "DEFAULT_MAX_COMPLETION_MS",
    "Action",
    "DeepStoreStep",
    "Diagnosis",
    "Evidence",
    "HealerTiming",
    "Outlook",
    "PartitionView",
    "ReplicaReport",
    "SegmentView",
    "Source",
    "StoreStep",
    "clock",
    "committing_repair_allowed",
    "custom_map",
    "deep_store_step",
    "missing_download_url",
    "outlook",
    "repair_text",
    "wait_text",
    "when_due",
    "when_waiting",
]

DEFAULT_MAX_COMPLETION_MS = DEFAULT_MAX_SEGMENT_COMPLETION_TIME_MS  # the guard's default
ERROR, ONLINE, CONSUMING = "ERROR", "ONLINE", "CONSUMING"
COMMITTING, DONE = "COMMITTING", "DONE"


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
    pauseless: bool = False  # the table commits pauselessly


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


def when_due(timing: HealerTiming) -> str:
    """When the healer makes a repair that is due now."""
    if timing.mirror_triggers:
        return "on its next run, within seconds (the mirror sync requests one when it sees this)"
    if timing.next_run_ms is not None:
        return f"on its next scheduled run at {clock(timing.next_run_ms, timing.now_ms)}"
    return "on its next run"


def when_waiting(timing: HealerTiming, until_ms: int) -> str:
    """When the healer makes a repair its guard holds back until `until_ms`."""
    text = f"at {clock(until_ms, timing.now_ms)} (guard: max.segment.completion.time.millis "
    text += f"{format_duration(timing.max_completion_ms)} after the metadata was written)"
    next_run = timing.next_run_ms
    if not timing.mirror_triggers and next_run is not None and next_run > until_ms:
        text += f", on its scheduled run at {clock(next_run, timing.now_ms)}"
    return text


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
    pauseless: bool = False,
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
        pauseless=pauseless,
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


# --- segments without a deep-store copy (pauseless) -------------------------------------------


def missing_download_url(status: str, download_url: str | None) -> bool:
    """The console's `segmentsMissingDownloadUrl` rule: a COMMITTING segment (pauseless, between
    commit start and commit end), or a DONE one whose download URL is empty (a peer-download
    commit waiting for the deep-store upload repair)."""
    return status == COMMITTING or (status == DONE and not download_url)


def committing_repair_allowed(config: Mapping[str, object]) -> bool:
    """Pinot's `allowRepairOfCommittingSegments` for a table config in REST form: its
    `streamIngestionConfig.disasterRecoveryMode` is ALWAYS, or it is neither a partial-upsert
    (`upsertConfig.mode` PARTIAL) nor a dedup (`dedupConfig.dedupEnabled`) table."""
    ingestion = config.get("ingestionConfig")
    always = DisasterRecoveryMode.ALWAYS
    if isinstance(ingestion, Mapping) and disaster_recovery_mode(ingestion) is always:
        return True
    upsert = config.get("upsertConfig")
    partial = isinstance(upsert, Mapping) and str(upsert.get("mode") or "").upper() == "PARTIAL"
    dedup = config.get("dedupConfig")
    deduped = isinstance(dedup, Mapping) and dedup.get("dedupEnabled") in (True, "true")
    return not (partial or deduped)


class StoreStep(StrEnum):
    """What the healer does next about a segment missing its download URL."""

    WAIT_COMMIT = "waitCommit"  # within the guard: the commit may still end by itself
    CONSUMING_REPAIR = "commitStoppedAfterCommitStart"  # CONSUMING in the IdealState, past it
    UPLOAD = "uploadCommittedSegment"  # a server with the segment ONLINE uploads its copy
    REINGEST = "reingest"  # every replica ERROR: rebuilt from the stream
    UNRECOVERABLE = "unrecoverable"  # every replica ERROR, and the DR mode forbids a repair
    RESET = "errorReset"  # some replicas ERROR: reset, they download it again
    NO_SOURCE = "noServerHasIt"  # no replica ONLINE to upload from
    NOT_AUTOMATIC = "notAutomatic"  # the healer may not repair ERROR segments (autoReset off)


@dataclass(frozen=True)
class DeepStoreStep:
    """`step` in words (`text`), and when: `due_ms` (None: nothing automatic) and `when`."""

    step: StoreStep
    text: str
    due_ms: int | None = None
    when: str = ""

    @property
    def automatic(self) -> bool:
        return self.due_ms is not None


def _servers(states: Mapping[str, str], wanted: str) -> list[str]:
    return sorted(server for server, state in states.items() if state == wanted)


def _error_step(
    segment: SegmentView, pauseless: bool, repair_allowed: bool, timing: HealerTiming
) -> DeepStoreStep:
    """A COMMITTING segment with every replica in ERROR (no server has it: §A.6 case a)."""
    if not repair_allowed:
        mode = "DEFAULT mode" if pauseless else "this table"
        return DeepStoreStep(
            StoreStep.UNRECOVERABLE,
            f"unrecoverable in {mode}: a partial-upsert or dedup table's COMMITTING segment is "
            "not repaired automatically (disasterRecoveryMode DEFAULT); set it to ALWAYS to "
            "re-ingest, or delete the partition's segments from this one on",
        )
    if not timing.error_auto_reset:
        return DeepStoreStep(
            StoreStep.NOT_AUTOMATIC,
            "re-ingestion from the stream, but the healer repairs no ERROR segment while "
            "controller.segment.error.autoReset is off: re-ingest it by hand",
        )
    offsets = f"[{segment.start_offset or '?'}, {segment.end_offset or '?'})"
    return DeepStoreStep(
        StoreStep.REINGEST,
        f"re-ingest offsets {offsets} from the stream on one of its servers "
        "(POST /reingestSegment), then reset the replicas: they download the rebuilt segment",
        timing.now_ms,
        when_due(timing),
    )


def deep_store_step(
    segment: SegmentView, *, pauseless: bool, repair_allowed: bool, timing: HealerTiming
) -> DeepStoreStep:
    """What the healer does next about `segment` (COMMITTING, or DONE without a download URL)
    and when; see the module docstring for the order. `repair_allowed`:
    `committing_repair_allowed` of the table's config."""
    ev = segment.external
    if segment.status == COMMITTING and ev and all(s == ERROR for s in ev.values()):
        return _error_step(segment, pauseless, repair_allowed, timing)
    stopped = segment.status == COMMITTING and CONSUMING in segment.ideal.values()
    # The mirror requests healer runs for consuming repairs and ERROR resets, not for uploads:
    # those wait for the scheduled run.
    scheduled = timing if stopped else replace(timing, mirror_triggers=False)
    guard_end = (segment.mtime_ms or 0) + timing.max_completion_ms
    if pauseless and timing.now_ms < guard_end:
        return DeepStoreStep(
            StoreStep.WAIT_COMMIT,
            f"waits until {clock(guard_end, timing.now_ms)}: the commit may still end by itself "
            "(the committer builds and uploads it, then commit end fills the download URL)",
            guard_end,
            when_waiting(scheduled, guard_end),
        )
    due, when = timing.now_ms, when_due(timing)
    if stopped:
        return DeepStoreStep(
            StoreStep.CONSUMING_REPAIR,
            "the controller stopped after commit start: it goes ONLINE and a new segment starts "
            f"at its end offset {segment.end_offset or '?'}",
            due,
            when,
        )
    if segment.status == COMMITTING and not pauseless:
        return DeepStoreStep(
            StoreStep.NO_SOURCE,
            "COMMITTING in a table without pauseless consumption: the healer repairs it only "
            "once every replica is ERROR (re-ingestion)",
        )
    online = _servers(ev, ONLINE)
    if online:
        return DeepStoreStep(
            StoreStep.UPLOAD,
            f"ask {' or '.join(online)} (picked at random) to upload its copy "
            "(POST /segments/<table>/<segment>/uploadCommittedSegment), then fill the download URL",
            due,
            when_due(scheduled),
        )
    errors = _servers(ev, ERROR)
    if errors and timing.error_auto_reset:
        return DeepStoreStep(
            StoreStep.RESET,
            f"reset {', '.join(errors)} (to OFFLINE, then back to the IdealState: they fetch "
            "it again); the upload waits for an ONLINE replica",
            due,
            when,
        )
    return DeepStoreStep(
        StoreStep.NO_SOURCE,
        "waits: no replica is ONLINE to upload its copy from (the upload repair retries on "
        "every run)",
    )
