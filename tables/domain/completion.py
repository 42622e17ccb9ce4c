"""The lead controller's segment completion FSM (reference §5.2-§5.7), as a pure state machine.

One `SegmentCompletionFSM` exists per completing segment; it behaves like Pinot's
`BlockingSegmentCompletionFSM`, or `PauselessSegmentCompletionFSM` with `pauseless=True`.

Contract:
- Pure: no clock, no I/O. Every call takes `now_ms` (epoch ms); the FSM has no timers and is
  clocked only by the servers' calls. Side effects (ZK/IdealState commits, the stoppedConsuming
  handling, the abort meter) are requested through the owner's `CompletionActions`. An exception
  from an action never escapes: the commit actions turn into abort + FAILED, a failing
  `stopped_consuming` into FAILED (no abort), a failing `aborted` is ignored.
- Offsets are compared as ints and sent back as strings, as Pinot does with its offset objects.
- Not thread-safe. The owner holds one lock per FSM around every call (Pinot synchronizes on the
  FSM) and drops the FSM once `is_done` (COMMITTED or ABORTED); the next call re-creates it from ZK.
  Because of that lock COMMITTING is visible to other calls only while a commit action runs.
- The owner remembers `observed_commit_time_ms` per raw table after `segment_commit_start` and
  passes it to the next FSM of that table as `remembered_commit_time_ms`
  (see `initial_commit_time_ms`).
- `segment_commit_end` passes `location` through unchanged: moving the uploaded tmp file and
  replacing a `file:` location by the controller download URL belong to the commit action.
- `Status`, `Response` and the canned `RESP_*` responses live in `completion_response` and are
  re-exported here.

State diagram in words: a new FSM starts in HOLDING (PARTIAL_CONSUMING if its first message was a
stoppedConsuming, COMMITTED if ZK already says DONE/UPLOADED). The first segmentConsumed moves
PARTIAL_CONSUMING to HOLDING. HOLDING answers HOLD until a winner can be picked (§5.6, and
`first_alone`: a first report at the stream's latest offset wins at once); then the
reporter gets COMMIT (-> COMMITTER_NOTIFIED) if it won, else CATCH_UP (-> COMMITTER_DECIDED, and
the winner gets COMMIT on its next segmentConsumed). The notified winner's segmentCommitStart gives
COMMIT_CONTINUE (-> COMMITTER_UPLOADING); its segmentCommitEnd moves to COMMITTING while the
metadata is committed, then COMMITTED (COMMIT_SUCCESS). Late replicas then get KEEP or DISCARD. Any
inconsistency or missed deadline moves to ABORTED, which answers HOLD so that servers start over
with a fresh FSM.

Where the §5.4 rows live:
- segmentConsumed: PARTIAL_CONSUMING and HOLDING -> `_consumed_holding` (+ `_pick_winner`, §5.6);
  COMMITTER_DECIDED -> `_consumed_decided`; COMMITTER_NOTIFIED -> `_consumed_notified`;
  COMMITTER_UPLOADING/COMMITTING -> `_consumed_after_commit_start` (pauseless KEEP, §5.7);
  COMMITTED -> `_keep_or_discard`; ABORTED -> HOLD in `segment_consumed`.
- segmentCommitStart: excluded check, COMMITTED and ABORTED rows in `segment_commit_start`;
  COMMITTER_NOTIFIED -> `_commit_start_notified` (pauseless `commit_to_committing`, observed
  commit time); every other state -> `_hold_unless_too_late`.
- segmentCommitEnd -> `segment_commit_end`; stoppedConsuming -> `stopped_consuming`;
  extendBuildTime -> `extend_build_time` (state per mode, then `_extend`).

Early commit start (this project's extension, pauseless tables only): a segmentConsumed that
carries `start_commit` (the server is ready to commit and wants no second round trip) and makes
its caller the notified winner runs commit start's actions at once, exactly as the winner's
segmentCommitStart in COMMITTER_NOTIFIED would (-> COMMITTER_UPLOADING; a failure aborts and
answers FAILED), and answers COMMIT with `commit_started` set (a COMMIT without it, e.g. to a
winner re-asking in COMMITTER_NOTIFIED, started nothing). A winner's segmentCommitStart after
that, at the winning offset, is answered COMMIT_CONTINUE again with nothing done; this project's
servers do not send it. Without the flag, or
for a blocking table, the FSM is Pinot's.

Pinot quirks kept on purpose: a non-winner's commitStart in COMMITTER_NOTIFIED is accepted (commit
end refuses it); the winner reporting another offset in COMMITTER_NOTIFIED gets DISCARD and the FSM
goes ABORTED without counting an abort; rule 2 of §5.6 needs reports == replicas - excluded
(exactly); extendBuildTime checks neither instance nor offset and may move the deadline earlier;
a commit end after COMMITTED aborts the FSM (the owner has normally dropped it by then).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import replace
from enum import StrEnum
from types import MappingProxyType
from typing import Protocol

from tables.domain.completion_response import (
    RESP_COMMIT_CONTINUE,
    RESP_COMMIT_SUCCESS,
    RESP_DISCARD,
    RESP_FAILED,
    RESP_NOT_LEADER,
    RESP_NOT_SENT,
    RESP_PROCESSED,
    Response,
    Status,
)

__all__ = [
    "DEFAULT_COMMIT_TIMEOUT_MS",
    "DEFAULT_EXTRA_BUILD_TIME_SEC",
    "MAX_COMMIT_TIME_MS",
    "MAX_HOLD_TIME_MS",
    "MAX_TIME_TO_NOTIFY_WINNER_MS",
    "MAX_TIME_TO_PICK_WINNER_MS",
    "REASON_END_OF_PARTITION_GROUP",
    "REASON_FORCE_COMMIT",
    "REASON_INDEX_CAPACITY",
    "REASON_ROW_LIMIT",
    "REASON_TIME_LIMIT",
    "RESP_COMMIT_CONTINUE",
    "RESP_COMMIT_SUCCESS",
    "RESP_DISCARD",
    "RESP_FAILED",
    "RESP_NOT_LEADER",
    "RESP_NOT_SENT",
    "RESP_PROCESSED",
    "UNKNOWN_WINNER",
    "CompletionActions",
    "FsmState",
    "Response",
    "SegmentCompletionFSM",
    "Status",
    "initial_commit_time_ms",
]

# --- timers (§5.5) --------------------------------------------------------------------------------

MAX_HOLD_TIME_MS = 3000
# Winner picking waits one hold time plus 10 %, notifying the winner one more of those.
MAX_TIME_TO_PICK_WINNER_MS = MAX_HOLD_TIME_MS + MAX_HOLD_TIME_MS // 10  # 3300
MAX_TIME_TO_NOTIFY_WINNER_MS = (
    MAX_TIME_TO_PICK_WINNER_MS + MAX_HOLD_TIME_MS + MAX_HOLD_TIME_MS // 10
)  # 6600
DEFAULT_COMMIT_TIMEOUT_MS = 120_000  # realtime.segment.commit.timeoutSeconds default
MAX_COMMIT_TIME_MS = 1_800_000  # MAX_COMMIT_TIME_FOR_ALL_SEGMENTS_SECONDS
DEFAULT_EXTRA_BUILD_TIME_SEC = 120  # extendBuildTime with extraTimeSec <= 0

# --- stop reasons sent by servers (§5.1) ----------------------------------------------------------

REASON_ROW_LIMIT = "rowLimit"
REASON_TIME_LIMIT = "timeLimit"
REASON_END_OF_PARTITION_GROUP = "endOfPartitionGroup"
REASON_FORCE_COMMIT = "forceCommitMessageReceived"
REASON_INDEX_CAPACITY = "indexCapacityThresholdBreached"
_IMMEDIATE_WIN_REASONS = frozenset({REASON_ROW_LIMIT, REASON_END_OF_PARTITION_GROUP})

UNKNOWN_WINNER = "UNKNOWN"  # winner of an FSM created for an already committed segment
_COMPLETED_ZK_STATUSES = frozenset({"DONE", "UPLOADED"})


def initial_commit_time_ms(table_timeout_ms: int, remembered_ms: int | None = None) -> int:
    """Time from FSM start to the commit deadline (§5.5).

    The notify-winner time plus the table's commit timeout, or the commit time remembered for the
    table if that is larger, capped at `MAX_COMMIT_TIME_MS`.
    """
    initial = MAX_TIME_TO_NOTIFY_WINNER_MS + table_timeout_ms
    if remembered_ms is not None and remembered_ms > initial:
        initial = remembered_ms
    return min(initial, MAX_COMMIT_TIME_MS)


# --- the FSM (§5.4-§5.7) --------------------------------------------------------------------------


class FsmState(StrEnum):
    PARTIAL_CONSUMING = "PARTIAL_CONSUMING"  # a replica stopped consuming before anyone reported
    HOLDING = "HOLDING"  # collecting offsets until a winner can be picked
    COMMITTER_DECIDED = "COMMITTER_DECIDED"  # winner picked, not told yet
    COMMITTER_NOTIFIED = "COMMITTER_NOTIFIED"  # winner got COMMIT
    COMMITTER_UPLOADING = "COMMITTER_UPLOADING"  # winner got COMMIT_CONTINUE
    COMMITTING = "COMMITTING"  # commit end: metadata being committed
    COMMITTED = "COMMITTED"
    ABORTED = "ABORTED"


class CompletionActions(Protocol):
    """Side effects the FSM asks its owner for. Each may raise; the FSM handles it (§5.4)."""

    def commit_metadata(
        self, instance: str, offset: int, location: str, metadata: Mapping[str, str]
    ) -> None:
        """Blocking commit end: commitSegmentFile, then LLCM.commitSegmentMetadata (§6.2)."""

    def commit_to_committing(self, instance: str, offset: int) -> None:
        """Pauseless commit start: LLCM.commitSegmentMetadataToCommitting (§6.3)."""

    def commit_to_done(
        self, instance: str, offset: int, location: str, metadata: Mapping[str, str]
    ) -> None:
        """Pauseless commit end: commitSegmentFile, then commitSegmentMetadataToDone (§6.3)."""

    def stopped_consuming(self, instance: str, offset: int, reason: str | None) -> None:
        """LLCM.segmentStoppedConsuming: that replica CONSUMING -> OFFLINE, then reset."""

    def aborted(self) -> None:
        """Count one abort in meter `llcStateMachineAborts` of the raw table."""


_BEFORE_NOTIFY = frozenset(
    {FsmState.PARTIAL_CONSUMING, FsmState.HOLDING, FsmState.COMMITTER_DECIDED}
)
_AFTER_COMMIT_START = frozenset({FsmState.COMMITTER_UPLOADING, FsmState.COMMITTING})


class SegmentCompletionFSM:
    """Completion FSM of one segment; see the module docstring for the contract."""

    def __init__(
        self,
        segment_name: str,
        num_replicas: int,
        start_ms: int,
        actions: CompletionActions,
        *,
        pauseless: bool = False,
        zk_status: str = "IN_PROGRESS",
        zk_end_offset: int | None = None,
        commit_timeout_ms: int = DEFAULT_COMMIT_TIMEOUT_MS,
        remembered_commit_time_ms: int | None = None,
        first_message_is_stopped_consuming: bool = False,
        controller_vip_url: str | None = None,
    ) -> None:
        self.segment_name = segment_name
        self.num_replicas = num_replicas
        self.start_ms = start_ms
        self.pauseless = pauseless
        self._actions = actions
        self._controller_vip_url = controller_vip_url
        self._pick_deadline_ms = start_ms + MAX_TIME_TO_PICK_WINNER_MS
        self._notify_deadline_ms = start_ms + MAX_TIME_TO_NOTIFY_WINNER_MS
        self._initial_commit_time_ms = initial_commit_time_ms(
            commit_timeout_ms, remembered_commit_time_ms
        )
        self._commit_deadline_ms = start_ms + self._initial_commit_time_ms
        self._offsets: dict[str, int] = {}  # last offset reported per instance (commit-state map)
        self._excluded: set[str] = set()  # instances that sent stoppedConsuming
        self._winner: str | None = None
        self._winning_offset: int | None = None
        self._observed_commit_time_ms: int | None = None
        self._started_early = False  # commit start ran inside the winner's segmentConsumed
        if zk_status in _COMPLETED_ZK_STATUSES:
            if zk_end_offset is None:
                raise ValueError(f"{segment_name} is {zk_status} but has no end offset")
            self._state = FsmState.COMMITTED
            self._winner, self._winning_offset = UNKNOWN_WINNER, zk_end_offset
        elif first_message_is_stopped_consuming:
            self._state = FsmState.PARTIAL_CONSUMING
        else:
            # IN_PROGRESS, and also COMMITTING (pauseless leftovers are repaired by validation).
            self._state = FsmState.HOLDING

    def __repr__(self) -> str:
        return (
            f"SegmentCompletionFSM({self.segment_name}, {self._state}, start={self.start_ms}, "
            f"winner={self._winner}, winningOffset={self._winning_offset})"
        )

    # --- read-only view ---------------------------------------------------------------------------

    @property
    def state(self) -> FsmState:
        return self._state

    @property
    def winner(self) -> str | None:
        return self._winner

    @property
    def winning_offset(self) -> int | None:
        return self._winning_offset

    @property
    def is_done(self) -> bool:
        return self._state in (FsmState.COMMITTED, FsmState.ABORTED)

    @property
    def commit_deadline_ms(self) -> int:
        return self._commit_deadline_ms

    @property
    def initial_commit_time_ms(self) -> int:
        return self._initial_commit_time_ms

    @property
    def observed_commit_time_ms(self) -> int | None:
        """Start-to-commitStart time, set only when it exceeded the initial commit time."""
        return self._observed_commit_time_ms

    @property
    def reported_offsets(self) -> Mapping[str, int]:
        return MappingProxyType(self._offsets)

    @property
    def excluded_instances(self) -> frozenset[str]:
        return frozenset(self._excluded)

    # --- segmentConsumed --------------------------------------------------------------------------

    def segment_consumed(
        self,
        instance: str,
        offset: int,
        reason: str | None,
        now_ms: int,
        start_commit: bool = False,
        at_stream_end: bool = False,
    ) -> Response:
        """`start_commit`: the early commit start of the module docstring. `at_stream_end`: the
        caller's offset is the partition's latest (read just now), see `first_alone`."""
        self._excluded.discard(instance)  # a restarted server may come back
        self._offsets[instance] = offset
        state = self._state
        response: Response
        if state in (FsmState.PARTIAL_CONSUMING, FsmState.HOLDING):
            self._state = FsmState.HOLDING
            response = self._consumed_holding(instance, offset, reason, now_ms, at_stream_end)
        elif state is FsmState.COMMITTER_DECIDED:
            response = self._consumed_decided(instance, offset, now_ms)
        else:
            return self._consumed_later(instance, offset, now_ms)
        if start_commit and self.pauseless and self._state is FsmState.COMMITTER_NOTIFIED:
            started = self._commit_start_notified(instance, offset, now_ms)
            if started.status is not Status.COMMIT_CONTINUE:
                return started
            self._started_early = True
            return replace(response, commit_started=True)
        return response

    def _consumed_later(self, instance: str, offset: int, now_ms: int) -> Response:
        state = self._state
        if state is FsmState.COMMITTER_NOTIFIED:
            return self._consumed_notified(instance, offset, now_ms)
        if state in _AFTER_COMMIT_START:
            return self._consumed_after_commit_start(instance, offset, now_ms)
        if state is FsmState.COMMITTED:
            return self._keep_or_discard(offset)
        return self._hold(offset)  # ABORTED

    def first_alone(self, instance: str) -> bool:
        """Whether a segmentConsumed of `instance` now would be the first report of a winner not
        picked yet (HOLDING, nobody else reported). Such a report at the partition's latest
        offset wins at once (`at_stream_end`): no replica can have consumed past the end of the
        stream, so waiting for the others (and telling this one HOLD, to ask again later) cannot
        find a better committer. A pause or a force commit of an idle table commits that way."""
        holding = self._state in (FsmState.PARTIAL_CONSUMING, FsmState.HOLDING)
        return holding and not (set(self._offsets) - {instance})

    def _consumed_holding(
        self, instance: str, offset: int, reason: str | None, now_ms: int, at_end: bool = False
    ) -> Response:
        if not self._pick_winner(instance, reason, now_ms, at_end):
            return self._hold(offset)
        if instance == self._winner:
            self._state = FsmState.COMMITTER_NOTIFIED
            return self._commit(offset)
        self._state = FsmState.COMMITTER_DECIDED
        return self._catch_up()

    def _pick_winner(
        self, instance: str, reason: str | None, now_ms: int, at_end: bool = False
    ) -> bool:
        """§5.6; `instance` is the reporter, already in the commit-state map. `at_end`: its
        offset is the stream's latest (`first_alone`)."""
        if (reason in _IMMEDIATE_WIN_REASONS or at_end) and len(self._offsets) == 1:
            self._winner, self._winning_offset = instance, self._offsets[instance]
            return True
        expected = self.num_replicas - len(self._excluded)
        if now_ms <= self._pick_deadline_ms and len(self._offsets) != expected:
            return False
        best = max(self._offsets.values())
        if self._offsets[instance] == best:
            self._winner = instance  # ties go to the reporter
        else:
            self._winner = next(name for name, got in self._offsets.items() if got == best)
        self._winning_offset = best
        return True

    def _consumed_decided(self, instance: str, offset: int, now_ms: int) -> Response:
        winning = self._winning_offset
        if offset > winning:
            return self._abort_hold(offset)
        if instance == self._winner and offset != winning:
            return self._abort_hold(offset)  # the winner came back with another offset
        if now_ms > self._notify_deadline_ms:
            return self._abort_hold(offset)  # the winner did not come back in time
        if instance == self._winner:
            self._state = FsmState.COMMITTER_NOTIFIED
            return self._commit(offset)
        return self._hold_chosen(offset) if offset == winning else self._catch_up()

    def _consumed_notified(self, instance: str, offset: int, now_ms: int) -> Response:
        if self._too_late(now_ms):
            return self._abort_hold(offset)
        if instance == self._winner:
            if offset == self._winning_offset:
                return self._commit(offset)  # it missed our COMMIT; send it again
            # Pinot moves to ABORTED here without counting an abort.
            self._state = FsmState.ABORTED
            return RESP_DISCARD
        return self._catch_up() if offset < self._winning_offset else self._hold_chosen(offset)

    def _consumed_after_commit_start(self, instance: str, offset: int, now_ms: int) -> Response:
        if self._too_late(now_ms) or instance == self._winner:
            return self._abort_hold(offset)
        if offset == self._winning_offset:
            # Pauseless: the next segment already exists, so the replica may build its own copy.
            return self._keep(offset) if self.pauseless else self._hold_chosen(offset)
        return self._catch_up() if offset < self._winning_offset else self._hold_chosen(offset)

    # --- segmentCommitStart -----------------------------------------------------------------------

    def segment_commit_start(self, instance: str, offset: int, now_ms: int) -> Response:
        if instance in self._excluded:
            return RESP_FAILED
        state = self._state
        if (
            state is FsmState.COMMITTER_UPLOADING
            and self._started_early
            and instance == self._winner
            and offset == self._winning_offset
        ):
            return RESP_COMMIT_CONTINUE  # started by its segmentConsumed already
        if state is FsmState.COMMITTER_NOTIFIED:
            return self._commit_start_notified(instance, offset, now_ms)
        if state is FsmState.COMMITTED:
            return self._keep_or_discard(offset)
        if state is FsmState.ABORTED:
            return self._hold(offset)
        return self._hold_unless_too_late(offset, now_ms)  # _BEFORE_NOTIFY, _AFTER_COMMIT_START

    def _commit_start_notified(self, instance: str, offset: int, now_ms: int) -> Response:
        if self._too_late(now_ms):
            return self._abort_hold(offset)
        if instance == self._winner and offset != self._winning_offset:
            return self._abort_hold(offset)
        # A non-winner is not refused here (as in Pinot); commit end will refuse it.
        if self.pauseless:
            try:
                self._actions.commit_to_committing(instance, offset)
            except Exception:
                return self._abort_failed()
        self._state = FsmState.COMMITTER_UPLOADING
        elapsed = now_ms - self.start_ms
        if elapsed > self._initial_commit_time_ms:
            self._observed_commit_time_ms = elapsed
        return RESP_COMMIT_CONTINUE

    # --- segmentCommitEnd -------------------------------------------------------------------------

    def segment_commit_end(
        self,
        instance: str,
        offset: int,
        location: str,
        metadata: Mapping[str, str],
        now_ms: int,
    ) -> Response:
        # now_ms is unused (Pinot has no deadline check here) but kept for a uniform call shape.
        if instance in self._excluded:
            return self._abort_failed()
        if (
            self._state is not FsmState.COMMITTER_UPLOADING
            or instance != self._winner
            or offset != self._winning_offset
        ):
            return self._abort_failed()
        self._state = FsmState.COMMITTING
        commit = self._actions.commit_to_done if self.pauseless else self._actions.commit_metadata
        try:
            commit(instance, offset, location, metadata)
        except Exception:
            return self._abort_failed()
        self._state = FsmState.COMMITTED
        return RESP_COMMIT_SUCCESS

    # --- stoppedConsuming -------------------------------------------------------------------------

    def stopped_consuming(
        self, instance: str, offset: int, reason: str | None, now_ms: int
    ) -> Response:
        self._excluded.add(instance)
        if self._state is FsmState.ABORTED:
            return RESP_PROCESSED
        try:
            self._actions.stopped_consuming(instance, offset, reason)
        except Exception:
            return RESP_FAILED  # no abort: the FSM itself is still consistent
        return RESP_PROCESSED

    # --- extendBuildTime --------------------------------------------------------------------------

    def extend_build_time(
        self, instance: str, offset: int, extra_time_sec: int, now_ms: int
    ) -> Response:
        # Blocking servers build before commitStart, pauseless ones after it (§5.7).
        building = FsmState.COMMITTER_UPLOADING if self.pauseless else FsmState.COMMITTER_NOTIFIED
        if self._state is not building:
            return RESP_FAILED
        return self._extend(offset, extra_time_sec, now_ms)

    def _extend(self, offset: int, extra_time_sec: int, now_ms: int) -> Response:
        if self._too_late(now_ms):
            return self._abort_hold(offset)
        if extra_time_sec <= 0:
            extra_time_sec = DEFAULT_EXTRA_BUILD_TIME_SEC
        deadline = now_ms + extra_time_sec * 1000
        if deadline > self.start_ms + MAX_COMMIT_TIME_MS:
            return self._abort_failed()
        self._commit_deadline_ms = deadline  # may also move it earlier, as in Pinot
        return RESP_PROCESSED

    # --- helpers ----------------------------------------------------------------------------------

    def _too_late(self, now_ms: int) -> bool:
        return now_ms > self._commit_deadline_ms

    def _hold_unless_too_late(self, offset: int, now_ms: int) -> Response:
        return self._abort_hold(offset) if self._too_late(now_ms) else self._hold(offset)

    def _keep_or_discard(self, offset: int) -> Response:
        return self._keep(offset) if offset == self._winning_offset else RESP_DISCARD

    def _abort(self) -> None:
        self._state = FsmState.ABORTED
        with contextlib.suppress(Exception):
            self._actions.aborted()

    def _abort_hold(self, offset: int) -> Response:
        self._abort()
        return self._hold(offset)

    def _abort_failed(self) -> Response:
        self._abort()
        return RESP_FAILED

    @staticmethod
    def _hold(offset: int) -> Response:
        return Response(Status.HOLD, str(offset))

    @staticmethod
    def _hold_chosen(offset: int) -> Response:
        """HOLD for a replica that is not the chosen committer (`committerChosen`)."""
        return Response(Status.HOLD, str(offset), committer_chosen=True)

    @staticmethod
    def _keep(offset: int) -> Response:
        return Response(Status.KEEP, str(offset))

    def _catch_up(self) -> Response:
        return Response(Status.CATCH_UP, str(self._winning_offset))

    def _commit(self, offset: int) -> Response:
        return Response(
            Status.COMMIT,
            str(offset),
            build_time_sec=(self._commit_deadline_ms - self.start_ms) // 1000,
            controller_vip_url=self._controller_vip_url,
        )
