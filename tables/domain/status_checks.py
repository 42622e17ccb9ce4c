"""Pinot's SegmentStatusChecker and MissingConsumingSegmentFinder, per table (pure).

`check_table(facts, now_ms, wait_for_push_ms)` computes a table's status gauges from its
IdealState, ExternalView and segment metadata (`TableFacts`) with Pinot's semantics
(`SegmentStatusChecker.updateSegmentMetrics`, reference round 2 §A.5):

- The segments are the IdealState's. A table without any has `segmentsInErrorState` 0,
  `percentSegmentsAvailable` 100, `segmentsWithLessReplicas` 0, `numberOfReplicas` = the
  IdealState's replicas, `percentOfReplicas` 100, and no missing-consuming figures (Pinot returns
  before its MissingConsumingSegmentFinder).
- A segment is checked only when it has >= 1 ONLINE/CONSUMING replica in the IdealState, has ZK
  metadata, and its metadata znode's mtime (its creation time when the mtime is unknown) is at
  least `wait_for_push_ms` old (Pinot's `controller.statuschecker.waitForPushTimePeriod`, 10 min):
  servers are still loading younger ones.
- `segmentsInErrorState`: (segment, instance) pairs in ERROR in the ExternalView, over the
  checked segments. A replica is *up* when it is ONLINE or CONSUMING in the ExternalView on a
  queryable instance (`TableFacts.queryable`: enabled servers; None counts every instance).
  `percentSegmentsAvailable` = (all IdealState segments - checked segments with no replica up)
  * 100 // all IdealState segments. `segmentsWithLessReplicas`: checked segments with fewer
  replicas up than ONLINE/CONSUMING in the IdealState. `numberOfReplicas`: the fewest replicas up
  over the checked segments, never more than the most ONLINE/CONSUMING replicas an IdealState
  segment has; `percentOfReplicas`: the lowest replicas-up * 100 // the segment's IdealState
  replicas. `tableConsumptionPaused`: the IdealState's pause flag.
- For a REALTIME table, `missing_consuming` (MissingConsumingSegmentFinder.findMissingSegments):
  from the IdealState alone, per partition, the latest LLC segment with a CONSUMING replica and the
  latest with an ONLINE one (and none CONSUMING). When the stream's partitions are known
  (`StreamFacts.partitions`, non-empty), each of them without a CONSUMING segment counts: with no
  ONLINE segment either as a new partition (`missingConsumingSegmentNewPartitionCount` too), else
  when its latest ONLINE segment's end offset is below the stream's largest offset, for
  now - that segment's *creation time* (when consumption started). When the stream's partitions are
  unknown, every partition with an ONLINE but no CONSUMING segment counts, for now - the segment's
  metadata *mtime* (Pinot's fallback). Beyond Pinot, which has all or none of the largest offsets,
  a partition whose largest offset is unknown (`StreamFacts.largest_offsets` lacks it) always takes
  the fallback. `missingConsumingSegmentMaxDurationMinutes` is the longest such duration in whole
  minutes (0 when none; an unknown time adds to the count only).
Nothing here reads the clock: `now_ms` is an argument (epoch milliseconds).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tables.domain.periods import SEGMENT_STATUS_CHECKER

__all__ = [
    "DEFAULT_WAIT_FOR_PUSH_MS",
    "MAX_NAMED",
    "TASK_NAME",
    "MissingConsuming",
    "SegmentFacts",
    "StatusCheck",
    "StreamFacts",
    "TableFacts",
    "check_table",
    "missing_consuming",
]

TASK_NAME = SEGMENT_STATUS_CHECKER
DEFAULT_WAIT_FOR_PUSH_MS = 10 * 60 * 1000
MAX_NAMED = 10  # segments named per finding (Pinot logs at most 10)
ONLINE, CONSUMING, ERROR = "ONLINE", "CONSUMING", "ERROR"
UP = frozenset({ONLINE, CONSUMING})


@dataclass(frozen=True)
class SegmentFacts:
    """One segment as the mirror knows it. `ideal` empty: not in the IdealState."""

    name: str
    ideal: Mapping[str, str] = field(default_factory=dict)  # instance -> IdealState state
    external: Mapping[str, str] = field(default_factory=dict)  # instance -> ExternalView state
    has_metadata: bool = True
    mtime_ms: int | None = None  # the metadata znode's mtime
    creation_time_ms: int | None = None  # segment metadata creation time (consumption start)
    partition: int | None = None  # from the LLC name; None for other names
    sequence: int | None = None
    end_offset: int | None = None


@dataclass(frozen=True)
class StreamFacts:
    """What is known of the stream: its partitions (None: unknown) and, for some partitions, the
    largest offset (the offset the next message will get)."""

    partitions: frozenset[int] | None = None
    largest_offsets: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class TableFacts:
    table: str
    segments: Sequence[SegmentFacts]
    paused: bool = False
    replicas: int = 1  # the IdealState's replicas (the table's replication)
    realtime: bool = True
    queryable: Collection[str] | None = None  # instances whose replicas serve; None: every one
    stream: StreamFacts = StreamFacts()


@dataclass(frozen=True)
class MissingConsuming:
    total: int = 0
    new_partitions: int = 0
    max_duration_minutes: int = 0
    partitions: tuple[int, ...] = ()  # the partitions counted in `total`


@dataclass(frozen=True)
class StatusCheck:
    """A table's gauges (Pinot's names in the comments) and, for operators, what they count."""

    segments_in_error_state: int = 0  # segmentsInErrorState
    percent_segments_available: int = 100  # percentSegmentsAvailable
    segments_with_less_replicas: int = 0  # segmentsWithLessReplicas
    number_of_replicas: int = 1  # numberOfReplicas
    percent_of_replicas: int = 100  # percentOfReplicas
    table_consumption_paused: bool = False  # tableConsumptionPaused
    missing: MissingConsuming | None = None  # missingConsumingSegment*; None: not computed
    error_replicas: tuple[tuple[str, str], ...] = ()  # (segment, instance), the first MAX_NAMED
    offline_segments: tuple[str, ...] = ()
    partial_segments: tuple[str, ...] = ()
    without_metadata: tuple[str, ...] = ()

    def details(self) -> dict[str, Any]:
        """The named findings, as JSON."""
        return {
            "errorReplicas": [list(pair) for pair in self.error_replicas],
            "offlineSegments": list(self.offline_segments),
            "segmentsWithLessReplicas": list(self.partial_segments),
            "segmentsWithoutMetadata": list(self.without_metadata),
            "missingConsumingPartitions": list(self.missing.partitions) if self.missing else [],
        }


@dataclass
class _Tally:
    max_ideal_up: int | None = None
    min_ev_up: int | None = None
    min_ev_percent: int = 100
    errors: list[tuple[str, str]] = field(default_factory=list)
    offline: list[str] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)
    without_metadata: list[str] = field(default_factory=list)


def _up(states: Iterable[str]) -> int:
    return sum(1 for state in states if state in UP)


def _tally(facts: TableFacts, segments: Iterable[SegmentFacts], now_ms: int, wait_ms: int):
    tally = _Tally()
    for segment in segments:
        ideal_up = _up(segment.ideal.values())
        if ideal_up == 0:
            continue
        tally.max_ideal_up = max(tally.max_ideal_up or ideal_up, ideal_up)
        if not segment.has_metadata:
            tally.without_metadata.append(segment.name)
            continue
        changed_ms = segment.mtime_ms if segment.mtime_ms is not None else segment.creation_time_ms
        if changed_ms is not None and changed_ms > now_ms - wait_ms:
            continue  # recently created or committed: its servers may still be loading it
        ev_up = 0
        for instance, state in sorted(segment.external.items()):
            if state in UP and (facts.queryable is None or instance in facts.queryable):
                ev_up += 1
            if state == ERROR:
                tally.errors.append((segment.name, instance))
        if ev_up == 0:
            tally.offline.append(segment.name)
        elif ev_up < ideal_up:
            tally.partial.append(segment.name)
        else:
            ev_up = ideal_up
        tally.min_ev_up = ev_up if tally.min_ev_up is None else min(tally.min_ev_up, ev_up)
        percent = ev_up * 100 // max(len(segment.ideal), 1)
        tally.min_ev_percent = min(tally.min_ev_percent, percent)
    return tally


def check_table(
    facts: TableFacts, now_ms: int, wait_for_push_ms: int = DEFAULT_WAIT_FOR_PUSH_MS
) -> StatusCheck:
    """The table's status gauges; see the module docstring."""
    segments = sorted((s for s in facts.segments if s.ideal), key=lambda s: s.name)
    replicas = max(facts.replicas, 1)
    if not segments:
        return StatusCheck(number_of_replicas=replicas, table_consumption_paused=facts.paused)
    tally = _tally(facts, segments, now_ms, wait_for_push_ms)
    max_ideal_up = tally.max_ideal_up if tally.max_ideal_up is not None else replicas
    min_ev_up = max_ideal_up if tally.min_ev_up is None else min(tally.min_ev_up, max_ideal_up)
    total = len(segments)
    offline = len(tally.offline)
    return StatusCheck(
        segments_in_error_state=len(tally.errors),
        percent_segments_available=(total - offline) * 100 // total if offline else 100,
        segments_with_less_replicas=len(tally.partial),
        number_of_replicas=min_ev_up,
        percent_of_replicas=tally.min_ev_percent,
        table_consumption_paused=facts.paused,
        missing=missing_consuming(segments, facts.stream, now_ms) if facts.realtime else None,
        error_replicas=tuple(tally.errors[:MAX_NAMED]),
        offline_segments=tuple(tally.offline[:MAX_NAMED]),
        partial_segments=tuple(tally.partial[:MAX_NAMED]),
        without_metadata=tuple(tally.without_metadata[:MAX_NAMED]),
    )


def _latest_by_partition(
    segments: Iterable[SegmentFacts],
) -> tuple[dict[int, SegmentFacts], dict[int, SegmentFacts]]:
    """(partition -> latest segment with a CONSUMING replica, partition -> latest segment with
    an ONLINE replica and none CONSUMING), from the IdealState entries of LLC segments."""
    consuming: dict[int, SegmentFacts] = {}
    completed: dict[int, SegmentFacts] = {}
    for segment in segments:
        if segment.partition is None or segment.sequence is None:
            continue  # not an LLC name (an uploaded segment)
        states = set(segment.ideal.values())
        target = consuming if CONSUMING in states else completed if ONLINE in states else None
        if target is None:
            continue
        found = target.get(segment.partition)
        if found is None or segment.sequence >= (found.sequence or 0):
            target[segment.partition] = segment
    return consuming, completed


def _whole_minutes(duration_ms: int) -> int:
    return duration_ms // 60_000 if duration_ms > 0 else 0


def missing_consuming(
    segments: Iterable[SegmentFacts], stream: StreamFacts, now_ms: int
) -> MissingConsuming:
    """Partitions without a CONSUMING segment in the IdealState; see the module docstring."""
    consuming, completed = _latest_by_partition(segments)
    counted: list[int] = []
    new_partitions = longest = 0

    def count(partition: int, since_ms: int | None) -> None:
        nonlocal longest
        counted.append(partition)
        if since_ms is not None:
            longest = max(longest, _whole_minutes(now_ms - since_ms))

    def check_completed(partition: int, latest: SegmentFacts) -> None:
        largest = stream.largest_offsets.get(partition)
        if largest is None:  # the stream's end is unknown: Pinot's fallback
            count(partition, latest.mtime_ms)
        elif latest.end_offset is None or latest.end_offset < largest:  # rows wait upstream
            count(partition, latest.creation_time_ms)

    if stream.partitions:
        for partition in sorted(stream.partitions):
            if partition in consuming:
                continue
            latest = completed.get(partition)
            if latest is None:  # a partition new to the table, or its first segment deleted
                new_partitions += 1
                count(partition, None)
            else:
                check_completed(partition, latest)
    else:
        for partition in sorted(set(completed) - set(consuming)):
            check_completed(partition, completed[partition])
    return MissingConsuming(len(counted), new_partitions, longest, tuple(counted))
