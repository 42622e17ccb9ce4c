"""One consuming segment on one server: consume, stop at the end criteria, complete (§5.2, §5.8).

Contract:
- Rows are read from the segment's start offset and kept in memory as (offset, message bytes),
  exactly as the stream returned them: the Spark build decodes them per the schema (bad values
  nulled, never dropped), so a committed segment and a re-ingested one are built from the same
  bytes. The consumer never holds a row outside `[start_offset, next_offset)`. Offsets are kept in
  an `array`, the bytes as one tuple per fetch (CPython's garbage collector stops tracking a tuple
  of bytes, so its full collections never walk the rows a consumer holds: with 400k rows of ~3.7 KB
  held, each walk took ~0.1 s); `pairs()` gives them back as (offset, bytes).
- After a failed commit it waits 2, 4, 8... up to 30 s before asking again, unless the commit
  callable's `build_hold(spec)` (the committer's: `tables.server.committer`) names a hold on the
  segment's build (a deterministic build failure backing off, issue 23): then it stays HOLDING,
  with `hold_reason` saying why and until when, and asks the controller nothing until the hold
  ends, is cleared or the table config changes (asked again every `BUILD_HOLD_RECHECK_S`).
- At the end criteria (`tables.domain.segment_states.EndCriteria`, or a force commit) it runs the
  completion protocol: HOLD / NOT_SENT / NOT_LEADER / FAILED -> ask again after `hold_s` (<= 3 s),
  doubled for every further HOLD in a row up to `MAX_HOLD_S` (Pinot's MAX_HOLD_TIME_MS, 3 s, which
  the controller's FSM allows for): a replica waiting out someone else's commit asks a few times,
  not every `hold_s` (64 partitions pausing at once made ~130 such calls a second), and going
  ONLINE still ends the wait at once; a HOLD that says another replica is the chosen committer
  (`committerChosen`) waits `MAX_HOLD_S` at once (a 64-partition pause asked ~150 times in 2 s
  while the 64 committers built);
  CATCH_UP -> consume exactly up to the given offset and ask again, giving up after `catch_up_s`
  (default: the FSM's notify-winner time plus the default commit timeout, past which the
  controller's FSM has aborted anyway) and asking again from where it got; a CATCH_UP to an offset
  it already has is a HOLD; COMMIT -> the committer builds
  and commits (a failed commit goes back to asking); KEEP, DISCARD, COMMIT_SUCCESS -> done: the rows
  are dropped and the segment's ONLINE transition fetches the committed copy.
- A consumer of a pauseless table (`ConsumingSegment.pauseless`, the table config's
  `pauselessConsumptionEnabled` when the consumer started) hands COMMIT to the committer the same
  way; the committer then asks for commit start first (`tables.server.committer`). Its
  segmentConsumed asks for the early commit start (`startCommit=true`, `early_start`) unless its
  build is held (for the first ask, the hold was read ahead: `tables.server.hold_ahead`): a
  COMMIT answer that says `commit_started` then means the controller has run commit start
  already (the next segment is in the IdealState), and the committer sends none.
- `finish()` (the replica went ONLINE: somebody committed) stops consuming or holding and ends,
  KEEP when its offset is the committed end offset (`committed_end`: the segment's ZK metadata,
  as Pinot's goOnlineFromConsuming compares), else DISCARD; only when that is not known (not
  DONE yet: a pauseless commit) it asks the controller once more, which answers the same. A
  commit in progress is let finish: in pauseless mode the replica goes ONLINE right after commit
  start, while its own committer still builds (`wait(..., online_ends=False)`).
- `stop()` ends the thread at its next wait or fetch (at most ~`fetch_timeout_ms`), reporting
  nothing: the replica's IdealState change (ONLINE/OFFLINE/DROPPED) is what stops a consumer.
- A stream that cannot be read for now (`StreamUnavailable`: Redis stalled or restarting) is
  retried with capped exponential back-off (0.2 s doubling to `FETCH_BACKOFF_CAP_S`), one warning
  per `FETCH_LOG_EVERY_S`; it is never reported as a consumer error. What waiting cannot fix (a
  deleted topic) and anything unexpected end the segment in ERROR, then send
  `segmentStoppedConsuming` with a reason naming the cause (`stopped_reason`, also kept in the
  consumer's `stopped_reason` for the live state), so the controller can hand the partition on.
  It is sent again until the controller answers PROCESSED (after 0.5 s, doubling up to
  `STOPPED_RETRY_CAP_S`, Pinot's fixed retry interval), or the replica is stopped or goes ONLINE:
  a controller restarting, or not leading yet, must not leave the replica CONSUMING in the
  IdealState, where no repair would find it.
- A fetch that reports `data_loss` (the stream dropped offsets at or after `next_offset` before
  they were read) counts the lost offsets in the partition's `lost_offsets` and records the exact
  range `[next_offset, first available)` in `lost_ranges` (this segment's only, ascending,
  adjacent ones merged); the committer declares them at commit end.
- Fault injection (tests only, `tables.faults`): before each fetch the points
  `server.<instance_id>.<segment>.consumer_fails` (this consumer only),
  `server.<instance_id>.consumer_fails` and `server.any.consumer_fails` are tripped; a trip raises
  `InjectedConsumerFailure`, which takes the failure path above. While the file
  `server.<instance_id>.consumer_holds` exists (`faults.held`), no consumer of that server fetches:
  a backlog stays unread for as long as a test needs (readiness during catch-up).
- `latest_at_start` is the stream's latest offset read right after the thread's first fetch
  (None when the stream could not be read then), the target of the server's readiness catch-up
  check. Read after, not before: at a commit the next segment's first rows are what its
  partition's freshness waits for, and this read is only for readiness.
- When the thread ends, a consumer that read rows logs one INFO line (`CONSUMED_LINE`): the
  segment, the offsets it held `[start, next)`, and the wall-clock stamps (epoch ms) of its first
  and last fetch that returned rows. `bench/freshness.py` measures the gap at a commit from them;
  an operator reads how long a segment took to fill.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from array import array
from collections.abc import Callable, Iterator

from tables import faults
from tables.domain.backoff import Backoff, LogThrottle
from tables.domain.build_backoff import Hold
from tables.domain.completion import DEFAULT_COMMIT_TIMEOUT_MS, MAX_TIME_TO_NOTIFY_WINNER_MS
from tables.domain.completion_response import Response, Status
from tables.domain.segment_states import FORCE_COMMIT, EndCriteria
from tables.streams.base import StreamError, StreamProvider, TopicNotFound

from .consumer_types import ConsumingSegment, PartitionStats, Phase
from .hold_ahead import HoldAhead
from .protocol import CompletionClient

__all__ = [
    "ConsumingSegment",
    "InjectedConsumerFailure",
    "PartitionStats",
    "Phase",
    "SegmentConsumer",
    "stopped_reason",
]

log = logging.getLogger(__name__)

MAX_HOLD_S = 3.0
# Longest a CATCH_UP is followed before asking again: by then the FSM that answered it has
# aborted or committed (its commit deadline is the notify time plus the commit timeout).
CATCH_UP_S = (MAX_TIME_TO_NOTIFY_WINNER_MS + DEFAULT_COMMIT_TIMEOUT_MS) / 1000
FETCH_BACKOFF_CAP_S = 5.0
FETCH_LOG_EVERY_S = 60.0
BUILD_HOLD_RECHECK_S = 5.0  # a held build's consumer looks for a cleared record this often
HELD_POLL_S = 0.1  # how often a consumer held by fault injection looks again
STOPPED_RETRY_FIRST_S = 0.5  # segmentStoppedConsuming not PROCESSED: sent again after this...
STOPPED_RETRY_CAP_S = 10.0  # ... doubling up to Pinot's interval (postStopConsumedMsg)
_RETRY_ASK = {Status.HOLD, Status.NOT_SENT, Status.NOT_LEADER, Status.FAILED}
_DONE = {Status.KEEP: "KEPT", Status.DISCARD: "DISCARDED", Status.COMMIT_SUCCESS: "COMMITTED"}
# segment, start offset, next offset, rows, first and last fetch with rows (epoch ms), end phase
CONSUMED_LINE = "%s: consumed offsets [%d, %d) (%d rows): rows fetched from %d to %d ms, ended %s"


_UNFINISHED = {Phase.CONSUMING, Phase.HOLDING, Phase.CATCHING_UP, Phase.COMMITTING}


class InjectedConsumerFailure(Exception):
    """A consumer failure asked for by a fault-injection file (`tables.faults`): permanent."""


def stopped_reason(exc: BaseException) -> str:
    """The `reason` of segmentStoppedConsuming for a consumer that failed with `exc`."""
    if isinstance(exc, TopicNotFound):
        return f"topicNotFound: {exc}"
    return f"consumerError: {type(exc).__name__}: {exc}"


class SegmentConsumer:
    """Runs in its own thread; see the module contract."""

    catch_up_s: float = CATCH_UP_S  # per instance, before start(): the CATCH_UP deadline

    def __init__(
        self,
        spec: ConsumingSegment,
        provider: StreamProvider,
        client: CompletionClient,
        commit: Callable[[SegmentConsumer, Response], bool],
        stats: PartitionStats,
        clock: Callable[[], float] = time.time,
        hold_s: float = 1.0,
        fetch_batch: int = 2000,
        fetch_timeout_ms: int = 200,
        instance_id: str = "",
        committed_end: Callable[[], int | None] | None = None,
    ) -> None:
        """`committed_end`: the end offset of the segment as committed (its ZK metadata, DONE),
        None when not (yet) known: going ONLINE, the consumer then answers itself KEEP or DISCARD
        (module docstring)."""
        self.spec = spec
        self._committed_end = committed_end
        self.instance_id = instance_id  # names the fault-injection point of this server
        self._fail_points = (
            f"server.{instance_id}.{spec.segment}.consumer_fails",
            f"server.{instance_id}.consumer_fails",
            "server.any.consumer_fails",
        )
        self._hold_point = f"server.{instance_id}.consumer_holds"
        self.provider = provider
        self.client = client
        self._commit = commit
        self.stats = stats
        self.clock = clock
        self.hold_s = min(hold_s, MAX_HOLD_S)
        self.fetch_batch = fetch_batch
        self.fetch_timeout_ms = fetch_timeout_ms
        self.criteria = EndCriteria.for_segment(
            spec.threshold_rows, spec.window_ms, spec.creation_ms
        )
        self._phase = Phase.CONSUMING
        self.next_offset = spec.start_offset
        self.end_reason: str | None = None
        self.offsets = array("q")
        self._chunks: list[tuple[bytes, ...]] = []  # the rows' bytes, one tuple per fetch
        self.first_fetch = threading.Event()  # set once a fetch returned (the hand-off waits)
        self.first_rows_ms: int | None = None  # wall time of the first fetch that returned rows
        self.last_rows_ms: int | None = None  # ... and of the latest one
        self.error: str | None = None  # why the consumer failed, for /debug and the logs
        self.stopped_reason: str | None = None  # the reason sent with segmentStoppedConsuming
        self.hold_reason: str | None = None  # why a HOLDING consumer does not ask (build back-off)
        self.early_start = False  # the last segmentConsumed asked for the early commit start
        soon = getattr(commit, "build_hold_soon", None) if spec.pauseless else None
        self._hold_ahead = None if soon is None else HoldAhead(lambda: soon(spec))
        self.lost_ranges: list[tuple[int, int]] = []  # [start, end) the stream dropped unread
        self.latest_at_start: int | None = None  # the stream's latest offset at the first fetch
        self._latest_read = False
        self._fetch_backoff = Backoff(first=0.2, cap=FETCH_BACKOFF_CAP_S)
        self._fetch_log = LogThrottle(every_s=FETCH_LOG_EVERY_S)
        self._online = threading.Event()
        self._wakeup = threading.Event()  # set by stop() and finish(): ends a hold wait early
        self._stop = threading.Event()
        self._force = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"consume-{spec.segment}")
        self._thread.daemon = True

    # --- control ------------------------------------------------------------------------------
    def start(self) -> None:
        self.stats.segment = self.spec.segment
        self.stats.consuming = True
        self.stats.current_offset = self.next_offset
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wakeup.set()
        self._wake_fetch()

    def finish(self) -> None:
        """The replica went ONLINE: stop consuming, answer KEEP or DISCARD (module docstring) and
        end. A commit in progress is let finish."""
        self._online.set()
        self._wakeup.set()
        self._wake_fetch()

    def end_online(self, join_s: float, poll_s: float = 0.25) -> bool:
        """The replica goes ONLINE: `finish()`, then wait up to `join_s` for the thread to end
        (stopped after that). False, with the thread left running, as soon as it is seen
        committing: the caller asks again later (a pauseless commit may build for minutes)."""
        self.finish()
        deadline = time.monotonic() + join_s
        while not self.join(min(poll_s, max(deadline - time.monotonic(), 0.0))):
            if self.phase is Phase.COMMITTING:
                return False
            if time.monotonic() >= deadline:
                self.stop()
                self.join(join_s)
                break
        return True

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def force_commit(self, wake: bool = True) -> None:
        """End consumption now and commit. `wake=False`: the caller wakes the fetch itself (many
        consumers of one provider at once: `StreamProvider.wake_many`)."""
        self._force.set()
        if wake:
            self._wake_fetch()

    def _wake_fetch(self) -> None:
        """A fetch waiting for rows returns now, not at its timeout (`StreamProvider.wake`)."""
        with contextlib.suppress(Exception):  # best effort: the fetch's timeout still ends it
            self.provider.wake(self.spec.partition)

    @property
    def phase(self) -> Phase:
        return self._phase

    @phase.setter
    def phase(self, phase: Phase) -> None:
        self._phase = phase
        if self.stats.segment == self.spec.segment:  # a newer segment of the partition owns it
            self.stats.consuming = phase in (Phase.CONSUMING, Phase.CATCHING_UP)

    @property
    def rows(self) -> int:
        return len(self.offsets)

    @property
    def is_consuming(self) -> bool:
        return self.phase in (Phase.CONSUMING, Phase.CATCHING_UP)

    @property
    def failed(self) -> bool:
        return self.phase in (Phase.ERROR, Phase.STOPPED)

    @property
    def finished(self) -> bool:
        return not self._thread.is_alive() and self._thread.ident is not None

    def pairs(self) -> Iterator[tuple[int, bytes]]:
        return zip(self.offsets, itertools.chain.from_iterable(self._chunks), strict=True)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # --- the thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            reason = self._consume(until=None)
            self._read_latest_at_start()  # when it ended before a first fetch
            if reason is not None or self._online.is_set():
                self.end_reason = reason
                self._complete(reason)
        except Exception as exc:
            log.exception("%s: consumer failed", self.spec.segment)
            self.error = f"{type(exc).__name__}: {exc}"
            reason = self.stopped_reason = stopped_reason(exc)
            self.phase = Phase.ERROR  # after the reason: whoever sees ERROR can read why
            self._report_stopped(reason)
        finally:
            ended = self._stop.is_set() or self._online.is_set()
            if ended and self.phase in _UNFINISHED:
                self.phase = Phase.STOPPED
            if self.stats.segment == self.spec.segment:
                self.stats.consuming = False
            self._log_consumed()
            self.offsets = array("q")
            self._chunks = []

    def _report_stopped(self, reason: str) -> None:
        """segmentStoppedConsuming until PROCESSED, stopped or ONLINE (module contract)."""
        backoff = Backoff(first=STOPPED_RETRY_FIRST_S, cap=STOPPED_RETRY_CAP_S)
        while True:
            response = self.client.segment_stopped_consuming(
                self.spec.table, self.spec.segment, self.next_offset, reason
            )
            if response.status == Status.PROCESSED:
                return
            delay = backoff.next_delay()
            log.warning(
                "%s: segmentStoppedConsuming answered %s; sending it again in %.1f s",
                self.spec.segment,
                response.status,
                delay,
            )
            if self.wait(delay):
                return

    def _log_consumed(self) -> None:
        if self.first_rows_ms is None or self.last_rows_ms is None:
            return
        log.info(
            CONSUMED_LINE,
            self.spec.segment,
            self.spec.start_offset,
            self.next_offset,
            self.rows,
            self.first_rows_ms,
            self.last_rows_ms,
            self.phase,
        )

    def _consume(self, until: int | None, deadline: float | None = None) -> str | None:
        """Read until the end criteria (`until` None) or up to offset `until`; returns the end
        reason ("catchUp" once at `until`, "catchUpTimeout" past the `time.monotonic()`
        `deadline`), or None when stopped or the replica went ONLINE."""
        while not self._stop.is_set() and not self._online.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                return "catchUpTimeout"
            if until is None:
                if self._force.is_set():
                    return FORCE_COMMIT
                reason = self.criteria.reason(self.rows, self.now_ms(), self.first_fetch.is_set())
                if reason is not None:
                    return reason
                if self._hold_ahead is not None:
                    self._hold_ahead.maybe_ask(self.criteria, self.rows, self.now_ms())
                wanted = min(self.fetch_batch, self.criteria.rows_wanted(self.rows))
            else:
                if self.next_offset >= until:
                    return "catchUp"
                wanted = min(self.fetch_batch, until - self.next_offset)
            self._fetch(wanted)
            self._read_latest_at_start()
        return None

    def _read_latest_at_start(self) -> None:
        """Once: `latest_at_start`. Best effort, readiness only (an unreadable stream shows up
        at the fetches)."""
        if self._latest_read:
            return
        self._latest_read = True
        with contextlib.suppress(Exception):
            self.latest_at_start = self.provider.latest_offset(self.spec.partition)

    def _refresh_latest(self) -> None:
        """The partition's latest offset, read at most once a second, also while not fetching
        (holding, committing), so lag figures stay live."""
        stats = self.stats
        if stats.segment != self.spec.segment or time.monotonic() - stats.latest_checked < 1.0:
            return
        stats.latest_checked = time.monotonic()
        with contextlib.suppress(StreamError):  # the next fetch reports the stream's trouble
            latest = self.provider.latest_offset(self.spec.partition)
            stats.latest_offset = max(latest, self.next_offset)

    def _inject_failure(self) -> None:
        for point in self._fail_points:
            if faults.trip(point):
                raise InjectedConsumerFailure(f"fault injection: {point}")

    def _record_loss(self, first_available: int) -> None:
        start, end = self.next_offset, first_available
        if end <= start:
            return
        self.stats.lost_offsets += end - start
        if self.lost_ranges and self.lost_ranges[-1][1] == start:
            start = self.lost_ranges.pop()[0]
        self.lost_ranges.append((start, end))
        log.error(
            "%s: offsets %d..%d were gone from the stream (data loss)",
            self.spec.segment,
            self.next_offset,
            end - 1,
        )

    def _fetch(self, wanted: int) -> None:
        stats, partition = self.stats, self.spec.partition
        self._inject_failure()
        if faults.held(self._hold_point):
            self._refresh_latest()  # a held consumer still reports the stream moving on
            self._stop.wait(HELD_POLL_S)
            return
        try:
            batch = self.provider.fetch(partition, self.next_offset, wanted, self.fetch_timeout_ms)
        except TopicNotFound:
            raise  # permanent: the consumer stops and says why (segmentStoppedConsuming)
        except StreamError as exc:  # StreamUnavailable and the like: wait it out
            delay = self._fetch_backoff.next_delay()
            write, held = self._fetch_log.allow(type(exc).__name__, time.monotonic())
            if write:
                log.warning(
                    "%s: stream not readable (%s); retrying in %.1f s (%d similar held back)",
                    self.spec.segment,
                    exc,
                    delay,
                    held,
                )
            self._stop.wait(delay)
            return
        if self._fetch_backoff.failures:
            log.info("%s: stream readable again", self.spec.segment)
            self._fetch_backoff.reset()
            self._fetch_log = LogThrottle(every_s=FETCH_LOG_EVERY_S)
        if not self.first_fetch.is_set():
            self.first_fetch.set()
        if batch.data_loss:
            self._record_loss(batch.first_available_offset)
        count = len(batch)
        if count:  # whole columns at once: no per-row work here (`MessageBatch.of_columns`)
            self.offsets.extend(batch.offsets)
            self._chunks.append(tuple(batch.values))
            stats.rows_consumed += count
            stats.last_message_ms = batch.timestamps[-1]
            stats.last_consumed_ms = self.last_rows_ms = self.now_ms()
            if self.first_rows_ms is None:
                self.first_rows_ms = self.last_rows_ms
        self.next_offset = batch.next_offset
        if stats.segment == self.spec.segment:
            stats.current_offset = self.next_offset
            if stats.latest_offset is not None and stats.latest_offset < self.next_offset:
                stats.latest_offset = self.next_offset
        self._refresh_latest()

    def _complete(self, reason: str | None) -> None:
        spec = self.spec
        self.phase = Phase.HOLDING
        failed_commits = holds = 0
        while not self._stop.is_set():
            self._refresh_latest()
            online = self._online.is_set()
            if online and (local := self._committed_answer()) is not None:
                status = local  # Pinot's goOnlineFromConsuming: no call to the controller
                log.info("%s: %s at offset %d", spec.segment, status, self.next_offset)
                self.phase = Phase(_DONE[status])
                return
            self.early_start = not online and self._may_start_early()
            response = self.client.segment_consumed(
                spec.table, spec.segment, self.next_offset, reason, self.rows, self.early_start
            )
            status = response.status
            holds = holds + 1 if status is Status.HOLD else 0
            target = None
            if status is Status.CATCH_UP and response.offset is not None:
                target = int(response.offset)  # at or below our offset: a HOLD
            if target is not None and target > self.next_offset and not online:
                self.phase = Phase.CATCHING_UP
                deadline = time.monotonic() + self.catch_up_s
                if self._consume(until=target, deadline=deadline) == "catchUpTimeout":
                    log.warning(
                        "%s: CATCH_UP to %d not reached within %.0f s (at %d); asking again",
                        spec.segment,
                        target,
                        self.catch_up_s,
                        self.next_offset,
                    )
                self.phase = Phase.HOLDING
                continue
            if status is Status.COMMIT and not online:
                log.info(
                    "%s: COMMIT at offset %d (%d rows)", spec.segment, self.next_offset, self.rows
                )
                self.phase = Phase.COMMITTING
                if self._commit(self, response):
                    self.phase = Phase.COMMITTED
                    return
                self.phase = Phase.HOLDING
                failed_commits += 1
                if self._wait_build_hold():
                    continue
                # A build that keeps failing must not spin: back off up to 30 s between commits.
                self._wakeup.wait(min(2.0**failed_commits, 30.0))
                self._wakeup.clear()
                continue
            if status in _DONE:
                log.info("%s: %s at offset %d", spec.segment, status, self.next_offset)
                self.phase = Phase(_DONE[status])
                return
            if status not in _RETRY_ASK and status is not Status.CATCH_UP and not online:
                log.warning("%s: unexpected answer %s to segmentConsumed", spec.segment, status)
            if online:
                return  # asked once more after going ONLINE: the committed copy is fetched anyway
            self._wakeup.wait(self._hold_wait(response, holds))
            self._wakeup.clear()

    def _hold_wait(self, response: Response, holds: int) -> float:
        """How long to wait before asking again: Pinot's full hold while another replica is the
        chosen committer (its commit ending or failing is what this replica waits for; going
        ONLINE ends the wait), else `hold_s` doubled for every further HOLD in a row."""
        if response.committer_chosen:
            return MAX_HOLD_S
        return min(self.hold_s * 2 ** max(holds - 1, 0), MAX_HOLD_S)

    def _committed_answer(self) -> Status | None:
        """KEEP when this replica ends where the committed segment ends, else DISCARD; None when
        the committed end offset is not known here."""
        end = None if self._committed_end is None else self._committed_end()
        if end is None:
            return None
        return Status.KEEP if end == self.next_offset else Status.DISCARD

    def _may_start_early(self) -> bool:
        """Whether to ask for the early commit start: pauseless, and our build is not held
        (then a COMMIT means the controller started the commit, and the committer must build)."""
        if not self.spec.pauseless:
            return False
        early = None if self._hold_ahead is None else self._hold_ahead.take()
        return (early() if early is not None else self._build_hold()) is None

    def _build_hold(self) -> Hold | None:
        """The commit callable's hold on our build now (`build_hold(spec)`), or None."""
        ask = getattr(self._commit, "build_hold", None)
        return None if ask is None else ask(self.spec)

    def _wait_build_hold(self) -> bool:
        """After a failed commit: wait while the segment's build is held (module contract),
        without asking the controller; True when it was held."""
        hold = self._build_hold()
        if hold is None:
            return False
        log.warning("%s: holding without asking: %s", self.spec.segment, hold.reason)
        while hold is not None and not self._stop.is_set() and not self._online.is_set():
            self.hold_reason = hold.reason
            self._refresh_latest()
            left = hold.until_ms / 1000 - self.clock()
            self._wakeup.wait(max(0.0, min(left, BUILD_HOLD_RECHECK_S)))
            self._wakeup.clear()
            hold = self._build_hold()
        self.hold_reason = None
        return True

    def wait(self, seconds: float, online_ends: bool = True) -> bool:
        """Sleep up to `seconds`; True when stopped meanwhile or (`online_ends`) the replica went
        ONLINE (for the committer's polling: someone else committed). A pauseless committer past
        commit start passes `online_ends=False`: its own commit start made the replica ONLINE."""
        self._refresh_latest()
        if not online_ends:
            return self._stop.wait(seconds)
        return self._wakeup.wait(seconds) and (self._stop.is_set() or self._online.is_set())

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()
