"""The reads behind `tables.domain.completion_trust`: is a completion call from a real replica?

Contract:
- `authenticate(authorization)` checks the cluster token, with no I/O; the endpoints run it first,
  before any parameter is looked at.
- `check(ctx, table, partition, segment, instance, offset)` runs on the table's lead controller
  before the call reaches an FSM (so a refused call creates no FSM either). The LIVEINSTANCES
  children, the table's IdealState and its config are watched reads (`hot(ctx)`, a
  `tables.cluster.hot_reads.HotReads` kept per kazoo client and shared with the completion
  manager): no ZooKeeper round trip while they are unchanged, nor for a call that a read less
  than `STALE_ACCEPT_S` old accepts; one read after a change (the IdealState parsed once per
  version). A call the cached state would refuse is checked again against ZooKeeper itself
  first, so a refusal never rests on a change not yet notified. The
  partition's latest offset is cached per (table, partition): an offset at or below a value read
  within `latest_ttl_ms` needs no stream read; only a higher one re-reads the stream (one read
  per segment and partition in normal operation, as offsets grow). A stream that cannot be read
  skips the offset rule.
- A refusal raises `CallRefused`; it is counted in the durable counter
  `llcCompletionCallsRefused.<cause>` (exposed as
  `pinot_controller_llcCompletionCallsRefused_Count{cause}` by `monitoring.controller_metrics`)
  and logged at most once per cause per `log_every_s`, with the number left unlogged. Counts are
  kept in memory and added to the database by a daemon thread every `FLUSH_EVERY_S` (0: at once,
  in the caller's thread), so a refusal never waits for the database and a flood of forged calls
  costs a few writes, not one per call; a failed write is retried at the next flush.
- Thread-safe: the caches sit behind one lock that is never held across I/O.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import NoReturn

from django.db import DatabaseError, connection

from tables.cluster.context import ClusterContext
from tables.cluster.errors import NotFound
from tables.cluster.hot_reads import HotReads
from tables.domain.backoff import LogThrottle
from tables.domain.commit import is_partition_paused
from tables.domain.completion_trust import (
    Refusal,
    check_caller,
    check_token,
    refusal_counter_name,
)
from tables.models import DurableCounter
from tables.security import cluster_token
from tables.streams.base import StreamError, StreamProvider, provider_for

__all__ = ["CallRefused", "CallerCheck", "RefusalCounts"]

log = logging.getLogger(__name__)

LOG_EVERY_S = 60.0
LATEST_TTL_MS = 30_000
#: A call the LIVEINSTANCES and IdealState read less than this long ago accept is accepted even
#: when they changed since (a pause's burst of commit ends, each after another commit's IdealState
#: write, reads it once, not once per call); a call they would refuse is checked afresh.
STALE_ACCEPT_S = 1.0
FLUSH_EVERY_S = 2.0


class CallRefused(Exception):
    def __init__(self, refusal: Refusal) -> None:
        super().__init__(f"{refusal.cause}: {refusal.reason}")
        self.refusal = refusal


class RefusalCounts:
    """Durable counter increments, buffered in memory (see the module contract)."""

    def __init__(self, flush_every_s: float | None = None) -> None:
        self.flush_every_s = FLUSH_EVERY_S if flush_every_s is None else flush_every_s
        self._lock = threading.Lock()
        self._pending: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, name: str) -> None:
        with self._lock:
            self._pending[name] += 1
            if self.flush_every_s > 0 and self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="refusal-counts", daemon=True
                )
                self._thread.start()
        if self.flush_every_s <= 0:
            self.flush()

    def flush(self) -> None:
        """Add what is pending to the database; on failure it stays pending."""
        with self._lock:
            batch, self._pending = self._pending, Counter()
        written: Counter[str] = Counter()
        try:
            for name, count in sorted(batch.items()):
                DurableCounter.increment(name, by=count)
                written[name] = count
        except DatabaseError:
            log.warning("cannot count refused completion calls now; retrying", exc_info=True)
            with self._lock:
                self._pending.update(batch - written)

    def close(self) -> None:
        """Stop the thread and flush what is left (in the caller's thread)."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join()
        self.flush()

    def _loop(self) -> None:
        while not self._stop.wait(self.flush_every_s):
            try:
                self.flush()
            except Exception:  # the thread must outlive any one failure
                log.exception("counting refused completion calls failed")
            finally:
                connection.close()  # this thread's own connection


class CallerCheck:
    def __init__(
        self,
        token: Callable[[], str] = cluster_token,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        log_every_s: float = LOG_EVERY_S,
        latest_ttl_ms: int = LATEST_TTL_MS,
        counts: RefusalCounts | None = None,
    ) -> None:
        self.counts = counts if counts is not None else RefusalCounts()
        self._token = token
        self._clock_ms = clock_ms
        self._latest_ttl_ms = latest_ttl_ms
        self._lock = threading.Lock()
        self._log = LogThrottle(every_s=log_every_s)
        self._hot: HotReads | None = None
        self._latest: dict[tuple[str, int], tuple[int, int]] = {}  # -> (offset, read at ms)
        self._providers: dict[str, tuple[dict[str, str], StreamProvider]] = {}

    # --- the checks ----------------------------------------------------------------------------
    def authenticate(
        self, authorization: str | None, instance: str | None = None, segment: str | None = None
    ) -> None:
        """The token check; `instance` and `segment` (as the call names them) are for the log."""
        refusal = check_token(authorization, self._token())
        if refusal is not None:
            self._refuse(refusal, instance, segment)

    def check(
        self,
        ctx: ClusterContext,
        table: str,
        partition: int,
        segment: str,
        instance: str,
        offset: int,
    ) -> None:
        hot = self.hot(ctx)
        live, replicas = self._caller(ctx, hot, table, segment, instance, fresh=False)
        if instance not in replicas:  # never refuse on a cached answer: ask ZooKeeper itself
            live, replicas = self._caller(ctx, hot, table, segment, instance, fresh=True)
        latest = None
        if live and instance in replicas:
            latest = self._latest_offset(ctx, table, partition, offset)
        refusal = check_caller(
            instance, segment, offset, live=live, replicas=replicas, latest_offset=latest
        )
        if refusal is not None:
            self._refuse(refusal, instance, segment)

    # --- reads ---------------------------------------------------------------------------------
    def hot(self, ctx: ClusterContext) -> HotReads:
        """This process's hot reads on `ctx`'s session (`tables.cluster.hot_reads`), shared with
        the completion manager: one per kazoo client."""
        with self._lock:
            self._hot = HotReads.reuse(self._hot, ctx)
            return self._hot

    def _caller(
        self,
        ctx: ClusterContext,
        hot: HotReads,
        table: str,
        segment: str,
        instance: str,
        fresh: bool,
    ) -> tuple[bool, Mapping[str, str]]:
        """Is `instance` live, and the IdealState's {instance: state} of `segment` (empty when
        not live)."""
        stale_ok_s = 0.0 if fresh else STALE_ACCEPT_S
        live = instance in hot.reads.children(ctx.paths.liveinstances, fresh, stale_ok_s)
        if not live:
            return False, {}
        record = hot.idealstate(table, fresh, stale_ok_s)
        return True, {} if record is None else record.map_fields.get(segment, {})

    def looks_paused(self, ctx: ClusterContext, table: str, partition: int) -> bool:
        """Whether the IdealState of `table` as last parsed here pauses `partition` (False when
        none was): no I/O, a hint for the commit steps (`tables.controller.llc`), never what
        decides whether a partition is paused."""
        record = self.hot(ctx).last_idealstate(table)
        return record is not None and is_partition_paused(record, partition)

    def _latest_offset(
        self, ctx: ClusterContext, table: str, partition: int, offset: int
    ) -> int | None:
        now = self._clock_ms()
        with self._lock:
            cached = self._latest.get((table, partition))
        if cached is not None and offset <= cached[0] and now - cached[1] < self._latest_ttl_ms:
            return cached[0]
        return self.latest_offset_now(ctx, table, partition)

    def latest_offset_now(
        self, ctx: ClusterContext, table: str, partition: int, max_age_ms: int = 0
    ) -> int | None:
        """The partition's latest offset read from the stream now, or read at most `max_age_ms`
        ago (by `check`, in the same call); None when it cannot be read. A read refreshes what
        `check` remembers."""
        now = self._clock_ms()
        with self._lock:
            cached = self._latest.get((table, partition))
        if cached is not None and now - cached[1] <= max_age_ms:
            return cached[0]
        provider = self._provider(ctx, table)
        try:
            latest = None if provider is None else provider.latest_offset(partition)
        except StreamError as exc:
            latest = None
            self._quietly(
                "streamUnreadable",
                "cannot read the latest offset of %s partition %d: %s",
                table,
                partition,
                exc,
            )
        if latest is not None:
            with self._lock:
                self._latest[(table, partition)] = (latest, now)
        return latest

    def stream(self, ctx: ClusterContext, table: str) -> StreamProvider | None:
        """The table's stream provider this check keeps open (made again when the table's stream
        config changes), or None when there is none; shared: never close it."""
        return self._provider(ctx, table)

    def _provider(self, ctx: ClusterContext, table: str) -> StreamProvider | None:
        try:
            stream_config = self.hot(ctx).table_config(table).stream_config
        except NotFound:
            return None
        with self._lock:
            cached = self._providers.get(table)
        if cached is not None and cached[0] == stream_config:
            return cached[1]
        try:
            provider = provider_for(stream_config, ctx.redis_url)
        except StreamError as exc:
            self._quietly("streamUnreadable", "no stream provider for %s: %s", table, exc)
            return None
        with self._lock:
            old = self._providers.get(table)
            self._providers[table] = (dict(stream_config), provider)
        if old is not None:
            old[1].close()
        return provider

    # --- refusals ------------------------------------------------------------------------------
    def _refuse(self, refusal: Refusal, instance: str | None, segment: str | None) -> NoReturn:
        self.counts.add(refusal_counter_name(refusal.cause))
        self._quietly(
            str(refusal.cause),
            "refused a completion call (%s) from instance %r for segment %r: %s",
            refusal.cause,
            instance,
            segment,
            refusal.reason,
        )
        raise CallRefused(refusal)

    def _quietly(self, key: str, message: str, *args: object) -> None:
        """Log a warning at most once per interval per `key`."""
        with self._lock:
            write, unlogged = self._log.allow(key, time.monotonic())
        if not write:
            return
        if unlogged:
            message += f" (and {unlogged} more since the last such message)"
        log.warning(message, *args)
