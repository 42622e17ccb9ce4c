"""Flush threshold parsing, updater choice and every autotune branch (reference §6.6)."""

from __future__ import annotations

import pytest

from tables.domain.flush import (
    DEFAULT_FLUSH_THRESHOLD_TIME_MS,
    FLUSH_AUTOTUNE_INITIAL_ROWS,
    FLUSH_THRESHOLD_ROWS,
    FLUSH_THRESHOLD_SEGMENT_ROWS,
    FLUSH_THRESHOLD_SEGMENT_SIZE,
    FLUSH_THRESHOLD_TIME,
    FLUSH_THRESHOLD_VARIANCE_FRACTION,
    CommittedSegmentStats,
    DefaultFlushThresholdUpdater,
    FixedFlushThresholdUpdater,
    SegmentSizeBasedFlushThresholdUpdater,
    flush_settings,
    flush_threshold_time_ms,
    make_updater,
    parse_period_ms,
    parse_size_bytes,
)

MIB = 1024 * 1024
HOUR_MS = 3_600_000
DESIRED = 200 * MIB
CREATED = 1_714_563_060_123


def _stats(rows: int, size: int, threshold: int, **extra: object) -> CommittedSegmentStats:
    return CommittedSegmentStats(
        total_docs=rows, size_bytes=size, creation_time_ms=CREATED, threshold=threshold, **extra
    )


def _learned(
    rows: int, size: int, threshold: int, consumed_ms: int = HOUR_MS, **kwargs: object
) -> SegmentSizeBasedFlushThresholdUpdater:
    updater = SegmentSizeBasedFlushThresholdUpdater(**kwargs)
    updater.on_segment_commit(_stats(rows, size, threshold), CREATED + consumed_ms)
    return updater


# --- parsing --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("6h", 6 * HOUR_MS),
        ("30m", 1_800_000),
        ("10s", 10_000),
        ("1d", 86_400_000),
        ("1h30m", 5_400_000),
        ("2d3h4m5s", ((2 * 24 + 3) * 60 + 4) * 60_000 + 5_000),
        ("6H", 6 * HOUR_MS),
        ("90m", 5_400_000),
        ("21600000", 21_600_000),
        ("0", 0),
    ],
)
def test_it_parses_periods(text, ms):
    assert parse_period_ms(text) == ms


@pytest.mark.parametrize("text", ["", "6x", "30m1h", "1.5h", "-5", "h", " 6h", "6 h"])
def test_it_refuses_bad_periods(text):
    with pytest.raises(ValueError, match="invalid time period"):
        parse_period_ms(text)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("500", 500),
        ("500B", 500),
        ("100K", 100 * 1024),
        ("200M", 200 * MIB),
        ("200MB", 200 * MIB),
        ("200m", 200 * MIB),
        ("1G", 1024 * MIB),
        ("1.5G", 1536 * MIB),
        ("2T", 2 * 1024**4),
    ],
)
def test_it_parses_data_sizes(text, size):
    assert parse_size_bytes(text) == size


@pytest.mark.parametrize("text", ["", "M", "-1M", "1.M", "200 M", "200X", "1e3"])
def test_it_refuses_bad_data_sizes(text):
    with pytest.raises(ValueError, match="invalid data size"):
        parse_size_bytes(text)


def test_it_reads_the_flush_time_with_its_default_and_legacy_key():
    assert flush_threshold_time_ms({}) == DEFAULT_FLUSH_THRESHOLD_TIME_MS == 6 * HOUR_MS
    assert flush_threshold_time_ms({FLUSH_THRESHOLD_TIME: "30m"}) == 1_800_000
    assert flush_threshold_time_ms({"realtime.segment.flush.threshold.time.llc": "1h"}) == HOUR_MS
    with pytest.raises(ValueError, match=FLUSH_THRESHOLD_TIME):
        flush_threshold_time_ms({FLUSH_THRESHOLD_TIME: "soon"})
    with pytest.raises(ValueError, match="negative"):
        flush_threshold_time_ms({FLUSH_THRESHOLD_TIME: "-5"})


# --- updater choice -------------------------------------------------------------------------------


def test_it_divides_a_positive_table_row_budget():
    updater = make_updater({FLUSH_THRESHOLD_ROWS: "1000000", FLUSH_THRESHOLD_SEGMENT_ROWS: "7"})
    assert updater == DefaultFlushThresholdUpdater(1_000_000)
    assert updater.threshold_for_new_segment(3, None) == 333_333
    for legacy in (
        "realtime.segment.flush.threshold.size",
        "realtime.segment.flush.threshold.size.llc",
    ):
        assert make_updater({legacy: "500"}) == DefaultFlushThresholdUpdater(500)


def test_it_uses_fixed_segment_rows_next():
    updater = make_updater(
        {FLUSH_THRESHOLD_SEGMENT_ROWS: "123456", FLUSH_THRESHOLD_SEGMENT_SIZE: "1G"}
    )
    assert updater == FixedFlushThresholdUpdater(123456)
    assert updater.threshold_for_new_segment(4, None) == 123456


def test_it_autotunes_for_zero_rows_or_a_segment_size():
    zero_rows = make_updater({FLUSH_THRESHOLD_ROWS: "0"})
    assert isinstance(zero_rows, SegmentSizeBasedFlushThresholdUpdater)
    assert zero_rows.desired_size_bytes == DESIRED
    sized = make_updater(
        {
            FLUSH_THRESHOLD_SEGMENT_SIZE: "100M",
            FLUSH_THRESHOLD_TIME: "2h",
            FLUSH_THRESHOLD_VARIANCE_FRACTION: "0.25",
            FLUSH_AUTOTUNE_INITIAL_ROWS: "50000",
        }
    )
    assert isinstance(sized, SegmentSizeBasedFlushThresholdUpdater)
    assert sized.desired_size_bytes == 100 * MIB
    assert sized.time_threshold_ms == 2 * HOUR_MS
    assert sized.variance_fraction == 0.25
    assert sized.threshold_for_new_segment(1, None) == 50_000
    legacy = make_updater({"realtime.segment.flush.desired.size": "50M"})
    assert legacy.desired_size_bytes == 50 * MIB


def test_it_defaults_to_five_million_rows():
    assert make_updater({}) == DefaultFlushThresholdUpdater(5_000_000)
    assert make_updater({FLUSH_THRESHOLD_SEGMENT_SIZE: "0"}) == DefaultFlushThresholdUpdater(
        5_000_000
    )
    assert make_updater({}).threshold_for_new_segment(4, None) == 1_250_000


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (FLUSH_THRESHOLD_ROWS, "-1"),
        (FLUSH_THRESHOLD_ROWS, "lots"),
        (FLUSH_THRESHOLD_ROWS, "3000000000"),
        ("realtime.segment.flush.threshold.size", "-5"),
        (FLUSH_THRESHOLD_SEGMENT_ROWS, "-10"),
        (FLUSH_THRESHOLD_SEGMENT_SIZE, "-200M"),
        (FLUSH_THRESHOLD_SEGMENT_SIZE, "big"),
        (FLUSH_THRESHOLD_TIME, "-1h"),
        (FLUSH_THRESHOLD_VARIANCE_FRACTION, "0.6"),
        (FLUSH_THRESHOLD_VARIANCE_FRACTION, "-0.1"),
        (FLUSH_THRESHOLD_VARIANCE_FRACTION, "nan"),
        (FLUSH_AUTOTUNE_INITIAL_ROWS, "-1"),
    ],
)
def test_it_names_the_key_of_a_bad_value(key, value):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        make_updater({key: value})


def test_it_refuses_a_bad_variance_fraction_in_the_constructor():
    with pytest.raises(ValueError):
        SegmentSizeBasedFlushThresholdUpdater(variance_fraction=0.51)
    SegmentSizeBasedFlushThresholdUpdater(variance_fraction=0.5)


def test_the_non_learning_updaters_ignore_commits():
    for updater in (DefaultFlushThresholdUpdater(900), FixedFlushThresholdUpdater(42)):
        before = updater.threshold_for_new_segment(2, None)
        updater.on_segment_commit(_stats(10, 10, 10), CREATED)
        assert updater.threshold_for_new_segment(2, _stats(10, 10, 10)) == before


# --- autotune -------------------------------------------------------------------------------------


def test_it_starts_with_the_initial_rows():
    assert SegmentSizeBasedFlushThresholdUpdater().threshold_for_new_segment(1, None) == 100_000
    updater = SegmentSizeBasedFlushThresholdUpdater(initial_rows=20_000)
    assert updater.threshold_for_new_segment(1, None) == 20_000


def test_it_carries_the_previous_threshold_until_a_ratio_is_learned():
    updater = SegmentSizeBasedFlushThresholdUpdater()
    # A force-committed segment teaches nothing, but its threshold is remembered.
    updater.on_segment_commit(_stats(300_000, 80 * MIB, 250_000, force_commit=True), CREATED)
    assert updater.rows_to_size_ratio == 0.0
    assert updater.threshold_for_new_segment(1, None) == 250_000
    # So does a segment without size (pauseless COMMITTING).
    empty = SegmentSizeBasedFlushThresholdUpdater()
    empty.on_segment_commit(_stats(0, 0, 175_000), CREATED)
    assert empty.threshold_for_new_segment(1, None) == 175_000
    # A fresh updater (e.g. after failover) falls back to the committing segment's threshold.
    fresh = SegmentSizeBasedFlushThresholdUpdater()
    assert fresh.threshold_for_new_segment(1, _stats(1, 1, 123_000)) == 123_000


def test_it_keeps_its_ratio_through_a_force_commit():
    updater = _learned(500_000, 150 * MIB, 500_000)
    before = updater.threshold_for_new_segment(1, None)
    updater.on_segment_commit(_stats(10, 1, 99, force_commit=True), CREATED)
    assert updater.threshold_for_new_segment(1, None) == before


def test_it_aims_at_the_desired_size_when_the_last_segment_was_about_right():
    updater = _learned(500_000, 150 * MIB, 500_000)
    assert updater.rows_to_size_ratio == 500_000 / (150 * MIB)
    # 200 MiB * (500,000 rows / 150 MiB) = 666,666.67 rows.
    assert updater.threshold_for_new_segment(1, None) == 666_666


def test_it_smooths_the_ratio_over_commits():
    updater = _learned(500_000, 150 * MIB, 500_000)
    first = 500_000 / (150 * MIB)
    updater.on_segment_commit(_stats(600_000, 150 * MIB, 600_000), CREATED + HOUR_MS)
    second = 600_000 / (150 * MIB)
    assert updater.rows_to_size_ratio == 0.1 * second + 0.9 * first
    assert updater.threshold_for_new_segment(1, None) == 680_000


def test_it_grows_by_half_when_the_last_segment_was_too_small():
    updater = _learned(500_000, 50 * MIB, 500_000)  # < desired / 2
    assert updater.threshold_for_new_segment(1, None) == 750_000


def test_it_halves_when_the_last_segment_was_too_big():
    updater = _learned(500_000, 400 * MIB, 500_000)  # > 1.5 * desired
    assert updater.threshold_for_new_segment(1, None) == 250_000


def test_it_bumps_rows_by_ten_percent_after_the_time_limit():
    # Fewer rows than the threshold and smaller than desired: the segment stopped on time.
    updater = _learned(300_000, 100 * MIB, 500_000, consumed_ms=6 * HOUR_MS)
    assert updater.threshold_for_new_segment(1, None) == 330_000


def test_it_scales_rows_down_when_the_time_limit_was_lowered():
    updater = _learned(
        300_000, 100 * MIB, 500_000, consumed_ms=6 * HOUR_MS, time_threshold_ms=3 * HOUR_MS
    )
    # 3h * 300,000 / 6h = 150,000 rows, then * 1.1.
    assert updater.threshold_for_new_segment(1, None) == 165_000


@pytest.mark.parametrize(("draw", "expected"), [(0.0, 533_332), (0.5, 666_666), (0.75, 733_332)])
def test_it_applies_the_variance_factor_from_the_injected_rng(draw, expected):
    updater = _learned(500_000, 150 * MIB, 500_000, variance_fraction=0.2, rng=lambda: draw)
    # factor = (1 - 0.2) + 2 * 0.2 * draw, applied to 666,666 rows.
    assert updater.threshold_for_new_segment(1, None) == expected


def test_it_does_not_apply_variance_after_the_time_limit():
    updater = _learned(
        300_000, 100 * MIB, 500_000, consumed_ms=6 * HOUR_MS, variance_fraction=0.5, rng=lambda: 0.0
    )
    assert updater.threshold_for_new_segment(1, None) == 330_000


def test_it_never_goes_below_ten_thousand_rows():
    updater = _learned(5_000, 1 * MIB, 5_000)  # too small: 7,500 rows
    assert updater.threshold_for_new_segment(1, None) == 10_000
    timed = _learned(1_000, 1 * MIB, 50_000)  # time limit: 1,100 rows
    assert timed.threshold_for_new_segment(1, None) == 10_000


def test_it_caps_at_integer_max_value():
    updater = _learned(2_000_000_000, 1_000, 2_000_000_000)  # too small: 3e9 rows
    assert updater.threshold_for_new_segment(1, None) == 2**31 - 1


def test_it_learns_from_pre_commit_rows_after_compaction():
    stats = _stats(400_000, 100 * MIB, 500_000, pre_commit_rows=500_000)
    assert stats.rows == 500_000
    assert stats.size_for_ratio == 125 * MIB  # 100 MiB scaled by 500,000 / 400,000
    updater = SegmentSizeBasedFlushThresholdUpdater()
    updater.on_segment_commit(stats, CREATED + HOUR_MS)
    assert updater.rows_to_size_ratio == 500_000 / (125 * MIB)
    # Fewer pre-commit rows than docs: the post-commit numbers are used.
    plain = _stats(400_000, 100 * MIB, 500_000, pre_commit_rows=300_000)
    assert (plain.rows, plain.size_for_ratio) == (400_000, 100 * MIB)
    no_docs = _stats(0, 100 * MIB, 500_000, pre_commit_rows=300_000)
    assert (no_docs.rows, no_docs.size_for_ratio) == (300_000, 100 * MIB)


def test_flush_settings_compare_parsed_values() -> None:
    autotune = {FLUSH_THRESHOLD_ROWS: "0", FLUSH_THRESHOLD_SEGMENT_SIZE: "200M"}
    base = flush_settings({**autotune, FLUSH_THRESHOLD_TIME: "1h"})
    # the same thresholds spelled otherwise, or unrelated keys: the same settings
    assert flush_settings({**autotune, FLUSH_THRESHOLD_TIME: "60m"}) == base
    assert flush_settings({**autotune, FLUSH_THRESHOLD_TIME: str(HOUR_MS), "x": "y"}) == base
    # any threshold that shapes the updater: other settings
    for key, value in [
        (FLUSH_THRESHOLD_ROWS, "1000"),
        (FLUSH_THRESHOLD_SEGMENT_ROWS, "1000"),
        (FLUSH_THRESHOLD_SEGMENT_SIZE, "100M"),
        (FLUSH_THRESHOLD_TIME, "2h"),
        (FLUSH_THRESHOLD_VARIANCE_FRACTION, "0.1"),
        (FLUSH_AUTOTUNE_INITIAL_ROWS, "5000"),
    ]:
        changed = {**autotune, FLUSH_THRESHOLD_TIME: "1h", key: value}
        assert flush_settings(changed) != base, key
