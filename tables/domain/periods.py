"""Pinot's period strings and the controller's periodic tasks (pure).

- `parse_period(text)` reads a period as Pinot's controller config does
  (`controller.realtime.segment.validation.frequencyPeriod`, `controller.statuschecker.*Period`,
  `TimeUtils.convertPeriodToMillis`): days, hours, minutes and seconds, each optional but in that
  order, e.g. "30s", "5m", "1h", "1d", "1h30m"; a leading "-" makes it negative ("-1s" is Pinot's
  "off"). A bare integer is seconds. Returns whole seconds; an empty string is None (unset).
  Anything else raises `ValueError` naming the accepted forms.
- `PERIODIC_TASKS`: the names of the controller periodic tasks this project runs (Pinot's names,
  what `GET /periodictask/names` lists), and the durable counter names of Pinot's meters
  `controllerPeriodicTaskRun` / `controllerPeriodicTaskError`, which are keyed by task name.
"""

from __future__ import annotations

import re

__all__ = [
    "PERIODIC_TASKS",
    "REALTIME_SEGMENT_VALIDATION",
    "SEGMENT_STATUS_CHECKER",
    "TASK_ERROR_COUNTER",
    "TASK_RUN_COUNTER",
    "parse_period",
]

REALTIME_SEGMENT_VALIDATION = "RealtimeSegmentValidationManager"
SEGMENT_STATUS_CHECKER = "SegmentStatusChecker"
PERIODIC_TASKS: tuple[str, ...] = (REALTIME_SEGMENT_VALIDATION, SEGMENT_STATUS_CHECKER)
TASK_RUN_COUNTER = "controllerPeriodicTaskRun"
TASK_ERROR_COUNTER = "controllerPeriodicTaskError"

_UNITS = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))
_PERIOD = re.compile(r"(-)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", re.IGNORECASE)


def parse_period(text: str) -> int | None:
    """Seconds in a Pinot period string ("30s", "5m", "1h30m", "-1s"), or a bare integer of
    seconds; None for an empty string. Raises ValueError for anything else."""
    value = text.strip()
    if not value:
        return None
    if re.fullmatch(r"-?\d+", value):
        return int(value)
    match = _PERIOD.fullmatch(value)
    if match is None or not any(match.groups()[1:]):
        raise ValueError(
            f"{text!r} is not a period: use days, hours, minutes and seconds in that order, "
            'e.g. "30s", "5m", "1h", "1d", "1h30m" (a leading "-" for negative)'
        )
    sign, *amounts = match.groups()
    seconds = sum(int(n) * size for n, (_, size) in zip(amounts, _UNITS, strict=True) if n)
    return -seconds if sign else seconds
