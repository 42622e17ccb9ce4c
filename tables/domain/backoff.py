"""Capped exponential back-off and rate-limited repeats, for every retry loop in the project.

Pure: nothing here sleeps or logs. A loop asks `Backoff.next_delay()` how long to wait after a
failure and calls `reset()` after a success; `LogThrottle.allow(key, now)` tells whether a
repeated message may be written now, and how many repeats were held back since the last one, so
that an outage produces one line per cause per interval instead of one per attempt.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Backoff", "LogThrottle"]


@dataclass
class Backoff:
    """Delays `first`, `first * factor`, ... capped at `cap` seconds; `reset()` starts over."""

    first: float = 0.5
    cap: float = 10.0
    factor: float = 2.0
    failures: int = 0

    def __post_init__(self) -> None:
        if self.first <= 0 or self.cap < self.first or self.factor < 1:
            raise ValueError(
                f"back-off needs 0 < first <= cap and factor >= 1 "
                f"(first={self.first}, cap={self.cap}, factor={self.factor})"
            )

    def next_delay(self) -> float:
        """The wait after one more failure."""
        exponent = min(self.failures, 64)  # far past any cap; keeps the float finite
        self.failures += 1
        return min(self.first * self.factor**exponent, self.cap)

    def reset(self) -> None:
        self.failures = 0


@dataclass
class LogThrottle:
    """At most one message per key every `every_s` seconds."""

    every_s: float = 60.0
    _last: dict[str, float] = field(default_factory=dict)
    _held: dict[str, int] = field(default_factory=dict)

    def allow(self, key: str, now: float) -> tuple[bool, int]:
        """(write it now?, repeats held back since the last one written for `key`)."""
        last = self._last.get(key)
        if last is not None and now - last < self.every_s:
            self._held[key] = self._held.get(key, 0) + 1
            return False, 0
        self._last[key] = now
        return True, self._held.pop(key, 0)

    def clear(self, key: str) -> None:
        """The condition ended: the next occurrence is written at once."""
        self._last.pop(key, None)
        self._held.pop(key, None)
