"""A server's startup status: Pinot's ServiceStatus callbacks behind `GET /health/readiness`.

Contract (pure: the caller reads the cluster and passes `now_ms`):
- `StartupStatus.at_startup` fixes, from the IdealStates seen once the server is registered, the
  resources (tables) that name this instance and the segments it is to be CONSUMING, as Pinot's
  server does when it registers its service status handler.
- `evaluate` returns None once the server is GOOD, else the reason it is STARTING. It is GOOD
  when both checks below pass; once GOOD it stays GOOD (Pinot does not re-check after startup).
  - IdealState match (Pinot's `IdealStateAndCurrentStateMatchServiceStatusCallback` and
    `...ExternalViewMatch...`): in each monitored table, every segment the current IdealState gives
    this instance in a state other than OFFLINE has that state in the server's CURRENTSTATES and in
    the EXTERNALVIEW, ERROR counting as matched (it was tried). A table whose IdealState is gone
    counts as matched; one not read yet does not. A matched table is not checked again.
  - Consumption catch-up (`RealtimeConsumptionCatchupServiceStatusCallback` with the
    `OffsetBasedConsumptionStatusChecker`): until `catchup_wait_ms` after startup
    (`pinot.server.starter.realtimeConsumptionCatchupWaitMs`), each startup CONSUMING segment's
    partition must have consumed up to the stream's latest offset seen when its consumer started.
    A partition this server no longer consumes counts as caught up; a caught-up one is not
    checked again. With `offset_checker` off it waits out `catchup_wait_ms` (Pinot's static wait);
    a wait of 0 turns the catch-up check off, as in Pinot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["Consumption", "Snapshot", "StartupStatus", "assigned_states", "state_mismatch"]

OFFLINE, CONSUMING, ERROR = "OFFLINE", "CONSUMING", "ERROR"


def assigned_states(map_fields: Mapping[str, Mapping[str, str]], instance: str) -> dict[str, str]:
    """segment -> the state the IdealState's map fields give `instance` (segments naming it)."""
    return {seg: states[instance] for seg, states in map_fields.items() if instance in states}


def state_mismatch(expected: Mapping[str, str], found: Mapping[str, str]) -> str | None:
    """The first segment expected in a state other than OFFLINE that `found` does not have (ERROR
    counts as matched), as Pinot describes it, or None when all match."""
    for segment, state in sorted(expected.items()):
        actual = found.get(segment)
        if state != OFFLINE and actual != state and actual != ERROR:
            return f"partition={segment}, expected={state}, found={actual}"
    return None


@dataclass(frozen=True)
class Consumption:
    """A startup CONSUMING segment's partition on this server now."""

    consuming: bool  # a consumer of the partition runs here (the segment or a successor)
    current_offset: int | None = None  # that consumer's next offset
    target_offset: int | None = None  # the stream's latest offset when the first one started


@dataclass(frozen=True)
class Snapshot:
    """What the server sees now, for the tables and segments still being checked."""

    ideal: Mapping[str, Mapping[str, str] | None]  # table -> assigned states; None: table gone
    current: Mapping[str, Mapping[str, str]]  # table -> segment -> CURRENTSTATES state
    external: Mapping[str, Mapping[str, str]]  # table -> segment -> EXTERNALVIEW state
    consumption: Mapping[tuple[str, str], Consumption]  # (table, segment) -> its partition


@dataclass
class StartupStatus:
    resources: set[str]
    consuming: set[tuple[str, str]]
    catchup_end_ms: int
    offset_checker: bool = True
    good: bool = False
    last_reason: str | None = field(default="Init")

    @classmethod
    def at_startup(
        cls,
        ideal_states: Mapping[str, Mapping[str, Mapping[str, str]]],
        instance: str,
        now_ms: int,
        catchup_wait_ms: int,
        offset_checker: bool = True,
    ) -> StartupStatus:
        """`ideal_states`: table -> the map fields of its IdealState."""
        resources, consuming = set(), set()
        for table, map_fields in ideal_states.items():
            states = assigned_states(map_fields, instance)
            if states:
                resources.add(table)
            if catchup_wait_ms > 0:
                consuming |= {(table, s) for s, state in states.items() if state == CONSUMING}
        return cls(resources, consuming, now_ms + catchup_wait_ms, offset_checker)

    def evaluate(self, snapshot: Snapshot, now_ms: int) -> str | None:
        if not self.good:
            reason = self._ideal_state_match(snapshot) or self._catch_up(snapshot, now_ms)
            self.good, self.last_reason = reason is None, reason
        return self.last_reason

    def _ideal_state_match(self, snapshot: Snapshot) -> str | None:
        for table in sorted(self.resources):
            if table not in snapshot.ideal:
                return f"IdealState of {table} not read yet"
            expected = snapshot.ideal[table]
            if expected is not None:
                for match, found in (
                    ("CurrentStateMatch", snapshot.current.get(table, {})),
                    ("ExternalViewMatch", snapshot.external.get(table, {})),
                ):
                    problem = state_mismatch(expected, found)
                    if problem is not None:
                        return f"{problem}, waitingFor={match}, resource={table}"
            self.resources.discard(table)
        return None

    def _catch_up(self, snapshot: Snapshot, now_ms: int) -> str | None:
        if not self.consuming or now_ms >= self.catchup_end_ms:
            self.consuming.clear()
            return None
        remaining = self.catchup_end_ms - now_ms
        if self.offset_checker:
            for key in list(self.consuming):
                if _caught_up(snapshot.consumption.get(key)):
                    self.consuming.discard(key)
            if not self.consuming:
                return None
        else:  # Pinot's static wait: no offsets are compared, so none are named
            return f"Waiting for consuming segments to catchup, timeRemaining={remaining}ms"
        found = snapshot.consumption
        behind = ", ".join(_describe(key, found.get(key)) for key in sorted(self.consuming))
        return (
            f"Waiting for consuming segments to catch up ({len(self.consuming)} behind: "
            f"{behind}), timeRemaining={remaining}ms"
        )

    def pending(self) -> Iterable[str]:
        """The tables still being checked (for the snapshot's reads)."""
        return sorted(self.resources | {table for table, _ in self.consuming})


def _caught_up(consumption: Consumption | None) -> bool:
    if consumption is None:
        return False
    if not consumption.consuming:
        return True
    current, target = consumption.current_offset, consumption.target_offset
    return current is not None and target is not None and current >= target


def _describe(key: tuple[str, str], consumption: Consumption | None) -> str:
    segment = key[1]
    if consumption is None or consumption.current_offset is None:
        return f"{segment} not started"
    target = "unknown" if consumption.target_offset is None else consumption.target_offset
    return f"{segment} at {consumption.current_offset} of {target}"
