"""Flush thresholds of consuming segments (reference §3.2, §6.6).

Contract:
- Stream-config readers take the table's stream config map (string values). An unset key gives its
  default; a value that does not parse, or is negative, raises ValueError naming the key, so table
  config validation can call `make_updater` and report the message.
- `make_updater` picks the updater as Pinot's `FlushThresholdUpdateManager` does (first match):
  `threshold.rows` > 0 -> Default(rows); `threshold.segment.rows` > 0 -> Fixed; `threshold.rows`
  == 0 or `threshold.segment.size` > 0 -> size-based autotune; otherwise Default(5,000,000).
- Every updater answers `threshold_for_new_segment(max_partitions_per_instance, previous)` and
  takes `on_segment_commit(stats, now_ms)`; only the size-based one learns. Its state lives in
  memory; Pinot keeps one per `<table>,<topic>` on the lead controller and loses it on failover.
- `flush_settings` is what `make_updater` reads, parsed (so `1h` equals `3600000`): a holder of a
  long-lived updater makes a new one when the settings of the table's config change.
- The autotune arithmetic follows `SizeBasedSegmentFlushThresholdComputer` with Java's casts
  (truncation toward zero, long division); the variance factor draws from an injected
  `rng() -> [0, 1)`.
"""

from __future__ import annotations

import math
import random
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "DEFAULT_FLUSH_AUTOTUNE_INITIAL_ROWS",
    "DEFAULT_FLUSH_THRESHOLD_ROWS",
    "DEFAULT_FLUSH_THRESHOLD_SEGMENT_SIZE_BYTES",
    "DEFAULT_FLUSH_THRESHOLD_TIME_MS",
    "FLUSH_AUTOTUNE_INITIAL_ROWS",
    "FLUSH_DESIRED_SIZE_LEGACY",
    "FLUSH_THRESHOLD_ROWS",
    "FLUSH_THRESHOLD_ROWS_LEGACY",
    "FLUSH_THRESHOLD_SEGMENT_ROWS",
    "FLUSH_THRESHOLD_SEGMENT_SIZE",
    "FLUSH_THRESHOLD_TIME",
    "FLUSH_THRESHOLD_TIME_LEGACY",
    "FLUSH_THRESHOLD_VARIANCE_FRACTION",
    "MAX_VARIANCE_FRACTION",
    "MINIMUM_NUM_ROWS_THRESHOLD",
    "CommittedSegmentStats",
    "DefaultFlushThresholdUpdater",
    "FixedFlushThresholdUpdater",
    "FlushThresholdUpdater",
    "SegmentSizeBasedFlushThresholdUpdater",
    "flush_autotune_initial_rows",
    "flush_settings",
    "flush_threshold_rows",
    "flush_threshold_segment_rows",
    "flush_threshold_segment_size_bytes",
    "flush_threshold_time_ms",
    "flush_threshold_variance_fraction",
    "make_updater",
    "parse_period_ms",
    "parse_size_bytes",
]

FLUSH_THRESHOLD_ROWS = "realtime.segment.flush.threshold.rows"
FLUSH_THRESHOLD_ROWS_LEGACY = (
    "realtime.segment.flush.threshold.size",
    "realtime.segment.flush.threshold.size.llc",
)
FLUSH_THRESHOLD_SEGMENT_ROWS = "realtime.segment.flush.threshold.segment.rows"
FLUSH_THRESHOLD_TIME = "realtime.segment.flush.threshold.time"
FLUSH_THRESHOLD_TIME_LEGACY = ("realtime.segment.flush.threshold.time.llc",)
FLUSH_THRESHOLD_SEGMENT_SIZE = "realtime.segment.flush.threshold.segment.size"
FLUSH_DESIRED_SIZE_LEGACY = ("realtime.segment.flush.desired.size",)
FLUSH_THRESHOLD_VARIANCE_FRACTION = "realtime.segment.flush.threshold.variance.fraction"
FLUSH_AUTOTUNE_INITIAL_ROWS = "realtime.segment.flush.autotune.initialRows"

DEFAULT_FLUSH_THRESHOLD_ROWS = 5_000_000
DEFAULT_FLUSH_THRESHOLD_TIME_MS = 6 * 60 * 60 * 1000
DEFAULT_FLUSH_THRESHOLD_SEGMENT_SIZE_BYTES = 200 * 1024 * 1024
DEFAULT_FLUSH_AUTOTUNE_INITIAL_ROWS = 100_000
MINIMUM_NUM_ROWS_THRESHOLD = 10_000
MAX_VARIANCE_FRACTION = 0.5

_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1
_CURRENT_RATIO_WEIGHT = 0.1
_PREVIOUS_RATIO_WEIGHT = 0.9
_TIME_LIMIT_ROWS_MULTIPLIER = 1.1

_PERIOD = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", re.ASCII | re.IGNORECASE)
_DIGITS = re.compile(r"\d+", re.ASCII)
_JAVA_INT = re.compile(r"[+-]?\d+", re.ASCII)
_SIZE = re.compile(r"(\d+(?:\.\d+)?)([KMGTP])?B?", re.ASCII | re.IGNORECASE)
_SIZE_UNITS = {unit: 1024.0**power for power, unit in enumerate("KMGTP", start=1)}
_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)


# --- value parsing --------------------------------------------------------------------------------


def parse_period_ms(text: str) -> int:
    """Pinot's flush-time text as milliseconds: a period like `6h`, `1h30m`, `1d`, `10s` (units
    in the order d, h, m, s, case-insensitive) or plain milliseconds like `21600000`."""
    match = _PERIOD.fullmatch(text)
    if text and match is not None:
        days, hours, minutes, seconds = (int(group or 0) for group in match.groups())
        return (((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000
    if _DIGITS.fullmatch(text):
        return int(text)
    raise ValueError(
        f"invalid time period {text!r}: use e.g. '6h', '30m', '1h30m', '1d', '10s' or milliseconds"
    )


def parse_size_bytes(text: str) -> int:
    """Pinot's `DataSizeUtils.toBytes`: `500`, `100K`, `200M`, `200MB`, `1.5G`; units K/M/G/T/P
    are powers of 1024, case-insensitive, with an optional trailing B."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(f"invalid data size {text!r}: use e.g. '500', '100K', '200M' or '1G'")
    number, unit = match.groups()
    if unit is None:
        return int(float(number))
    return int(float(number) * _SIZE_UNITS[unit.upper()])


def _lookup(config: Mapping[str, str], key: str, legacy: tuple[str, ...] = ()) -> tuple[str, str]:
    """(key, value) of the first of `key`, *legacy present in `config`; ("", "") when none is."""
    for candidate in (key, *legacy):
        value = config.get(candidate)
        if value is not None:
            return candidate, value
    return "", ""


def _int_value(key: str, text: str) -> int:
    if _JAVA_INT.fullmatch(text) is None:
        raise ValueError(f"invalid config {key}: {text!r} is not an integer")
    value = int(text)
    if value > _INT_MAX:
        raise ValueError(f"invalid config {key}: {text!r} is larger than {_INT_MAX}")
    if value < 0:
        raise ValueError(f"invalid config {key}: {text!r} must not be negative")
    return value


def flush_threshold_rows(config: Mapping[str, str]) -> int | None:
    """`realtime.segment.flush.threshold.rows` (or a legacy name); None when unset."""
    key, text = _lookup(config, FLUSH_THRESHOLD_ROWS, FLUSH_THRESHOLD_ROWS_LEGACY)
    return _int_value(key, text) if key else None


def flush_threshold_segment_rows(config: Mapping[str, str]) -> int | None:
    key, text = _lookup(config, FLUSH_THRESHOLD_SEGMENT_ROWS)
    return _int_value(key, text) if key else None


def flush_threshold_time_ms(stream_config: Mapping[str, str]) -> int:
    """The consuming segment's time limit in ms (default 6 h)."""
    key, text = _lookup(stream_config, FLUSH_THRESHOLD_TIME, FLUSH_THRESHOLD_TIME_LEGACY)
    if not key:
        return DEFAULT_FLUSH_THRESHOLD_TIME_MS
    if text.lstrip().startswith("-"):
        raise ValueError(f"invalid config {key}: {text!r} must not be negative")
    try:
        return parse_period_ms(text)
    except ValueError as exc:
        raise ValueError(f"invalid config {key}: {exc}") from None


def flush_threshold_segment_size_bytes(config: Mapping[str, str]) -> int | None:
    """The desired completed segment size in bytes; None when unset."""
    key, text = _lookup(config, FLUSH_THRESHOLD_SEGMENT_SIZE, FLUSH_DESIRED_SIZE_LEGACY)
    if not key:
        return None
    if text.lstrip().startswith("-"):
        raise ValueError(f"invalid config {key}: {text!r} must not be negative")
    try:
        return parse_size_bytes(text)
    except ValueError as exc:
        raise ValueError(f"invalid config {key}: {exc}") from None


def flush_threshold_variance_fraction(config: Mapping[str, str]) -> float:
    key, text = _lookup(config, FLUSH_THRESHOLD_VARIANCE_FRACTION)
    if not key:
        return 0.0
    if _DECIMAL.fullmatch(text) is None:
        raise ValueError(f"invalid config {key}: {text!r} is not a number")
    value = float(text)
    _check_variance(value, key)
    return value


def flush_autotune_initial_rows(config: Mapping[str, str]) -> int:
    """Rows of a partition's first autotuned segment (default 100,000, also used for 0)."""
    key, text = _lookup(config, FLUSH_AUTOTUNE_INITIAL_ROWS)
    value = _int_value(key, text) if key else 0
    return value if value > 0 else DEFAULT_FLUSH_AUTOTUNE_INITIAL_ROWS


def _check_variance(value: float, name: str) -> None:
    if not 0.0 <= value <= MAX_VARIANCE_FRACTION:
        raise ValueError(f"invalid config {name}: {value} must be between 0 and 0.5")


# --- updaters -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CommittedSegmentStats:
    """What the autotune learns from a committed segment.

    `total_docs` is the built segment's `segment.total.docs`, `pre_commit_rows` the rows the server
    consumed (the commit's `rowCount`, -1 when unknown), `size_bytes` the segment size, `threshold`
    its `segment.flush.threshold.size`, `creation_time_ms` its `segment.creation.time`.
    """

    total_docs: int
    size_bytes: int
    creation_time_ms: int
    threshold: int
    force_commit: bool = False
    pre_commit_rows: int = -1

    @property
    def uses_pre_commit_rows(self) -> bool:
        # Commit-time compaction dropped rows: learn from what was consumed.
        return self.pre_commit_rows > 0 and self.pre_commit_rows > self.total_docs

    @property
    def rows(self) -> int:
        return self.pre_commit_rows if self.uses_pre_commit_rows else self.total_docs

    @property
    def size_for_ratio(self) -> int:
        """The size, scaled up by pre/post rows when pre-commit rows are used (Math.round)."""
        if not self.uses_pre_commit_rows or self.total_docs <= 0:
            return self.size_bytes
        estimate = float(self.size_bytes) * float(self.pre_commit_rows) / float(self.total_docs)
        floor = math.floor(estimate)
        return floor + 1 if estimate - floor >= 0.5 else floor


class FlushThresholdUpdater(Protocol):
    def threshold_for_new_segment(
        self, max_partitions_per_instance: int, previous: CommittedSegmentStats | None
    ) -> int:
        """Rows for a new consuming segment; `previous` is the committing segment's stats (None
        when the partition has none, e.g. at table creation)."""
        ...

    def on_segment_commit(self, stats: CommittedSegmentStats, now_ms: int) -> None:
        """Learn from a segment that just committed, before the next one's threshold is asked."""
        ...


@dataclass(frozen=True)
class DefaultFlushThresholdUpdater:
    """The table-wide row budget divided among the partitions an instance consumes."""

    table_rows: int = DEFAULT_FLUSH_THRESHOLD_ROWS

    def threshold_for_new_segment(
        self, max_partitions_per_instance: int, previous: CommittedSegmentStats | None
    ) -> int:
        if max_partitions_per_instance < 1:
            raise ValueError("max_partitions_per_instance must be at least 1")
        return self.table_rows // max_partitions_per_instance

    def on_segment_commit(self, stats: CommittedSegmentStats, now_ms: int) -> None:
        """Nothing to learn."""


@dataclass(frozen=True)
class FixedFlushThresholdUpdater:
    """The same row count for every segment."""

    rows: int

    def threshold_for_new_segment(
        self, max_partitions_per_instance: int, previous: CommittedSegmentStats | None
    ) -> int:
        return self.rows

    def on_segment_commit(self, stats: CommittedSegmentStats, now_ms: int) -> None:
        """Nothing to learn."""


def _clamp(target_rows: int) -> int:
    if target_rows > _INT_MAX:
        return _INT_MAX
    return max(target_rows, MINIMUM_NUM_ROWS_THRESHOLD)


def _to_long(value: float) -> int:
    """Java's `(long)` cast of a double: truncation toward zero, saturating."""
    if math.isnan(value):
        return 0
    if value >= _LONG_MAX:
        return _LONG_MAX
    return int(value)


class SegmentSizeBasedFlushThresholdUpdater:
    """Autotune: aim each segment at the desired size using a learned rows-to-bytes ratio.

    Thread-safe; one instance per table and topic.
    """

    def __init__(
        self,
        desired_size_bytes: int = DEFAULT_FLUSH_THRESHOLD_SEGMENT_SIZE_BYTES,
        initial_rows: int = DEFAULT_FLUSH_AUTOTUNE_INITIAL_ROWS,
        variance_fraction: float = 0.0,
        time_threshold_ms: int = DEFAULT_FLUSH_THRESHOLD_TIME_MS,
        rng: Callable[[], float] = random.random,
    ) -> None:
        _check_variance(variance_fraction, "variance_fraction")
        if time_threshold_ms < 0:
            raise ValueError("time_threshold_ms must not be negative")
        self.desired_size_bytes = (
            desired_size_bytes
            if desired_size_bytes > 0
            else DEFAULT_FLUSH_THRESHOLD_SEGMENT_SIZE_BYTES
        )
        self.initial_rows = (
            initial_rows if initial_rows > 0 else DEFAULT_FLUSH_AUTOTUNE_INITIAL_ROWS
        )
        self.variance_fraction = variance_fraction
        self.time_threshold_ms = time_threshold_ms
        self._rng = rng
        self._lock = threading.Lock()
        self._time_consumed_ms = 0
        self._rows = 0
        self._size_bytes = 0
        self._threshold = 0
        self._ratio = 0.0

    @property
    def rows_to_size_ratio(self) -> float:
        """The learned rows per byte; 0.0 until a segment was learned from."""
        return self._ratio

    def on_segment_commit(self, stats: CommittedSegmentStats, now_ms: int) -> None:
        rows, size = stats.rows, stats.size_for_ratio
        with self._lock:
            if rows <= 0 or size <= 0 or stats.force_commit:
                # Nothing to learn; until a ratio exists, carry the committing segment's threshold.
                if self._ratio == 0:
                    self._threshold = stats.threshold
                return
            self._time_consumed_ms = now_ms - stats.creation_time_ms
            self._rows = rows
            self._size_bytes = size
            self._threshold = stats.threshold
            ratio = float(rows) / float(size)
            if self._ratio > 0:
                ratio = _CURRENT_RATIO_WEIGHT * ratio + _PREVIOUS_RATIO_WEIGHT * self._ratio
            self._ratio = ratio

    def threshold_for_new_segment(
        self, max_partitions_per_instance: int, previous: CommittedSegmentStats | None
    ) -> int:
        with self._lock:
            if self._ratio == 0:
                return self._threshold_without_ratio(previous)
            desired = self.desired_size_bytes
            if self._rows < self._threshold and self._size_bytes < desired:
                return self._threshold_after_time_limit()
            if self._size_bytes < desired // 2:
                target = _to_long(self._rows * 1.5)
            elif float(self._size_bytes) > desired * 1.5:
                target = self._rows // 2
            else:
                target = _to_long(desired * self._ratio)
            variance = self.variance_fraction
            if variance > 0:
                target = _to_long(target * ((1 - variance) + 2 * variance * self._rng()))
            return _clamp(target)

    def _threshold_without_ratio(self, previous: CommittedSegmentStats | None) -> int:
        if self._threshold > 0:
            return self._threshold
        # Nothing was learned in this process (e.g. after a restart): carry the committing
        # segment's threshold, as on_segment_commit would have remembered it.
        if previous is not None and previous.threshold > 0:
            return previous.threshold
        return self.initial_rows

    def _threshold_after_time_limit(self) -> int:
        # The last segment stopped on time before reaching its rows or the desired size: aim a
        # little above what it consumed, scaled down if the time limit has since been lowered.
        rows = self._rows
        if self.time_threshold_ms < self._time_consumed_ms:
            rows = self.time_threshold_ms * rows // self._time_consumed_ms
        return _clamp(_to_long(rows * _TIME_LIMIT_ROWS_MULTIPLIER))


def flush_settings(stream_config: Mapping[str, str]) -> tuple[object, ...]:
    """The parsed flush keys that choose and shape an updater: threshold rows, segment rows,
    segment size, time, variance fraction and autotune initial rows. Equal settings give equal
    fresh updaters, however they are spelled (`1h` or `3600000`, a legacy key name)."""
    return (
        flush_threshold_rows(stream_config),
        flush_threshold_segment_rows(stream_config),
        flush_threshold_segment_size_bytes(stream_config),
        flush_threshold_time_ms(stream_config),
        flush_threshold_variance_fraction(stream_config),
        flush_autotune_initial_rows(stream_config),
    )


def make_updater(stream_config: Mapping[str, str]) -> FlushThresholdUpdater:
    """The updater Pinot would choose for this stream config (validating every flush key)."""
    rows = flush_threshold_rows(stream_config)
    segment_rows = flush_threshold_segment_rows(stream_config)
    size = flush_threshold_segment_size_bytes(stream_config)
    time_ms = flush_threshold_time_ms(stream_config)
    variance = flush_threshold_variance_fraction(stream_config)
    initial_rows = flush_autotune_initial_rows(stream_config)
    if rows is not None and rows > 0:
        return DefaultFlushThresholdUpdater(rows)
    if segment_rows is not None and segment_rows > 0:
        return FixedFlushThresholdUpdater(segment_rows)
    if rows == 0 or (size is not None and size > 0):
        return SegmentSizeBasedFlushThresholdUpdater(
            desired_size_bytes=size or DEFAULT_FLUSH_THRESHOLD_SEGMENT_SIZE_BYTES,
            initial_rows=initial_rows,
            variance_fraction=variance,
            time_threshold_ms=time_ms,
        )
    return DefaultFlushThresholdUpdater(DEFAULT_FLUSH_THRESHOLD_ROWS)
