"""The value types of a consumer (`tables.server.consumer`, which re-exports them): what a
consuming segment is, the per-partition figures that outlive segments, and the phases."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

__all__ = ["ConsumingSegment", "PartitionStats", "Phase"]


class Phase(StrEnum):
    CONSUMING = "CONSUMING"
    HOLDING = "HOLDING"
    CATCHING_UP = "CATCHING_UP"
    COMMITTING = "COMMITTING"
    COMMITTED = "COMMITTED"
    KEPT = "KEPT"
    DISCARDED = "DISCARDED"
    STOPPED = "STOPPED"
    ERROR = "ERROR"


@dataclass(frozen=True)
class ConsumingSegment:
    table: str  # with type
    segment: str
    topic: str
    partition: int
    start_offset: int
    threshold_rows: int
    window_ms: int
    creation_ms: int
    pauseless: bool = False  # the table's pauselessConsumptionEnabled when the consumer started


@dataclass
class PartitionStats:
    """Per (table, partition) figures for /metrics and consumingSegmentsInfo; they outlive
    segments (`rows_consumed` is Pinot's meter: counted over the process's life)."""

    table: str
    topic: str
    partition: int
    rows_consumed: int = 0
    consuming: bool = False
    current_offset: int | None = None
    latest_offset: int | None = None
    last_message_ms: int | None = None  # stream (producer) time of the last consumed message
    last_consumed_ms: int | None = None  # wall time of the last fetch that returned rows
    lost_offsets: int = 0
    segment: str = ""  # the segment whose consumer reports here now
    latest_checked: float = field(default=-1e9, repr=False)

    def offset_lag(self, current: int | None = None) -> int:
        """Latest upstream offset minus `current` (default: the partition's next offset)."""
        current = self.current_offset if current is None else current
        if self.latest_offset is None or current is None:
            return 0
        return max(self.latest_offset - current, 0)

    def delay_ms(self, now_ms: int, current: int | None = None) -> int:
        """Now minus the stream time of the last consumed message; 0 when caught up."""
        if self.offset_lag(current) == 0 or self.last_message_ms is None:
            return 0
        return max(now_ms - self.last_message_ms, 0)
