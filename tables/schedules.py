"""Beat schedules with an initial delay, as Pinot schedules its controller periodic tasks.

Pinot starts each periodic task `initialDelayInSeconds` after the controller starts, then runs it
every `frequencyPeriod` (`PeriodicTaskScheduler`). `DelayedSchedule(run_every, initial_delay_s)`
does the same in Celery beat: built when beat loads its settings (so the delay counts from beat's
start), it is not due before `initial_delay_s` has passed; then it runs once at once, whatever the
entry's last run before this beat started (beat keeps those in its schedule file), and every
`run_every` after. Beat pickles entries into its schedule file: the start time travels with it, so
a reload within the same beat process keeps counting from the same start, and a new beat process
(which rebuilds the entry from settings) starts counting again.

Imported by `console.settings`: Celery only, nothing of Django.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from celery.schedules import schedstate, schedule

__all__ = ["DelayedSchedule"]


class DelayedSchedule(schedule):
    """Every `run_every` seconds, the first time `initial_delay_s` after beat started."""

    def __init__(
        self,
        run_every: float | timedelta,
        initial_delay_s: float = 0.0,
        not_before: float | None = None,
        nowfun: Callable[[], datetime] | None = None,
        app: Any = None,
    ) -> None:
        super().__init__(run_every, nowfun=nowfun, app=app)
        self.initial_delay_s = float(initial_delay_s)
        if not_before is None:
            started = nowfun().timestamp() if nowfun else time.time()
            not_before = started + self.initial_delay_s
        self.not_before = float(not_before)  # epoch seconds

    def is_due(self, last_run_at: datetime) -> schedstate:
        now = self.maybe_make_aware(self.now()).timestamp()
        if now < self.not_before:
            return schedstate(is_due=False, next=self.not_before - now)
        if self.maybe_make_aware(last_run_at).timestamp() < self.not_before:
            return schedstate(is_due=True, next=self.seconds)  # the first run since beat started
        return super().is_due(last_run_at)

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return self.__class__, (self.run_every, self.initial_delay_s, self.not_before, self.nowfun)

    def __repr__(self) -> str:
        return f"<freq: {self.human_seconds}, not before {self.not_before:.0f}>"
