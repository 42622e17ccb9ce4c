"""A server instance: a Helix participant that hosts segment replicas (reference §1, §5.8).

Contract:
- Registration: instance config (`HELIX_HOST`/`HELIX_PORT`, `adminPort`, `TAG_LIST`) and an
  ephemeral live instance on this process's ZooKeeper session. After a session expiry the next
  round registers again on the new session, removes the CURRENTSTATES of older sessions and
  writes its states under the new one. While an older session of the same id still holds the live
  instance (a killed predecessor), the server waits and hosts nothing.
- Watches: one children watch on IDEALSTATES and one data watch per REALTIME table's IdealState
  (not one per segment). A table is served when its server tenant tag is one of this instance's
  tags. Watches only wake the reconcile thread (and send the metadata reads of new consuming
  segments ahead of their transitions: `tables.server.prefetch`); a periodic round (`tick_s`)
  retries what failed.
  Table configs are watched reads (`tables.cluster.hot_reads`): a change notified before the
  IdealState change being acted on (ZooKeeper's order) is always seen.
- Reconcile: for every segment whose IdealState names this instance (and every one it hosts), run
  the next transition of `tables.domain.segment_states.next_step` on a small thread pool, one at a
  time per segment. OFFLINE->CONSUMING starts a `SegmentConsumer` from the segment's ZK start
  offset (so a restarted server resumes from there); CONSUMING->ONLINE stops it and fetches the
  committed copy (`LocalSegments`), as does OFFLINE->ONLINE; ->OFFLINE stops consuming; ->DROPPED
  also deletes the local copy. Segments transition independently (a partition's next segment
  never waits for the previous one's ONLINE transition); a round hands the transitions that
  start consumers to the pool first.
- No wait holds a transition thread (pauseless, round 2 §B.2, §B.4): a step that must wait raises
  `WaitingFor`; the replica keeps its state, records why (`Replica.waiting`) and is tried again
  `WAIT_POLL_S` later. Going ONLINE waits, with no time limit, for a consumer whose commit is in
  progress, then, while the segment's ZK status is COMMITTING, for its download URL, up to
  `local_segments.download_timeout_s` from the first COMMITTING seen; past it the step fails
  (`DownloadWait`: "Failed to download segment: ...") and the replica goes to ERROR. With a peer
  download scheme a COMMITTING segment, or a DONE one without a download URL, is taken from this
  server's own build or an ONLINE peer instead, and waited for the same way
  (`tables.server.peer`).
- A transition that fails leaves the replica in ERROR, as does a consumer that fails; a replica
  whose transitions keep failing (ERROR -> DROPPED of a segment whose files cannot be removed) is
  tried again after 0.5 s doubling up to 60 s, with one log line a minute, never in a tight loop.
  While ZooKeeper is away the rounds back off (`tick_s` doubling to 10 s) and log one line a
  minute per cause; the ZooKeeper client, and so every watch, is kept (`tables.zk.client`), and a
  new session is met by registering again. CURRENTSTATES/<session>/<table> (mapFields segment ->
  CURRENT_STATE) is rewritten, compare-and-set, after every transition (overlapping rewrites of
  one table coalesce: `tables.server.current_states`). A pauseless committer
  waits for the next segment's consumer to start before it builds (`tables.server.handoff`).
- A consumer that fails leaves its replica in ERROR with the consumer's `stopped_reason` as the
  replica's `error`; the failed consumer is kept (`failed_consumer`) so the live state can still
  show the partition and why it stopped, while the replica is ERROR or (after a reset) OFFLINE,
  until its next transition succeeds.
- Reset (`reset_replica`, Helix's STATE_TRANSITION to OFFLINE): from any state, the replica's
  consumer is stopped without committing and it becomes OFFLINE with error and back-off cleared;
  CURRENTSTATES is rewritten and the reconcile thread woken, so the replica follows the IdealState
  back up. A transition in flight for it is waited for first (at most `RESET_WAIT_S`).
- Messages: once registered, `messages` (`tables.server.messages.MessageHandler`) watches
  INSTANCES/<id>/MESSAGES and handles FORCE_COMMIT and resets; a consumer started by a transition is
  reported to it (`consumer_started`), so a force commit that came meanwhile is not lost. A
  consumer started while its table or partition is paused in the IdealState is force committed at
  once (an empty segment, usually): a pause never waits for a server that was down or slow.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from tables.cluster.context import ClusterContext
from tables.cluster.errors import NotFound
from tables.cluster.hot_reads import HotReads
from tables.cluster.reads import ClusterReader
from tables.domain.backoff import Backoff, LogThrottle
from tables.domain.commit import is_partition_paused
from tables.domain.names import LLCSegmentName
from tables.domain.segment_states import SegmentState, next_step
from tables.domain.table_config import TableConfig
from tables.domain.znrecord import ZNRecord
from tables.outages import outage_reason
from tables.segments.deepstore import DeepStore
from tables.streams.base import StreamProvider, provider_for
from tables.zk import codec
from tables.zk.errors import NodeExists
from tables.zk.participants import register_participant, session_id_of
from tables.zk.watches import watch_children, watch_data

from .build_holds import BuildHolds
from .committer import Committer, SubmitBuild
from .consumer import ConsumingSegment, PartitionStats, Phase, SegmentConsumer
from .current_states import CurrentStatesWriter
from .enablement import InstanceEnablement
from .handoff import ConsumerStarts
from .local_segments import LocalSegments
from .messages import MessageHandler
from .peer import SegmentFetch
from .prefetch import MetadataPrefetch
from .protocol import CompletionClient, LeaderLocator
from .replica import Replica, WaitingFor
from .specs import committed_end_offset, consuming_spec

__all__ = ["TRANSITION_THREADS", "Replica", "ServerInstance", "WaitingFor"]

log = logging.getLogger(__name__)

DEFAULT_TAG = "DefaultTenant_REALTIME"
STOP_JOIN_S = 30.0
RECONCILE_BACKOFF_CAP_S = 10.0
TRANSITION_BACKOFF_CAP_S = 60.0
LOG_EVERY_S = 60.0
RESET_WAIT_S = 60.0
TRANSITION_THREADS = 8  # waits do not hold one (module contract)


class ServerInstance:
    def __init__(
        self,
        instance_id: str,
        host: str,
        port: int,
        ctx: Callable[[], ClusterContext],
        deep_store: Callable[[], DeepStore],
        submit_build: SubmitBuild,
        data_dir: Path,
        tags: list[str] | None = None,
        admin_port: int | None = None,
        token: str | None = None,
        hold_s: float = 1.0,
        tick_s: float = 2.0,
    ) -> None:
        self.instance_id, self.host, self.port = instance_id, host, port
        self.admin_port = admin_port if admin_port is not None else port
        self.tags = list(tags or [DEFAULT_TAG])
        self.ctx = ctx
        self._hot: HotReads | None = None
        self.hold_s, self.tick_s = hold_s, tick_s
        self.client = CompletionClient(instance_id, LeaderLocator(ctx))
        token = token if token is not None else self.client.token  # downloads show it too
        self.local = LocalSegments(data_dir / "segments", token, instance_id, deep_store)
        self.starts = ConsumerStarts()  # a pauseless build waits for the next consumer's start
        self.committer = Committer(
            self.client,
            deep_store,
            submit_build,
            data_dir / "work",
            instance_id=instance_id,
            local=self.local,
            peer_scheme=self._peer_scheme,
            wait_next=self.starts.wait_after,
            holds=BuildHolds(ctx, instance_id),  # the build back-off (issue 23)
        )
        self.session: str | None = None
        self.stats: dict[tuple[str, int], PartitionStats] = {}
        self.replicas: dict[str, dict[str, Replica]] = {}
        self._ideal: dict[str, ZNRecord | None] = {}
        self._serves: dict[str, bool] = {}
        self._providers: dict[str, StreamProvider] = {}
        self._watched: set[str] = set()
        self._watching = False
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)  # notified when a replica stops being busy
        self._wake = threading.Event()
        self.prefetch = MetadataPrefetch(
            instance_id, ctx, lambda table, segment: segment not in self.replicas.get(table, {})
        )
        self._states_writer = CurrentStatesWriter(
            instance_id, ctx, lambda: self.session, self.current_states, self._wake.set
        )
        self._stop = threading.Event()
        self.fetcher = SegmentFetch(instance_id, ctx, self.local, self._stop)  # ONLINE's fetch
        self._transition_log = LogThrottle(every_s=LOG_EVERY_S)
        self._pool = ThreadPoolExecutor(TRANSITION_THREADS, thread_name_prefix="transition")
        self._thread = threading.Thread(target=self._loop, name="reconcile", daemon=True)
        self.messages = MessageHandler(self, tick_s=tick_s)
        self.enablement = InstanceEnablement(instance_id, self._wake.set)  # HELIX_ENABLED

    # --- life cycle -------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop consuming and reconciling; the caller closes the ZooKeeper session."""
        self._stop.set()
        self._wake.set()
        self.messages.stop()
        self.enablement.stop()
        self._thread.join(timeout)
        # Running transitions finish first, so none starts a consumer after the sweep below.
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:  # a failed consumer may still be reporting segmentStoppedConsuming
            consumers = [
                c
                for t in self.replicas.values()
                for r in t.values()
                for c in (r.consumer, r.failed_consumer)
                if c is not None
            ]
        for consumer in consumers:
            consumer.stop()
        deadline = time.monotonic() + timeout
        for consumer in consumers:
            consumer.join(max(deadline - time.monotonic(), 0.1))
        for provider in self._providers.values():
            provider.close()

    def wake(self) -> None:
        self._wake.set()

    @property
    def alive(self) -> bool:
        """False once the reconcile thread has ended (stopped, or died); liveness probes ask."""
        return self._thread.ident is None or self._thread.is_alive()

    # --- watches ------------------------------------------------------------------------------
    def _on_tables(self, children: list[str]) -> bool:
        if self._stop.is_set():
            return False
        ctx = self.ctx()
        for table in children:
            if table.endswith("_REALTIME") and table not in self._watched:
                self._watched.add(table)
                watch_data(ctx.client, ctx.paths.idealstate(table), partial(self._on_ideal, table))
        return True

    def _on_ideal(self, table: str, data: bytes | None, _stat: object) -> bool:
        if self._stop.is_set():
            return False
        try:
            record = codec.decode(data) if data else None
        except Exception:  # a watcher must survive a bad znode
            log.exception(
                "%s: unreadable IdealState of %s; keeping the last one", self.instance_id, table
            )
            return True
        with self._lock:
            self._ideal[table] = record
            self._serves.pop(table, None)  # re-read with the table config (a tenant may change)
            if data is None:
                self._watched.discard(table)
        self.prefetch.saw(table, record)  # new consuming segments' metadata: sent, not awaited
        self._wake.set()
        return data is not None

    # --- the reconcile thread -----------------------------------------------------------------
    def _loop(self) -> None:
        backoff = Backoff(first=self.tick_s, cap=max(RECONCILE_BACKOFF_CAP_S, self.tick_s))
        throttle = LogThrottle(every_s=LOG_EVERY_S)
        while not self._stop.is_set():
            wait = self.tick_s
            try:
                if self._ensure_registered():
                    self._reconcile_all()
                if backoff.failures:
                    log.info("%s: reconcile rounds succeed again", self.instance_id)
                backoff.reset()
                throttle = LogThrottle(every_s=LOG_EVERY_S)
            except Exception as exc:
                wait = backoff.next_delay()
                self._log_round_failure(throttle, exc, wait)
            self._wake.wait(min(wait, self._next_wait_due()))
            self._wake.clear()

    def _next_wait_due(self) -> float:
        """Seconds until the earliest deferred transition is due (inf when none waits)."""
        with self._lock:
            due = [
                r.retry_at
                for replicas in self.replicas.values()
                for r in replicas.values()
                if r.waiting is not None and not r.busy
            ]
        return max(min(due) - time.monotonic(), 0.01) if due else float("inf")

    def _log_round_failure(self, throttle: LogThrottle, exc: Exception, wait: float) -> None:
        """One line per cause per LOG_EVERY_S: an outage must not flood the log."""
        reason = outage_reason(exc)
        key = type(exc).__name__ if reason is not None else repr(exc)
        write, held = throttle.allow(key, time.monotonic())
        if not write:
            return
        if reason is not None:
            log.warning(
                "%s: store unavailable (%s); retrying in %.1f s (%d similar held back)",
                self.instance_id,
                reason,
                wait,
                held,
            )
        else:
            log.exception("%s: reconcile round failed; retrying in %.1f s", self.instance_id, wait)

    def _ensure_registered(self) -> bool:
        ctx = self.ctx()
        session = session_id_of(ctx.client)
        if session == self.session:
            return True
        if not ctx.client.exists(ctx.paths.idealstates):
            log.warning("%s: cluster %s is not set up yet", self.instance_id, ctx.paths.cluster)
            return False
        if not self._watching:
            watch_children(ctx.client, ctx.paths.idealstates, self._on_tables)
            self._watching = True
        try:
            register_participant(
                ctx.client,
                ctx.paths,
                self.instance_id,
                self.host,
                self.port,
                self.tags,
                admin_port=self.admin_port,
            )
        except NodeExists:
            log.warning("%s: an older session still holds the live instance", self.instance_id)
            return False
        folder = f"{ctx.paths.instance(self.instance_id)}/CURRENTSTATES"
        for old in ctx.client.get_children(folder):
            if old != session:
                ctx.client.delete(f"{folder}/{old}", recursive=True)
        self.session = session
        log.info("%s registered on session %s", self.instance_id, session)
        self.messages.watch(ctx)  # FORCE_COMMIT and other Helix messages
        self.enablement.watch(ctx)  # this instance's HELIX_ENABLED
        for table in list(self.replicas):
            self._publish(table)
        return True

    def _reconcile_all(self) -> None:
        with self._lock:
            tables = set(self._ideal) | set(self.replicas)
        for table in sorted(tables):
            self._reconcile(table)

    def _reconcile(self, table: str) -> None:
        with self._lock:
            ideal = self._ideal.get(table)
            targets: dict[str, str] = {}
            if ideal is not None and self._served(table):
                for segment, states in ideal.map_fields.items():
                    if self.instance_id in states:
                        targets[segment] = states[self.instance_id]
                targets = self.enablement.targets(ideal, targets)  # disabled: all OFFLINE
            replicas = self.replicas.setdefault(table, {})
            changed = False
            steps = []
            for segment in sorted(set(targets) | set(replicas)):
                replica = replicas.get(segment) or Replica()
                if replica.busy or replica.retry_at > time.monotonic():
                    continue
                consumer = replica.consumer
                failed = consumer is not None and consumer.phase is Phase.ERROR
                if replica.state is SegmentState.CONSUMING and failed:
                    replica.state, replica.consumer = SegmentState.ERROR, None
                    replica.error = consumer.stopped_reason or "the consumer failed"
                    replica.failed_consumer = consumer
                    changed = True
                step = next_step(replica.state, targets.get(segment))
                if step is None:
                    continue
                replicas[segment] = replica
                replica.busy = True
                steps.append((segment, replica, step))
            # Consumers first: at a commit the next segment's consumer is the partition's
            # freshness, the previous segment's ONLINE transition (KEEP, a download) can wait.
            steps.sort(key=lambda one: one[2][1] is not SegmentState.CONSUMING)
            for segment, replica, step in steps:
                self._pool.submit(self._transition, table, segment, replica, step)
        if changed:
            self._publish(table)

    def _served(self, table: str) -> bool:
        served = self._serves.get(table)
        if served is None:
            try:
                config = self._hot_reads().table_config(table)
            except NotFound:
                return False
            served = self._serves[table] = config.server_tag in self.tags
        return served

    # --- transitions --------------------------------------------------------------------------
    def _transition(
        self, table: str, segment: str, replica: Replica, step: tuple[SegmentState, SegmentState]
    ) -> None:
        source, target = step
        deferred = False
        try:
            if source is SegmentState.CONSUMING and target is SegmentState.ONLINE:
                self._finish_consumer(replica)
            elif source is SegmentState.CONSUMING or target is SegmentState.DROPPED:
                self._stop_consumer(replica)
            if target is SegmentState.CONSUMING:
                replica.consumer = self._start_consumer(table, segment)
                self.starts.started(table, segment, replica.consumer.first_fetch)
                self.messages.consumer_started(table, segment, replica.consumer)
                if self._paused(table, segment):
                    replica.consumer.force_commit()
            elif target is SegmentState.ONLINE:
                self._fetch(table, segment, replica)
            elif target is SegmentState.DROPPED:
                self.local.remove(table, segment)
            failed, replica.failed_consumer = replica.failed_consumer, None
            if failed is not None:  # its segmentStoppedConsuming reports end with the ERROR
                failed.stop()
            replica.state, replica.error = target, None
            replica.failures, replica.retry_at = 0, 0.0
            replica.end_wait()
            log.info("%s %s: %s -> %s", self.instance_id, segment, source, target)
        except WaitingFor as wait:  # not a failure: the same step is tried again later
            deferred = True
            if replica.waiting != wait.what:
                log.info("%s %s: %s -> %s waits for %s", self.instance_id, segment, *step, wait)
            replica.waiting, replica.retry_at = wait.what, time.monotonic() + wait.delay_s
        except Exception as exc:
            self._failed(segment, replica, step, exc)
        finally:
            if not deferred:
                replica.since_ms = int(time.time() * 1000)
            with self._idle:
                if replica.state is SegmentState.DROPPED:
                    self.replicas.get(table, {}).pop(segment, None)
                replica.busy = False
                self._idle.notify_all()
            if not deferred:  # a deferred step changed no state
                self._publish(table)
            self._wake.set()

    def _failed(
        self,
        segment: str,
        replica: Replica,
        step: tuple[SegmentState, SegmentState],
        exc: Exception,
    ) -> None:
        """A failed transition: ERROR, retried after a capped back-off, logged once a minute."""
        replica.end_wait()
        replica.failures += 1
        delay = Backoff(first=0.5, cap=TRANSITION_BACKOFF_CAP_S, failures=replica.failures - 1)
        replica.retry_at = time.monotonic() + delay.next_delay()
        write, held = self._transition_log.allow(f"{segment}:{step[1]}", time.monotonic())
        if write:
            log.exception(
                "%s %s: %s -> %s failed (%d times in a row, %d lines held back)",
                self.instance_id,
                segment,
                *step,
                replica.failures,
                held,
            )
        replica.state, replica.error = SegmentState.ERROR, f"{type(exc).__name__}: {exc}"

    # --- reset (a STATE_TRANSITION message to OFFLINE) ------------------------------------------
    def reset_replica(self, table: str, segment: str) -> bool:
        """Reset the replica to OFFLINE (see the module contract). False when this server does
        not host it; TimeoutError when a transition of it is still running after RESET_WAIT_S."""
        replica = self._claim(table, segment)
        if replica is None:
            return False
        source, consumer = replica.state, replica.consumer
        try:
            self._stop_consumer(replica)  # not committed: no KEEP/DISCARD question either
            if consumer is not None and consumer.phase is Phase.ERROR:
                replica.failed_consumer = consumer  # failed before a reconcile round saw it
            # failed_consumer stays: while OFFLINE after a failure the live state still says why;
            # its segmentStoppedConsuming reports end (the reset is the answer).
            if replica.failed_consumer is not None:
                replica.failed_consumer.stop()
            replica.state, replica.error = SegmentState.OFFLINE, None
            replica.failures, replica.retry_at = 0, 0.0
            replica.end_wait()
            replica.since_ms = int(time.time() * 1000)
            log.info("%s %s: reset %s -> OFFLINE", self.instance_id, segment, source)
        finally:
            with self._idle:
                replica.busy = False
                self._idle.notify_all()
        self._publish(table)
        self._wake.set()
        return True

    def _claim(self, table: str, segment: str) -> Replica | None:
        """Mark the hosted replica busy once no transition runs on it; None when not hosted."""
        deadline = time.monotonic() + RESET_WAIT_S
        with self._idle:
            while True:
                replica = self.replicas.get(table, {}).get(segment)
                if replica is None or replica.state in (None, SegmentState.DROPPED):
                    return None
                if not replica.busy:
                    replica.busy = True
                    return replica
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stop.is_set():
                    raise TimeoutError(f"{segment} of {table} is still in a transition")
                self._idle.wait(min(remaining, 1.0))

    def _paused(self, table: str, segment: str) -> bool:
        """Is the segment's table or partition paused in the IdealState this server last saw?"""
        with self._lock:
            ideal = self._ideal.get(table)
        name = LLCSegmentName.parse(segment)
        return (
            ideal is not None
            and name is not None
            and is_partition_paused(ideal, name.partition_group_id)
        )

    def _stop_consumer(self, replica: Replica) -> None:
        """Stop the replica's consumer without committing."""
        consumer, replica.consumer = replica.consumer, None
        if consumer is not None:
            consumer.stop()
            consumer.join(STOP_JOIN_S)

    def _finish_consumer(self, replica: Replica) -> None:
        """Going ONLINE: the consumer says KEEP or DISCARD and ends (`SegmentConsumer.end_online`);
        one whose commit is in progress is waited for (`WaitingFor`), however long it takes."""
        consumer = replica.consumer
        if consumer is not None and not consumer.end_online(STOP_JOIN_S):
            raise WaitingFor(f"the commit of {consumer.spec.segment} to end")
        replica.consumer = None

    def _start_consumer(self, table: str, segment: str) -> SegmentConsumer:
        config = self._hot_reads().table_config(table)
        meta = self.prefetch.take(table, segment)
        if meta is None:
            meta = ClusterReader(self.ctx()).segment_metadata(table, segment)
        spec = consuming_spec(table, segment, config, meta)
        consumer = SegmentConsumer(
            spec,
            self._provider(table, config),
            self.client,
            self.committer,
            self._stats(spec),
            hold_s=self.hold_s,
            instance_id=self.instance_id,
            committed_end=lambda: committed_end_offset(self.ctx(), table, segment),
        )
        consumer.start()
        return consumer

    def _provider(self, table: str, config: TableConfig) -> StreamProvider:
        with self._lock:
            provider = self._providers.get(table)
            if provider is None or provider.topic != config.topic_name:
                provider = provider_for(config.stream_config, self.ctx().redis_url)
                self._providers[table] = provider
            return provider

    def _stats(self, spec: ConsumingSegment) -> PartitionStats:
        with self._lock:
            key = (spec.table, spec.partition)
            stats = self.stats.get(key)
            if stats is None or stats.topic != spec.topic:
                stats = self.stats[key] = PartitionStats(spec.table, spec.topic, spec.partition)
            return stats

    def _fetch(self, table: str, segment: str, replica: Replica) -> None:
        """The committed copy, or `WaitingFor` it (`tables.server.peer.SegmentFetch`)."""
        self.fetcher.fetch(table, segment, replica)

    def _peer_scheme(self, table: str) -> str | None:
        """The table's `peerSegmentDownloadScheme` (the committer asks after a failed upload)."""
        return self._hot_reads().table_config(table).peer_segment_download_scheme

    def _hot_reads(self) -> HotReads:
        """Table configs without a round trip while unchanged (`tables.cluster.hot_reads`);
        one per kazoo client (a race creates a spare one, harmlessly)."""
        self._hot = HotReads.reuse(self._hot, self.ctx())
        return self._hot

    def replicas_of(self, table: str) -> dict[str, Replica] | None:
        """A snapshot of this server's replicas of `table`, or None when it does not serve the
        table (no IdealState, or not its tenant tag)."""
        with self._lock:
            # `_served`, not the cache alone: an IdealState change clears the cache, and a
            # FORCE_COMMIT sent right after it (a pause) must not find the table "not served".
            if self._ideal.get(table) is None or not self._served(table):
                return None
            return dict(self.replicas.get(table, {}))

    def hosted_tables(self) -> list[str]:
        """The tables (with type) this server holds replicas of, sorted; `replicas_of` tells
        which of them it still serves."""
        with self._lock:
            return sorted(self.replicas)

    # --- CURRENTSTATES ------------------------------------------------------------------------
    def current_states(self, table: str) -> dict[str, dict[str, str]]:
        with self._lock:
            replicas = dict(self.replicas.get(table, {}))
        return {
            segment: {"CURRENT_STATE": str(r.state)}
            for segment, r in sorted(replicas.items())
            if r.state is not None and r.state is not SegmentState.DROPPED
        }

    def _publish(self, table: str) -> None:
        self._states_writer.publish(table)
