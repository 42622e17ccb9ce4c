"""Beat's schedule of the controller periodic tasks: Pinot's initial delay, then every period; the
settings that make it (Pinot period strings, off when empty or <= 0)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from tables.schedules import DelayedSchedule

START = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


def test_nothing_runs_before_the_initial_delay_then_the_first_run_is_at_once():
    clock = Clock()
    schedule = DelayedSchedule(300, initial_delay_s=60, nowfun=clock)
    last_run = START - timedelta(seconds=10)  # what beat's schedule file says from before
    clock.now = START + timedelta(seconds=45)
    due, wait = schedule.is_due(last_run)
    assert (due, wait) == (False, 15)
    clock.now = START + timedelta(seconds=60)
    assert schedule.is_due(last_run) == (True, 300)


def test_after_the_first_run_it_runs_every_period():
    clock = Clock()
    schedule = DelayedSchedule(300, initial_delay_s=60, nowfun=clock)
    first = START + timedelta(seconds=61)
    clock.now = first + timedelta(seconds=299)
    due, wait = schedule.is_due(first)
    assert not due
    assert wait == pytest.approx(1)
    clock.now = first + timedelta(seconds=300)
    assert schedule.is_due(first)[0]


def test_without_a_delay_the_first_run_is_at_once():
    clock = Clock()
    schedule = DelayedSchedule(300, nowfun=clock)
    assert schedule.is_due(START - timedelta(seconds=1))[0]


def test_beats_schedule_file_keeps_the_start():
    clock = Clock()
    schedule = DelayedSchedule(timedelta(minutes=5), initial_delay_s=60, nowfun=None)
    again = pickle.loads(pickle.dumps(schedule))
    assert again.not_before == schedule.not_before
    assert again.run_every == timedelta(minutes=5)
    assert again.initial_delay_s == 60
    assert DelayedSchedule(60, 0, not_before=5.0, nowfun=clock).not_before == 5.0


def _schedule_with(env: dict[str, str]) -> subprocess.CompletedProcess:
    code = (
        "import json, console.settings as s; "
        "print(json.dumps({k: [v['task'], v['options']['expires'], repr(v['schedule'])] "
        "for k, v in s.CELERY_BEAT_SCHEDULE.items()}))"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "SECRET_KEY": "x" * 50, **env},
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_settings_schedule_both_tasks_with_pinot_periods():
    done = _schedule_with(
        {
            "REALTIME_SEGMENT_VALIDATION_FREQUENCY_PERIOD": "2m",
            "REALTIME_SEGMENT_VALIDATION_INITIAL_DELAY_SECONDS": "90",
            "STATUS_CHECKER_FREQUENCY_PERIOD": "30s",
        }
    )
    assert done.returncode == 0, done.stderr
    entries = json.loads(done.stdout)
    task, expires, shown = entries["realtime-segment-validation"]
    assert (task, expires) == ("tables.realtime_segment_validation", 120)
    assert "not before" in shown
    assert entries["segment-status-checker"][:2] == ["tables.segment_status_checker", 30]


@pytest.mark.parametrize("period", ["", "0", "-1s"])
def test_an_empty_or_non_positive_period_takes_a_task_off_the_schedule(period):
    done = _schedule_with(
        {
            "REALTIME_SEGMENT_VALIDATION_FREQUENCY_PERIOD": period,
            "STATUS_CHECKER_FREQUENCY_PERIOD": period,
        }
    )
    assert done.returncode == 0, done.stderr
    entries = json.loads(done.stdout)
    assert "realtime-segment-validation" not in entries
    assert "segment-status-checker" not in entries


def test_a_bad_period_is_refused_at_start_with_the_setting_named():
    done = _schedule_with({"STATUS_CHECKER_FREQUENCY_PERIOD": "5 minutes"})
    assert done.returncode != 0
    assert "STATUS_CHECKER_FREQUENCY_PERIOD: '5 minutes' is not a period" in done.stderr
