"""Pinot's period strings, as the controller's frequencyPeriod settings are read."""

from __future__ import annotations

import pytest

from tables.domain.periods import PERIODIC_TASKS, parse_period


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("5m", 300),
        ("1h", 3600),
        ("1d", 86_400),
        ("1h30m", 5400),
        ("2d3h4m5s", 2 * 86_400 + 3 * 3600 + 4 * 60 + 5),
        (" 10M ", 600),
        ("-1s", -1),
        ("0s", 0),
        ("45", 45),
        ("-5", -5),
        ("0", 0),
    ],
)
def test_periods_read_as_pinot_writes_them(text, seconds):
    assert parse_period(text) == seconds


@pytest.mark.parametrize("text", ["", "   "])
def test_an_empty_period_is_unset(text):
    assert parse_period(text) is None


@pytest.mark.parametrize("text", ["m", "5x", "1m1h", "1.5h", "5 m", "--1s", "1h-5m", "s5", "-"])
def test_anything_else_is_refused_with_the_accepted_forms(text):
    with pytest.raises(ValueError, match="is not a period: use days, hours, minutes and seconds"):
        parse_period(text)


def test_the_task_names_are_pinots():
    assert PERIODIC_TASKS == ("RealtimeSegmentValidationManager", "SegmentStatusChecker")
