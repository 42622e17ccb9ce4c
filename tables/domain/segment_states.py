"""A server's segment states and the transitions between them (reference §1.6), pure.

Helix's `SegmentOnlineOfflineStateModel`: a replica starts OFFLINE and moves by single steps:
OFFLINE->CONSUMING, OFFLINE->ONLINE, CONSUMING->ONLINE, CONSUMING->OFFLINE, ONLINE->OFFLINE, and
OFFLINE/CONSUMING/ONLINE->DROPPED. ERROR is where a failed transition leaves a replica; it only
leaves ERROR by a reset (ERROR->OFFLINE), which an operator or the healing manager asks for, so
`next_step` never plans one. A segment that is no longer in the IdealState for this instance has
the target DROPPED.

`EndCriteria` decides when a consuming segment stops (§5.8, Pinot's `RealtimeSegmentDataManager`
end criteria): `rowLimit` once it holds the segment's `segment.flush.threshold.size` rows,
`timeLimit` once the consume end time (segment creation + `realtime.segment.flush.threshold.time`)
passed. A time limit reached with no rows does not end the segment: once a fetch found the
partition empty the window starts again, so an idle partition does not commit empty segments; a
consumer that has not fetched yet (a restarted server) fetches first, and ends at once with what
it got.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["ROW_LIMIT", "TIME_LIMIT", "EndCriteria", "SegmentState", "next_step"]

ROW_LIMIT = "rowLimit"
TIME_LIMIT = "timeLimit"
FORCE_COMMIT = "forceCommitMessageReceived"


class SegmentState(StrEnum):
    OFFLINE = "OFFLINE"
    CONSUMING = "CONSUMING"
    ONLINE = "ONLINE"
    DROPPED = "DROPPED"
    ERROR = "ERROR"


_ALLOWED = {
    (SegmentState.OFFLINE, SegmentState.CONSUMING),
    (SegmentState.OFFLINE, SegmentState.ONLINE),
    (SegmentState.CONSUMING, SegmentState.ONLINE),
    (SegmentState.CONSUMING, SegmentState.OFFLINE),
    (SegmentState.ONLINE, SegmentState.OFFLINE),
    (SegmentState.OFFLINE, SegmentState.DROPPED),
    (SegmentState.CONSUMING, SegmentState.DROPPED),
    (SegmentState.ONLINE, SegmentState.DROPPED),
}


def next_step(current: str | None, target: str | None) -> tuple[SegmentState, SegmentState] | None:
    """The one transition to run now to move `current` toward `target`, or None.

    `current` None is OFFLINE (Helix's initial state); `target` None is DROPPED. An unknown
    target state (not one of the model's) is treated as OFFLINE, as Helix does not route to it.
    """
    here = SegmentState(current) if current else SegmentState.OFFLINE
    try:
        goal = SegmentState(target) if target else SegmentState.DROPPED
    except ValueError:
        goal = SegmentState.OFFLINE
    if goal is SegmentState.ERROR:
        goal = SegmentState.OFFLINE
    if here is goal or here is SegmentState.ERROR:
        if here is SegmentState.ERROR and goal is SegmentState.DROPPED:
            return (here, goal)  # a dropped segment leaves ERROR with it
        return None
    if current is None and goal is SegmentState.DROPPED:
        return None  # never hosted: nothing to drop
    if (here, goal) in _ALLOWED:
        return (here, goal)
    # ONLINE -> CONSUMING goes through OFFLINE.
    return (here, SegmentState.OFFLINE)


@dataclass
class EndCriteria:
    """When a consuming segment stops. `consume_end_ms` moves when an empty window ends."""

    threshold_rows: int
    window_ms: int
    consume_end_ms: int

    @classmethod
    def for_segment(cls, threshold_rows: int, window_ms: int, creation_ms: int) -> EndCriteria:
        return cls(max(threshold_rows, 1), max(window_ms, 1), creation_ms + max(window_ms, 1))

    def reason(self, rows: int, now_ms: int, fetched: bool = True) -> str | None:
        """`rowLimit`, `timeLimit` or None (keep consuming). `fetched`: a fetch has been tried."""
        if rows >= self.threshold_rows:
            return ROW_LIMIT
        if now_ms >= self.consume_end_ms:
            if rows == 0 and not fetched:
                return None
            if rows == 0:
                while self.consume_end_ms <= now_ms:
                    self.consume_end_ms += self.window_ms
                return None
            return TIME_LIMIT
        return None

    def near(self, rows: int, now_ms: int, rows_margin: int, ms_margin: int) -> bool:
        """Whether the segment is within `rows_margin` rows of its row limit or `ms_margin` ms
        of its time limit (a hint for work worth doing before the end, never the end itself)."""
        rows_near = rows >= self.threshold_rows - rows_margin
        return rows_near or now_ms >= self.consume_end_ms - ms_margin

    def rows_wanted(self, rows: int) -> int:
        """How many more rows the segment takes before its row limit."""
        return max(self.threshold_rows - rows, 0)
