"""A pauseless consumer's build hold, asked for before its segment ends.

A pauseless consumer's first segmentConsumed asks for the early commit start unless its build is
held (issue 23's back-off, `tables.server.build_holds`): a database read on the holds' own thread,
which used to sit between the segment's last row and that call (~2 ms, more on a busy host), on
the path of the partition's freshness. The read is now sent once the segment is near its end
criteria (`AHEAD_ROWS` of its rows, or `AHEAD_MS` of its time, left) and its answer used by the
first ask, when it is at most `FRESH_S` old; any later ask, or an older answer, reads again as
before.

Why an answer read up to a second early is as good: a hold on this segment is recorded only when
a build of it failed, so before this replica's first report only another replica can have
committed it, and that replica, once held, reports nothing more; the first report of a fresh
completion (this one) is answered HOLD until the other replicas report or the winner-picking time
passes, and every later ask reads the hold afresh.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tables.domain.build_backoff import Hold
from tables.domain.segment_states import EndCriteria

__all__ = ["HoldAhead"]

AHEAD_MS = 1000
AHEAD_ROWS = 0.05  # of the segment's row threshold (at least one row)
FRESH_S = 2.0

Answer = Callable[[], Hold | None]


class HoldAhead:
    """One consumer's; used by its thread only."""

    def __init__(
        self, ask: Callable[[], Answer], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ask = ask
        self.clock = clock
        self._asked: tuple[float, Answer] | None = None
        self._used = False

    def maybe_ask(self, criteria: EndCriteria, rows: int, now_ms: int) -> None:
        """Send the read once the segment is near its end (once)."""
        if self._used or self._asked is not None:
            return
        margin = max(1, int(criteria.threshold_rows * AHEAD_ROWS))
        if criteria.near(rows, now_ms, margin, AHEAD_MS):
            self._asked = (self.clock(), self._ask())

    def take(self) -> Answer | None:
        """The early answer for the first ask (None: none, too old, or taken already)."""
        asked, self._asked, self._used = self._asked, None, True
        if asked is None or self.clock() - asked[0] > FRESH_S:
            return None
        return asked[1]
