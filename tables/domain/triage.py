"""Triage of a realtime table: one verdict per stream partition, one health per table (pure).

Contract:
- `triage_partition(facts, now_ms, thresholds)` judges one stream partition from what the mirror
  knows about it (`PartitionFacts`: the consuming segment of the IdealState, its replicas'
  ExternalView states, what the replicas last published as live state, the pause state and when
  the partition's offset last moved) and returns a `PartitionVerdict`: a `Verdict`, a one-line
  detail for an operator, a `Health` and the partition's figures (worst replica's lags, most
  advanced offsets, rate, seconds stalled, lost offsets).
- The first matching rule wins (precedence, most explanatory first):
    1. PAUSED                    the table is paused, or the partition is in pausedPartitions
    2. MISSING_CONSUMING_SEGMENT no segment of the partition is CONSUMING in the IdealState     BAD
    3. CONSUMER_ERROR            a replica is ERROR in the ExternalView, or a live replica reports
                                 consumerState NOT_CONSUMING outside a commit (phase ERROR, ...) BAD
    4. OFFSET_UNAVAILABLE        a replica reports lostOffsets > 0 (the stream dropped them)    BAD
       COMMITTING (pauseless)    the partition's newest committed segment is COMMITTING in
                                 ZooKeeper (`committing_segment`: a pauseless commit between commit
                                 start and commit end; the next segment consumes meanwhile)    GOOD
       COMMIT_OVERDUE            ... and its metadata was written more than `commit_limit_ms` ago
                                 (WARNING; BAD past twice that, or with every replica in ERROR:
                                 no server has it, it needs re-ingestion)
    5. STARTING                  no replica published live state yet, and the consuming segment
                                 was created less than report_grace_s ago (servers are still
                                 picking it up: a commit just made it)                    UPDATING
       NOT_REPORTING             no replica published live state for the consuming segment  WARNING
    6. COMMITTING                a replica is HOLDING, CATCHING_UP, COMMITTING (or just done)   GOOD
       COMMIT_OVERDUE            ... and the completion began more than `commit_limit_ms` ago
                                 (Pinot's MAX_SEGMENT_COMPLETION_TIME)                    WARNING
                                 or more than twice that (the healer has not repaired it)     BAD
    7. STALLED                   records lag > 0 and no offset progress for >= stalled_after_s  BAD
    8. UNDER_REPLICATED          fewer replicas of the consuming segment are CONSUMING/ONLINE in
                                 the ExternalView than the table's replication (a segment
                                 younger than report_grace_s is still being picked up)    WARNING
    9. LAGGING                   records lag or availability lag above its threshold        WARNING
   10. NO_UPSTREAM_DATA          lag 0 and no new row for >= idle_after_s                      GOOD
   11. CONSUMING                 everything else                                               GOOD
- A pauseless commit is judged from ZooKeeper, not from the replicas' phases: while the newest
  committed segment is COMMITTING, the next one's replicas may be starting, idle or catching up
  and its servers may say NOT_CONSUMING about the committing one: neither is a stall or a
  consumer error (an ERROR replica in the ExternalView still is).
- Durations of a commit are counted from the since-times the servers publish (`phaseSinceMs`,
  `completingSinceMs`: they change only when the phase does), never from the last offset move,
  so "CATCHING_UP for N s" grows while the phase lasts. `commit_detail` writes that text; the
  pages call it again at render time, so the duration grows between two page loads.
- `lag_known`: a partition's lag is known only when a replica that reports also knows its
  upstream offset; otherwise pages say unknown, the API null, and /metrics leaves it out.
- Table-level checks over flush times (never committed, ingestion down) are in
  `tables.domain.table_checks`; `table_health` takes the first one's reason.
- `Health` values and their order are `tables.models.Health` (GOOD < PAUSED < UPDATING < WARNING
  < BAD); `worst` picks the highest.
- Segment helpers: `segment_display_state` (one word from the IdealState and ExternalView
  entries), `is_all_offline`, `percent_available` (Pinot's `percentSegmentsAvailable`: segments
  with no ONLINE/CONSUMING replica in the ExternalView count as unavailable; segments OFFLINE on
  every replica of the IdealState, and new segments the ExternalView does not list yet, are left
  out, as SegmentStatusChecker does).
- `table_health` rolls a table up: BAD for ERROR/all-OFFLINE segments or availability under 100 %,
  otherwise the worst partition, UPDATING while the IdealState and ExternalView differ, PAUSED for
  a paused table, WARNING for a table that never commits; with the reason of the worst finding.
- `progressed_at` says when a partition last moved: now when its offset or consuming segment
  changed (or it was never seen), else the previous time.
Nothing here reads the clock: `now_ms` is an argument (epoch milliseconds).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

__all__ = [
    "COMMIT_PHASES",
    "DEFAULT_COMMIT_LIMIT_MS",
    "HEALTH_RANK",
    "Health",
    "PartitionFacts",
    "PartitionVerdict",
    "PauseInfo",
    "ReplicaLive",
    "Thresholds",
    "Verdict",
    "commit_detail",
    "commit_started_ms",
    "format_duration",
    "is_all_offline",
    "lag_known",
    "percent_available",
    "progressed_at",
    "replicas_up",
    "segment_display_state",
    "table_health",
    "triage_partition",
    "worst",
]


class Health(StrEnum):
    """A table's (or partition's) overall verdict, worst last (`tables.models.Health` is this
    enum as Django choices)."""

    GOOD = "GOOD"
    PAUSED = "PAUSED"
    UPDATING = "UPDATING"  # IdealState and ExternalView not yet converged
    WARNING = "WARNING"  # consuming but lagging, or stalled
    BAD = "BAD"  # ERROR replicas, missing CONSUMING segment, consumer error, unavailable


HEALTH_RANK: dict[str, int] = {h.value: i for i, h in enumerate(Health)}


class Verdict(StrEnum):
    CONSUMING = "CONSUMING"
    LAGGING = "LAGGING"
    STALLED = "STALLED"
    PAUSED = "PAUSED"
    NO_UPSTREAM_DATA = "NO_UPSTREAM_DATA"
    CONSUMER_ERROR = "CONSUMER_ERROR"
    MISSING_CONSUMING_SEGMENT = "MISSING_CONSUMING_SEGMENT"
    OFFSET_UNAVAILABLE = "OFFSET_UNAVAILABLE"
    NOT_REPORTING = "NOT_REPORTING"
    COMMITTING = "COMMITTING"
    COMMIT_OVERDUE = "COMMIT_OVERDUE"
    STARTING = "STARTING"
    UNDER_REPLICATED = "UNDER_REPLICATED"


VERDICT_HEALTH: dict[Verdict, Health] = {
    Verdict.CONSUMING: Health.GOOD,
    Verdict.LAGGING: Health.WARNING,
    Verdict.STALLED: Health.BAD,
    Verdict.PAUSED: Health.PAUSED,
    Verdict.NO_UPSTREAM_DATA: Health.GOOD,
    Verdict.CONSUMER_ERROR: Health.BAD,
    Verdict.MISSING_CONSUMING_SEGMENT: Health.BAD,
    Verdict.OFFSET_UNAVAILABLE: Health.BAD,
    Verdict.NOT_REPORTING: Health.WARNING,
    Verdict.STARTING: Health.UPDATING,
    Verdict.COMMITTING: Health.GOOD,
    Verdict.COMMIT_OVERDUE: Health.WARNING,  # BAD past twice the limit
    Verdict.UNDER_REPLICATED: Health.WARNING,
}

# Server phases (tables.server.consumer.Phase) of a segment being completed: offsets stand still
# and the consumer may say NOT_CONSUMING without anything being wrong.
COMMIT_PHASES = frozenset(
    {"HOLDING", "CATCHING_UP", "COMMITTING", "COMMITTED", "KEPT", "DISCARDED"}
)
CONSUMING_STATE = "CONSUMING"
NOT_CONSUMING = "NOT_CONSUMING"
ERROR = "ERROR"
OFFLINE = "OFFLINE"
QUERYABLE = frozenset({"ONLINE", "CONSUMING"})
# Pinot's controller.statuschecker.waitForPushTimeSeconds default (10 min).
NEW_SEGMENT_GRACE_MS = 600_000
# Pinot's MAX_SEGMENT_COMPLETION_TIME default (tables.controller.llc reads the cluster's own value
# from the cluster config, `max.segment.completion.time.millis`; the sync passes it in).
DEFAULT_COMMIT_LIMIT_MS = 300_000


@dataclass(frozen=True)
class Thresholds:
    stalled_after_s: float = 60.0
    lagging_records: int = 10_000
    lagging_time_ms: int = 60_000
    idle_after_s: float = 60.0
    report_grace_s: float = 30.0
    commit_limit_ms: int = DEFAULT_COMMIT_LIMIT_MS
    flush_factor: float = 2.0  # see tables.domain.table_checks


@dataclass(frozen=True)
class ReplicaLive:
    """What one server last published about the consuming segment (tables.live_state)."""

    consumer_state: str = CONSUMING_STATE
    phase: str = "CONSUMING"
    current_offset: int | None = None
    upstream_offset: int | None = None
    records_lag: int = 0
    availability_lag_ms: int = 0
    last_consumed_ms: int | None = None
    rows_per_s: float = 0.0
    lost_offsets: int = 0
    updated_ms: int = 0
    phase_since_ms: int | None = None  # when the current phase began
    completing_since_ms: int | None = None  # when the replica left CONSUMING (None: consuming)

    @classmethod
    def from_published(cls, data: Mapping[str, Any]) -> ReplicaLive:
        """From the JSON a server publishes (`tables.live_state`), as the mirror keeps it."""

        def num(key: str) -> int | None:
            value = data.get(key)
            return int(value) if isinstance(value, int | float) else None

        return cls(
            consumer_state=str(data.get("consumerState") or CONSUMING_STATE),
            phase=str(data.get("phase") or "CONSUMING"),
            current_offset=num("currentOffset"),
            upstream_offset=num("upstreamOffset"),
            records_lag=num("recordsLag") or 0,
            availability_lag_ms=num("availabilityLagMs") or 0,
            last_consumed_ms=num("lastConsumedMs"),
            rows_per_s=float(data.get("rowsPerSecond") or 0.0),
            lost_offsets=num("lostOffsets") or 0,
            updated_ms=num("updatedMs") or 0,
            phase_since_ms=num("phaseSinceMs"),
            completing_since_ms=num("completingSinceMs"),
        )


@dataclass(frozen=True)
class PauseInfo:
    paused: bool = False
    reason_code: str = ""
    comment: str = ""
    time: str = ""


@dataclass(frozen=True)
class PartitionFacts:
    partition: int
    consuming_segment: str = ""  # "" when no segment of the partition is CONSUMING in the IS
    latest_segment: str = ""
    ev_states: Mapping[str, str] = field(default_factory=dict)  # IS replica -> EV state or ""
    live: Mapping[str, ReplicaLive] = field(default_factory=dict)  # replicas that published
    pause: PauseInfo = PauseInfo()
    partition_paused: bool = False
    progressed_at_ms: int | None = None
    consuming_created_ms: int | None = None  # the consuming segment's creation time
    replication: int = 0  # the table's replication (0: unknown, not checked)
    # Pauseless: the partition's newest segment whose ZK status is COMMITTING ("" if none), when
    # its metadata was written (commit start) and its replicas' ExternalView states.
    committing_segment: str = ""
    committing_since_ms: int | None = None
    committing_states: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionVerdict:
    verdict: Verdict
    detail: str
    health: Health
    current_offset: int | None = None
    upstream_offset: int | None = None
    records_lag: int = 0
    time_lag_ms: int = 0
    rows_per_s: float = 0.0
    stalled_s: int = 0
    lost_offsets: int = 0

    @property
    def health_rank(self) -> int:
        return HEALTH_RANK[self.health]


def worst(healths: Iterable[str]) -> Health:
    """The worst of `healths` (GOOD when empty)."""
    return Health(max(healths, key=HEALTH_RANK.__getitem__, default=Health.GOOD))


def progressed_at(
    previous_ms: int | None,
    previous_offset: int | None,
    previous_segment: str,
    offset: int | None,
    segment: str,
    now_ms: int,
) -> int:
    """When the partition last moved: `now_ms` if first seen, on a new offset or a new segment."""
    if previous_ms is None or segment != previous_segment:
        return now_ms
    if offset is not None and offset != previous_offset:
        return now_ms
    return previous_ms


def _max_or_none(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _seconds(ms: int) -> int:
    return max(0, ms) // 1000


def format_duration(ms: int) -> str:
    """`45 s`, `3 min 05 s`, `2 h 04 min`, `3 d 02 h` (the pages' `display.duration`)."""
    total = _seconds(ms)
    if total < 60:
        return f"{total} s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours:02d} h"


def _committing(live: Mapping[str, ReplicaLive]) -> list[str]:
    return sorted(r for r, state in live.items() if state.phase in COMMIT_PHASES)


def commit_started_ms(live: Mapping[str, ReplicaLive]) -> int | None:
    """When the earliest replica in a commit phase left CONSUMING (None: no replica says)."""
    starts = [
        r.completing_since_ms if r.completing_since_ms is not None else r.phase_since_ms
        for r in live.values()
        if r.phase in COMMIT_PHASES
    ]
    present = [start for start in starts if start is not None]
    return min(present) if present else None


def commit_detail(live: Mapping[str, ReplicaLive], now_ms: int) -> str:
    """`commit for 6 min 40 s: Server_a CATCHING_UP for 40 s, Server_b HOLDING for 6 min 38 s`.

    Durations come from the published since-times only (never contains "; ")."""
    parts = []
    for replica in _committing(live):
        state = live[replica]
        since = state.phase_since_ms
        parts.append(
            f"{replica} {state.phase}"
            + ("" if since is None else f" for {format_duration(now_ms - since)}")
        )
    started = commit_started_ms(live)
    head = "" if started is None else f"commit for {format_duration(now_ms - started)}: "
    return head + ", ".join(parts)


def replicas_up(ev_states: Mapping[str, str]) -> int:
    """Replicas CONSUMING or ONLINE in the ExternalView."""
    return sum(1 for state in ev_states.values() if state in QUERYABLE)


def lag_known(upstream_offset: int | None) -> bool:
    """A partition's lag is known once a reporting replica knows its upstream offset (the
    mirror's `upstream_offset` is the most advanced of theirs: None when none does)."""
    return upstream_offset is not None


def _pause_detail(facts: PartitionFacts) -> str:
    if facts.pause.paused:
        who = facts.pause.comment or "an operator"
        since = facts.pause.time or "an unknown time"
        reason = facts.pause.reason_code or "ADMINISTRATIVE"
        return f"paused by {who} since {since}, reason {reason}"
    return f"partition {facts.partition} paused (pausedPartitions)"


def _consumer_errors(facts: PartitionFacts) -> list[str]:
    problems = [
        f"{r} is ERROR in the ExternalView" for r, s in facts.ev_states.items() if s == ERROR
    ]
    # The consuming segment is the one committing (pauseless, before the IdealState moved on):
    # its consumers stopped at the end offset on purpose.
    stopped_on_purpose = bool(facts.consuming_segment) and (
        facts.consuming_segment == facts.committing_segment
    )
    for replica, live in sorted(facts.live.items()):
        if live.phase == ERROR or (
            live.consumer_state == NOT_CONSUMING
            and live.phase not in COMMIT_PHASES
            and not stopped_on_purpose
        ):
            problems.append(f"{replica} is {live.consumer_state} (phase {live.phase})")
    return problems


def triage_partition(
    facts: PartitionFacts, now_ms: int, thresholds: Thresholds = Thresholds()
) -> PartitionVerdict:
    """The verdict of one stream partition; see the module docstring for the rules."""
    live = facts.live
    figures = {
        "current_offset": _max_or_none(r.current_offset for r in live.values()),
        "upstream_offset": _max_or_none(r.upstream_offset for r in live.values()),
        "records_lag": max((max(0, r.records_lag) for r in live.values()), default=0),
        "time_lag_ms": max((max(0, r.availability_lag_ms) for r in live.values()), default=0),
        "rows_per_s": max((r.rows_per_s for r in live.values()), default=0.0),
        "lost_offsets": max((max(0, r.lost_offsets) for r in live.values()), default=0),
    }
    since_progress_ms = now_ms - (facts.progressed_at_ms if facts.progressed_at_ms else now_ms)
    stalled_s = _seconds(since_progress_ms) if figures["records_lag"] > 0 else 0

    def verdict(kind: Verdict, detail: str, stalled: int = 0) -> PartitionVerdict:
        return PartitionVerdict(
            kind, detail[:255], VERDICT_HEALTH[kind], stalled_s=stalled, **figures
        )

    if facts.pause.paused or facts.partition_paused:
        return verdict(Verdict.PAUSED, _pause_detail(facts))
    if not facts.consuming_segment:
        latest = f" (latest {facts.latest_segment})" if facts.latest_segment else ""
        return verdict(
            Verdict.MISSING_CONSUMING_SEGMENT, f"no CONSUMING segment in the IdealState{latest}"
        )
    errors = _consumer_errors(facts)
    if errors:
        return verdict(Verdict.CONSUMER_ERROR, "; ".join(errors), stalled_s)
    if figures["lost_offsets"] > 0:
        return verdict(
            Verdict.OFFSET_UNAVAILABLE,
            f"{figures['lost_offsets']} offsets no longer in the stream were skipped",
            stalled_s,
        )
    if facts.committing_segment:
        return _pauseless_verdict(verdict, facts, now_ms, thresholds.commit_limit_ms)
    if not live:
        created = facts.consuming_created_ms
        grace_ms = thresholds.report_grace_s * 1000  # 0: off
        if created is not None and grace_ms > 0 and now_ms - created < grace_ms:
            return verdict(
                Verdict.STARTING,
                f"{facts.consuming_segment} created {_seconds(max(0, now_ms - created))} s ago; "
                "its replicas have not reported yet",
            )
        silent = ", ".join(sorted(facts.ev_states)) or "no replica"
        return verdict(
            Verdict.NOT_REPORTING, f"no live state for {facts.consuming_segment} from {silent}"
        )
    if _committing(live):
        return _commit_verdict(verdict, live, now_ms, thresholds.commit_limit_ms)
    if stalled_s and stalled_s >= thresholds.stalled_after_s:
        return verdict(
            Verdict.STALLED,
            f"stalled for {stalled_s} s, {figures['records_lag']} records behind",
            stalled_s,
        )
    up = replicas_up(facts.ev_states)
    if facts.replication > 0 and up < facts.replication:
        created = facts.consuming_created_ms
        grace_ms = thresholds.report_grace_s * 1000
        if created is None or now_ms - created >= grace_ms:
            return verdict(
                Verdict.UNDER_REPLICATED,
                f"{up} of {facts.replication} replicas CONSUMING or ONLINE in the ExternalView",
                stalled_s,
            )
    if (
        figures["records_lag"] > thresholds.lagging_records
        or figures["time_lag_ms"] > thresholds.lagging_time_ms
    ):
        return verdict(
            Verdict.LAGGING,
            f"{figures['records_lag']} records, {figures['time_lag_ms']} ms behind",
            stalled_s,
        )
    if figures["records_lag"] == 0:
        last_row = _max_or_none(r.last_consumed_ms for r in live.values())
        # Since the last row consumed when the servers say, else since the offset last moved.
        idle_ms = since_progress_ms if last_row is None else now_ms - last_row
        if idle_ms >= thresholds.idle_after_s * 1000:
            return verdict(Verdict.NO_UPSTREAM_DATA, f"no new rows for {_seconds(idle_ms)} s")
    return verdict(
        Verdict.CONSUMING,
        f"{figures['rows_per_s']:.1f} rows/s, {figures['records_lag']} records behind",
        stalled_s,
    )


def _commit_verdict(
    verdict: Callable[..., PartitionVerdict],
    live: Mapping[str, ReplicaLive],
    now_ms: int,
    limit_ms: int,
) -> PartitionVerdict:
    """COMMITTING, or COMMIT_OVERDUE (WARNING past the limit, BAD past twice the limit). The
    detail is `commit_detail` then, for an overdue one, "; " and the limit."""
    detail = commit_detail(live, now_ms)
    started = commit_started_ms(live)
    elapsed = None if started is None else now_ms - started
    return _committing_or_overdue(
        verdict, detail, elapsed, limit_ms, " (MAX_SEGMENT_COMPLETION_TIME)"
    )


def _committing_or_overdue(
    verdict: Callable[..., PartitionVerdict],
    detail: str,
    elapsed: int | None,
    limit_ms: int,
    past_note: str,
) -> PartitionVerdict:
    """COMMITTING within the completion time limit; COMMIT_OVERDUE past it (WARNING), BAD past
    twice the limit. `past_note` ends the note of a commit past the limit."""
    if elapsed is None or limit_ms <= 0 or elapsed <= limit_ms:
        return verdict(Verdict.COMMITTING, detail)
    limit = format_duration(limit_ms)
    if elapsed > 2 * limit_ms:
        note = f"past twice the {limit} completion time limit: the healer has not repaired it"
        return replace(verdict(Verdict.COMMIT_OVERDUE, f"{detail}; {note}"), health=Health.BAD)
    note = f"past the {limit} completion time limit{past_note}"
    return verdict(Verdict.COMMIT_OVERDUE, f"{detail}; {note}")


def _pauseless_detail(facts: PartitionFacts, now_ms: int) -> str:
    """`<N> COMMITTING for 40 s (pauseless: …); <N+1> consuming, 12.0 rows/s, 3 records behind`."""
    since = facts.committing_since_ms
    head = f"{facts.committing_segment} COMMITTING"
    if since is not None:
        head += f" for {format_duration(now_ms - since)}"
    head += " (pauseless: built and uploaded in the background)"
    following = facts.consuming_segment
    if not following or following == facts.committing_segment:
        return head + ", no next segment consuming yet"
    if not facts.live:
        return f"{head}; {following} starting"
    rate = max((r.rows_per_s for r in facts.live.values()), default=0.0)
    lag = max((max(0, r.records_lag) for r in facts.live.values()), default=0)
    return f"{head}; {following} consuming, {rate:.1f} rows/s, {lag} records behind"


def _pauseless_verdict(
    verdict: Callable[..., PartitionVerdict], facts: PartitionFacts, now_ms: int, limit_ms: int
) -> PartitionVerdict:
    """COMMITTING while a pauseless commit is within the completion time limit; COMMIT_OVERDUE
    past it (BAD past twice the limit, or at once when every replica is ERROR)."""
    detail = _pauseless_detail(facts, now_ms)
    states = facts.committing_states
    if states and all(state == ERROR for state in states.values()):
        note = "ERROR on every replica: no server has it, it needs re-ingestion from the stream"
        return replace(verdict(Verdict.COMMIT_OVERDUE, f"{detail}; {note}"), health=Health.BAD)
    since = facts.committing_since_ms
    elapsed = None if since is None else now_ms - since
    return _committing_or_overdue(verdict, detail, elapsed, limit_ms, ": the healer repairs it")


# --- segments and tables --------------------------------------------------------------------------


def is_all_offline(ideal: Mapping[str, str], external: Mapping[str, str]) -> bool:
    """Every replica OFFLINE: in the IdealState, or (when it has any) in the ExternalView."""
    if ideal and all(s == OFFLINE for s in ideal.values()):
        return True
    return bool(external) and all(s == OFFLINE for s in external.values())


def segment_display_state(ideal: Mapping[str, str], external: Mapping[str, str]) -> str:
    """ERROR, UPDATING (IdealState != ExternalView), OFFLINE, CONSUMING or ONLINE."""
    if ERROR in external.values():
        return ERROR
    if dict(ideal) != dict(external):
        return "UPDATING"
    states = set(ideal.values())
    if not states or states == {OFFLINE}:
        return OFFLINE
    if CONSUMING_STATE in states:
        return CONSUMING_STATE
    return "ONLINE"


def percent_available(
    segments: Iterable[tuple[Mapping[str, str], Mapping[str, str], int | None]],
    now_ms: int,
    grace_ms: int = NEW_SEGMENT_GRACE_MS,
) -> int:
    """Pinot's percentSegmentsAvailable over (IdealState entry, ExternalView entry, creation time
    in ms) triples. A segment created less than `grace_ms` ago that the ExternalView does not
    list yet is being loaded, not lost, and is left out, as are segments OFFLINE on every replica
    of the IdealState (SegmentStatusChecker skips both)."""
    total = unavailable = 0
    for ideal, external, created_ms in segments:
        if ideal and all(s == OFFLINE for s in ideal.values()):
            continue
        if not external and created_ms is not None and now_ms - created_ms < grace_ms:
            continue
        total += 1
        if not any(s in QUERYABLE for s in external.values()):
            unavailable += 1
    return 100 if total == 0 else (total - unavailable) * 100 // total


def table_health(
    partitions: Iterable[tuple[int, PartitionVerdict]],
    *,
    paused: bool = False,
    error_segments: int = 0,
    percent: int = 100,
    updating: bool = False,
    never_committed: str = "",
) -> tuple[Health, str]:
    """(health, reason) of a table from its partitions' verdicts and its segment counts;
    `never_committed` is `never_committed(...)`'s reason (a WARNING) when it flagged the table."""
    findings: list[tuple[Health, str]] = []
    if never_committed:
        findings.append((Health.WARNING, never_committed))
    if error_segments:
        findings.append((Health.BAD, f"{error_segments} segment(s) in ERROR or all OFFLINE"))
    if percent < 100:
        findings.append((Health.BAD, f"{percent}% of segments available"))
    for partition, result in sorted(partitions, key=lambda p: (-p[1].health_rank, p[0])):
        if result.health != Health.GOOD:
            findings.append(
                (result.health, f"partition {partition}: {result.verdict} ({result.detail})")
            )
        break
    if updating:
        findings.append((Health.UPDATING, "IdealState and ExternalView differ"))
    if paused:
        findings.append((Health.PAUSED, "consumption paused"))
    if not findings:
        return Health.GOOD, ""
    health, reason = max(findings, key=lambda f: HEALTH_RANK[f[0]])
    return health, reason[:255]
