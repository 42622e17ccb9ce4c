"""The server's live-state publisher: what it consumes right now, to Redis (`tables.live_state`).

Contract:
- `LivePublisher(instance, client, cluster, interval_s, ttl_s)` runs one daemon thread. It
  publishes at once on `start()`, then every `interval_s`: for every table the instance hosts
  (`ServerInstance.hosted_tables`, filtered by `replicas_of`) and every replica in CONSUMING state
  with a consumer, one `PartitionLive`, and one for every replica in ERROR, or OFFLINE after a
  reset, whose consumer failed (`Replica.failed_consumer`: NOT_CONSUMING, phase ERROR, the offsets
  where it stopped, `stoppedReason`), all in one `live_state.publish` (the server's hash,
  replaced atomically, expiring after `ttl_s`). A server hosting nothing still publishes its
  empty marker, so it reads as reporting.
- Figures agree with the server's own `/tables/{t}/consumingSegmentsInfo` (`admin._info`):
  `currentOffset` is the consumer's next offset, `recordsLag` = `stats.offset_lag(current)`,
  `upstreamOffset` = current + lag (None while the partition's latest offset is unknown),
  `availabilityLagMs` = `stats.delay_ms(now, current)`, `consumerState` NOT_CONSUMING only for a
  failed or stopped consumer; `phase` is the consumer's finer phase. `rowsPerSecond` is the change
  of the partition's `rows_consumed` since the previous publish over the elapsed (monotonic) time;
  0.0 on a partition's first publish. `phaseSinceMs` is when the consumer's current phase began:
  the publisher remembers each segment's phase between ticks and moves the time only when the
  phase changes (a replica first seen CONSUMING began at the replica's `since_ms`; any other
  first sighting, and every change, at the tick that saw it: at most `interval_s` late).
  `completingSinceMs` is when the replica left CONSUMING for the completion protocol (HOLDING,
  CATCHING_UP, COMMITTING, ...): it survives the HOLDING <-> CATCHING_UP round trips of one
  completion, so a stuck commit's age keeps growing; None while consuming.
  `stoppedReason` is the failed consumer's `stopped_reason` (the reason it sent with
  segmentStoppedConsuming, e.g. "topicNotFound: ..."), None while it has not failed;
  `holdReason` the consumer's `hold_reason` (a build backing off, issue 23), else None.
- A failing publish (Redis down, a replica changing under the walk) is logged and retried on the
  next tick; it never ends the thread. `failures` and `published` count ticks.
- `stop()` ends the thread promptly (it waits on an event, not a sleep) and deletes the server's
  key, so the server disappears from readers at once rather than after the TTL.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import redis

from tables import live_state
from tables.domain.segment_states import SegmentState
from tables.live_state import PartitionLive

from .consumer import SegmentConsumer
from .instance import ServerInstance

__all__ = ["LivePublisher", "partition_live"]

log = logging.getLogger(__name__)


def partition_live(
    consumer: SegmentConsumer,
    now_ms: int,
    rows_per_second: float,
    phase_since_ms: int | None = None,
    completing_since_ms: int | None = None,
) -> PartitionLive:
    """One consuming segment's live figures, computed as the admin endpoint computes them."""
    spec, stats = consumer.spec, consumer.stats
    current = consumer.next_offset
    lag = stats.offset_lag(current)
    return PartitionLive(
        table=spec.table,
        segmentName=spec.segment,
        partition=spec.partition,
        consumerState="NOT_CONSUMING" if consumer.failed else "CONSUMING",
        phase=str(consumer.phase),
        currentOffset=current,
        upstreamOffset=None if stats.latest_offset is None else current + lag,
        recordsLag=lag,
        availabilityLagMs=stats.delay_ms(now_ms, current),
        lastConsumedMs=stats.last_consumed_ms,
        rowsConsumed=stats.rows_consumed,
        rowsPerSecond=rows_per_second,
        lostOffsets=stats.lost_offsets,
        updatedMs=now_ms,
        phaseSinceMs=phase_since_ms,
        completingSinceMs=completing_since_ms,
        stoppedReason=consumer.stopped_reason,
        holdReason=consumer.hold_reason,
    )


class LivePublisher:
    """Publishes `instance`'s consuming segments to Redis; see the module contract."""

    def __init__(
        self,
        instance: ServerInstance,
        client: redis.Redis,
        cluster: str,
        interval_s: float,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.instance = instance
        self.client = client
        self.cluster = cluster
        self.interval_s = interval_s
        self.ttl_s = ttl_s
        self.clock = clock
        self.wall_ms = wall_ms
        self.published = 0
        self.failures = 0
        self._failing = 0  # failures in a row
        # (table, partition) -> (rows_consumed, clock) at the previous collect.
        self._previous: dict[tuple[str, int], tuple[int, float]] = {}
        # (table, segment) -> (phase, phase since ms, completing since ms) at the previous collect.
        self._phases: dict[tuple[str, str], tuple[str, int, int | None]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"live-{instance.instance_id}", daemon=True
        )

    @property
    def key(self) -> str:
        return live_state.key_for(self.cluster, self.instance.instance_id)

    # --- life cycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """End the thread, then delete the server's key (best effort: it expires anyway)."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout)
        try:
            self.client.delete(self.key)
        except redis.RedisError:
            log.warning("could not delete %s; it expires within %g s", self.key, self.ttl_s)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.publish_once()
            self._stop.wait(self.interval_s)

    # --- one tick -----------------------------------------------------------------------------
    def collect(self) -> list[PartitionLive]:
        """The live figures of every consuming replica now, advancing the rate baselines."""
        now_ms, now = self.wall_ms(), self.clock()
        items: list[PartitionLive] = []
        seen: dict[tuple[str, int], tuple[int, float]] = {}
        phases: dict[tuple[str, str], tuple[str, int, int | None]] = {}
        for table in self.instance.hosted_tables():
            replicas = self.instance.replicas_of(table)
            for segment, replica in sorted((replicas or {}).items()):
                consumer = replica.consumer
                if replica.state in (SegmentState.ERROR, SegmentState.OFFLINE):
                    consumer = replica.failed_consumer
                elif replica.state is not SegmentState.CONSUMING:
                    continue
                if consumer is None:
                    continue
                key = (table, consumer.spec.partition)
                rows = consumer.stats.rows_consumed
                seen.setdefault(key, (rows, now))
                phase = self._phase_times(
                    (table, segment), str(consumer.phase), now_ms, replica.since_ms
                )
                phases[(table, segment)] = phase
                rate = self._rate(key, rows, now)
                items.append(partition_live(consumer, now_ms, rate, phase[1], phase[2]))
        self._previous = seen
        self._phases = phases
        return items

    def _phase_times(
        self, key: tuple[str, str], phase: str, now_ms: int, replica_since_ms: int
    ) -> tuple[str, int, int | None]:
        """(phase, when it began, when the completion began) for one segment; see the contract."""
        previous = self._phases.get(key)
        if previous is not None and previous[0] == phase:
            return previous
        consuming = phase == "CONSUMING"
        if previous is None:
            since = min(replica_since_ms, now_ms) if consuming else now_ms
            return phase, since, None if consuming else since
        if consuming:
            return phase, now_ms, None
        completing = previous[2] if previous[2] is not None else now_ms
        return phase, now_ms, completing

    def _rate(self, key: tuple[str, int], rows: int, now: float) -> float:
        previous = self._previous.get(key)
        if previous is None:
            return 0.0
        before, then = previous
        elapsed = now - then
        if elapsed <= 0:
            return 0.0
        # rows_consumed belongs to the partition and only grows in a process; guard anyway.
        return round(max(rows - before, 0) / elapsed, 3)

    def publish_once(self) -> bool:
        """Collect and publish once; False (logged) when it failed."""
        try:
            items = self.collect()
            live_state.publish(
                self.client, self.cluster, self.instance.instance_id, items, self.ttl_s
            )
        except Exception:  # Redis away, or anything else: the next tick tries again
            self.failures += 1
            self._failing += 1
            # The first failure of a run with its traceback; the rest briefly, every 30th.
            if self._failing == 1 or self._failing % 30 == 0:
                log.warning(
                    "%s: live state not published (%d in a row); retrying",
                    self.key,
                    self._failing,
                    exc_info=self._failing == 1,
                )
            return False
        if self._failing:
            log.info("%s: live state published again after %d failures", self.key, self._failing)
        self._failing = 0
        self.published += 1
        return True
