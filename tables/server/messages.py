"""A server's Helix message inbox: `INSTANCES/<me>/MESSAGES` (reference §1.4, §4.5).

Contract:
- `watch()` (called once the server is registered) puts a ChildrenWatch on the folder. The watch
  only wakes this handler's own thread, which lists the folder and handles each message in turn:
  read it, mark it read (compare-and-set), act on it, delete it. A periodic pass (`tick_s`) retries
  what a ZooKeeper error left behind.
- A message whose `TGT_SESSION_ID` is not this server's current session was sent to an earlier
  life of the server: it is deleted unhandled, as Helix discards stale messages. So is a message
  that cannot be parsed, and any kind of message this server does not act on (logged).
- FORCE_COMMIT (`tableName`, `segmentNames`): for a table this server serves, every listed segment
  whose consumer is still CONSUMING is told to end consumption at its current offset with the
  reason `forceCommitMessageReceived`; it then runs the normal completion protocol (even with zero
  rows: the empty segment is committed). Segments it does not host, or is already completing, are
  ignored, as Pinot's handler ignores them. A listed segment whose replica is still starting its
  consumer (a transition in flight) is remembered for `PENDING_TTL_S` and forced as soon as
  `consumer_started` reports its consumer.
- STATE_TRANSITION with TO_STATE OFFLINE (Helix's reset, `PHRM.resetPartitionAllState`, round 2
  §A.7): the replica is reset from whatever state it is in (ERROR, CONSUMING, ONLINE, OFFLINE)
  by `reset_replica`: consumer stopped without committing, OFFLINE, error and back-off cleared,
  CURRENTSTATES rewritten, the reconcile loop woken, which follows the IdealState back up (ONLINE:
  download; CONSUMING: consume again from the segment's ZK start offset). As in Helix, a
  `FROM_STATE` other than the replica's current state (or "*"; a CONSUMING replica whose
  consumer failed counts as ERROR) makes the message stale: it is deleted unhandled, logged. A
  reset of a replica this server does not host is deleted with a log line; other target states
  are not handled here (the IdealState drives transitions).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from tables.cluster.context import ClusterContext
from tables.domain.backoff import Backoff, LogThrottle
from tables.domain.znrecord import ZNRecordError
from tables.outages import outage_reason
from tables.streams.base import StreamProvider
from tables.zk import messages as zk_messages
from tables.zk.watches import Watch

from .consumer import Phase, SegmentConsumer

__all__ = ["MessageHandler", "MessageTarget"]

log = logging.getLogger(__name__)

PENDING_TTL_S = 300.0


class MessageTarget(Protocol):
    """What the handler needs of its server (`tables.server.instance.ServerInstance`); a protocol,
    so that this module does not import the instance module that imports it."""

    instance_id: str
    session: str | None
    ctx: Callable[[], ClusterContext]

    def replicas_of(self, table: str) -> Mapping[str, Any] | None: ...

    def reset_replica(self, table: str, segment: str) -> bool:
        """Reset the replica to OFFLINE (see the module contract); False when not hosted."""
        ...


def _current_state(replica: Any) -> str:
    """The replica's state as a reset's FROM_STATE must name it: a CONSUMING replica whose
    consumer failed is ERROR already (the reconcile round that records it may not have run yet,
    and the controller resets it right after segmentStoppedConsuming)."""
    if replica is None or not replica.state:
        return "OFFLINE"
    consumer = replica.consumer
    if str(replica.state) == "CONSUMING" and consumer is not None and consumer.phase is Phase.ERROR:
        return "ERROR"
    return str(replica.state)


class MessageHandler:
    def __init__(self, server: MessageTarget, tick_s: float = 2.0) -> None:
        self.server = server
        self.tick_s = tick_s
        self.handled = 0  # messages acted on (not counting stale or unknown ones)
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], float] = {}
        self._watch: Watch | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="messages", daemon=True)

    # --- life cycle -----------------------------------------------------------------------------
    def watch(self, ctx: ClusterContext) -> None:
        """Start watching this server's MESSAGES (once; later calls only wake the thread)."""
        if self._watch is None:
            self._watch = zk_messages.watch_messages(
                ctx.client, ctx.paths, self.server.instance_id, self._on_children
            )
            self._thread.start()
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.ident is not None:
            self._thread.join(timeout)

    def _on_children(self, children: list[str]) -> bool:
        if self._stop.is_set():
            return False
        if children:
            self._wake.set()
        return True

    # --- the thread -------------------------------------------------------------------------------
    def _loop(self) -> None:
        backoff = Backoff(first=self.tick_s, cap=max(self.tick_s, 10.0))
        throttle = LogThrottle(every_s=60.0)
        wait = self.tick_s
        while not self._stop.is_set():
            self._wake.wait(wait)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.handle_all()
                backoff.reset()
                wait = self.tick_s
            except Exception as exc:
                wait = backoff.next_delay()
                reason = outage_reason(exc)
                key = type(exc).__name__ if reason is not None else repr(exc)
                write, held = throttle.allow(key, time.monotonic())
                me = self.server.instance_id
                if write and reason is not None:
                    log.warning("%s: messages: %s; retrying (%d held back)", me, reason, held)
                elif write:
                    log.exception("%s: handling messages failed; retrying", me)

    def handle_all(self) -> int:
        """Handle every waiting message; returns how many were acted on."""
        ctx = self.server.ctx()
        acted = 0
        for msg_id in zk_messages.message_ids(ctx.client, ctx.paths, self.server.instance_id):
            if self._stop.is_set():
                break
            acted += self._handle(ctx, msg_id)
        return acted

    def _handle(self, ctx: ClusterContext, msg_id: str) -> int:
        me = self.server.instance_id
        try:
            record = zk_messages.read_message(ctx.client, ctx.paths, me, msg_id)
        except ZNRecordError as exc:
            log.error("%s: message %s is unreadable (%s); deleting it", me, msg_id, exc)
            zk_messages.delete_message(ctx.client, ctx.paths, me, msg_id)
            return 0
        if record is None:
            return 0
        session = self.server.session or ""
        target_session = record.simple_fields.get(zk_messages.TGT_SESSION_ID)
        if target_session and target_session != session:
            log.info("%s: message %s was for session %s; discarded", me, msg_id, target_session)
            zk_messages.delete_message(ctx.client, ctx.paths, me, msg_id)
            return 0
        if not zk_messages.mark_read(ctx.client, ctx.paths, me, msg_id, session, ctx.now_ms()):
            return 0
        acted = 0
        request = zk_messages.parse_force_commit(record)
        transition = zk_messages.parse_state_transition(record)
        if request is not None:
            forced = self.force_commit(request.table, request.segments)
            log.info(
                "%s: FORCE_COMMIT %s of %s: forcing %s", me, msg_id, request.table, forced or "none"
            )
            acted = 1
        elif transition is not None:
            acted = self.state_transition(msg_id, transition)
        else:
            simple = record.simple_fields
            log.warning(
                "%s: message %s of type %s/%s is not handled here; deleting it",
                me,
                msg_id,
                simple.get(zk_messages.MSG_TYPE),
                simple.get(zk_messages.MSG_SUBTYPE),
            )
        # Counted before the delete: a message seen gone from ZooKeeper has been counted.
        self.handled += acted
        zk_messages.delete_message(ctx.client, ctx.paths, me, msg_id)
        return acted

    # --- STATE_TRANSITION (reset) -------------------------------------------------------------
    def state_transition(self, msg_id: str, request: zk_messages.StateTransitionRequest) -> int:
        """Apply a reset (TO_STATE OFFLINE) to the replica; 1 when it was reset, else 0 (why is
        logged). A replica busy with a transition is waited for (the server's `reset_replica`)."""
        me, table, segment = self.server.instance_id, request.table, request.segment
        what = f"STATE_TRANSITION {msg_id} of {table}/{segment}"
        if request.to_state != zk_messages.OFFLINE:
            log.warning("%s: %s to %s is not handled here; deleting it", me, what, request.to_state)
            return 0
        replica = (self.server.replicas_of(table) or {}).get(segment)
        current = _current_state(replica)
        if replica is not None and request.from_state not in ("", "*", current):
            log.warning(
                "%s: %s from %s is stale: the replica is %s; deleting it",
                me,
                what,
                request.from_state,
                current,
            )
            return 0
        if not self.server.reset_replica(table, segment):
            log.info("%s: %s: this server does not host the replica; deleting it", me, what)
            return 0
        log.info("%s: %s: reset from %s to OFFLINE", me, what, current)
        return 1

    # --- FORCE_COMMIT -----------------------------------------------------------------------------
    def force_commit(self, table: str, segments: tuple[str, ...] | list[str]) -> list[str]:
        """End consumption of the listed segments this server is consuming for `table`; returns
        the segments forced now (those still starting are remembered, see the module contract)."""
        replicas = self.server.replicas_of(table)
        if not replicas:
            return []
        forced: list[str] = []
        woken: dict[int, tuple[StreamProvider, list[int]]] = {}  # by provider: its partitions
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            for segment in segments:
                replica = replicas.get(segment)
                if replica is None:
                    continue
                consumer = replica.consumer
                if consumer is None:
                    if replica.busy:
                        self._pending[(table, segment)] = now + PENDING_TTL_S
                    continue
                if consumer.phase is Phase.CONSUMING:
                    consumer.force_commit(wake=False)
                    provider = consumer.provider
                    woken.setdefault(id(provider), (provider, []))[1].append(
                        consumer.spec.partition
                    )
                    forced.append(segment)
        for provider, partitions in woken.values():  # every flag is set: wake them at once
            with contextlib.suppress(Exception):  # best effort: a fetch's timeout still ends it
                provider.wake_many(partitions)
        return forced

    def consumer_started(self, table: str, segment: str, consumer: SegmentConsumer) -> bool:
        """Called by the server right after it started `segment`'s consumer: a force commit that
        arrived while it was starting is applied now. True when it was."""
        with self._lock:
            self._expire(time.monotonic())
            if self._pending.pop((table, segment), None) is None:
                return False
        consumer.force_commit()
        log.info("%s: %s forced to commit (message came while it started)", table, segment)
        return True

    def _expire(self, now: float) -> None:
        for key in [k for k, until in self._pending.items() if until < now]:
            del self._pending[key]
