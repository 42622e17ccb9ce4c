"""One controller process's loop (`manage.py run_controller`): participant, lead-controller
roles, table views, and the graceful hand-over.

Contract:
- Each step (re-)registers the participant `Controller_<host>_<port>` (tag `controller`) on the
  current session, follows this controller's partitions of leadControllerResource
  (`LeadFollower.sync`), takes part in the cluster leader election and, as leader, assigns the
  resource and publishes its view (`ClusterLeader.step`), then refreshes the EXTERNALVIEW of the
  tables it leads (at most once per `interval`).
- Steps run when a watch fires (the resource's IdealState or config, `/CONTROLLER/LEADER`, the
  live instances, a controller's CURRENTSTATE), when a rebalance delay runs out, and at least
  every `interval` seconds; while ZooKeeper is unreachable they back off (capped at 10 s) and log
  one line a minute per cause.
- When partitions are gained or lost, the completion FSMs of their tables are dropped (rebuilt
  from ZooKeeper on the next call: a segment found COMMITTING or mid-commit is continued by the
  protocol and the healer, never committed twice: every commit step is compare-and-set), and one
  healing run per gained table is asked for at once (trigger "leader", with the claim's
  ZooKeeper mtime as `takeover_ms`: a commit the former lead controller left between its steps
  is finished then, not after MAX_SEGMENT_COMPLETION_TIME). That request and the
  leadership history rows go through a background thread: a slow broker or a locked database
  never holds the loop (and so never delays following or handing over leadership).
- `hand_over` (SIGTERM, SIGINT): answer NOT_LEADER to new protocol calls, wait up to
  CONTROLLER_STOP_COMMIT_WAIT_SECONDS for the calls in flight, then give every partition up
  (CURRENTSTATE emptied, HISTORY HANDOVER "true") and resign the cluster leadership: the cluster
  leader moves the partitions at once, without the rebalance delay.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from django.db import DatabaseError, close_old_connections

from tables.cluster import context
from tables.cluster.context import ClusterContext
from tables.domain.backoff import Backoff, LogThrottle
from tables.domain.leadership import lead_partition
from tables.domain.names import raw_table_name
from tables.models import LeadershipChange
from tables.outages import outage_reason
from tables.zk.election import LeaderElection
from tables.zk.errors import NodeExists, NoNode
from tables.zk.participants import register_participant

from .cluster_leader import CONTROLLER_TAG, ClusterLeader, MasterChange, set_rebalance_delay
from .completion import CompletionManager
from .externalviews import refresh_table_views
from .lead_follower import LeadFollower

__all__ = ["ControllerProcess"]

log = logging.getLogger("tables.controller")
STEP_BACKOFF_CAP_S = 10.0


class ControllerProcess:
    def __init__(
        self,
        host: str,
        port: int,
        manager_factory: Callable[[Callable[[str], bool]], CompletionManager],
        delay_ms: int,
        request_validation: Callable[[list[str], str, int | None], object] | None = None,
    ) -> None:
        self.host, self.port = host, port
        self.instance_id = f"Controller_{host}_{port}"
        self.wake = threading.Event()
        self._wake = self.wake.set  # one callable: kazoo keeps one watcher per path for it
        self.follower = LeadFollower(self.instance_id, self._wake)
        self.election = LeaderElection(f"{host}_{port}", self._wake)
        self.leader = ClusterLeader(self.election, delay_ms, self._wake, self._record)
        self.manager = manager_factory(self.follower.leads)
        self._request_validation = request_validation
        self._views_at = 0.0
        self._jobs: queue.Queue[Callable[[], object]] = queue.Queue()
        self._jobs_thread: threading.Thread | None = None

    def start(self, ctx: ClusterContext) -> None:
        set_rebalance_delay(ctx, self.leader.delay_ms)
        self.follower.watch(ctx.client, ctx.paths)

    def run(self, stop: threading.Event, interval: float) -> None:
        """Step until `stop` is set (`stop` should also set `self.wake`)."""
        backoff = Backoff(first=interval, cap=max(STEP_BACKOFF_CAP_S, interval))
        throttle = LogThrottle(every_s=60.0)
        while not stop.is_set():
            self.wake.clear()
            ok, due_ms = self.step(interval, throttle)
            if ok:
                backoff.reset()
                timeout = interval
            else:
                timeout = backoff.next_delay()
            if due_ms is not None:
                timeout = min(timeout, max(0.05, due_ms / 1000 - time.time()))
            self.wake.wait(timeout)

    def step(self, interval: float, throttle: LogThrottle) -> tuple[bool, int | None]:
        """One round: (succeeded, epoch ms of the next rebalance deadline)."""
        try:
            ctx = context.current()
            try:
                register_participant(
                    ctx.client, ctx.paths, self.instance_id, self.host, self.port, [CONTROLLER_TAG]
                )
            except NodeExists:
                if throttle.allow("older-session", time.monotonic())[0]:
                    log.warning(
                        "%s: an older session still holds the live instance; retrying",
                        self.instance_id,
                    )
                return False, None
            gained, lost = self.follower.sync(ctx.client, ctx.paths)
            due = self.leader.step(ctx)
            self.follower.set_cluster_leader(self.leader.leading)
            if gained or lost:
                self._changed(ctx, gained, lost)
            if time.monotonic() - self._views_at >= interval:
                refresh_table_views(ctx, self.follower.leads)
                self._views_at = time.monotonic()
            return True, due
        except Exception as exc:
            reason = outage_reason(exc)
            key = type(exc).__name__ if reason is not None else repr(exc)
            write, held = throttle.allow(key, time.monotonic())
            if write and reason is not None:
                log.warning("controller step: %s; retrying (%d similar held back)", reason, held)
            elif write:
                log.exception("controller step failed; retrying")
            return False, None

    def _changed(self, ctx: ClusterContext, gained: frozenset[int], lost: frozenset[int]) -> None:
        count = self.follower.partitions
        dropped = self.manager.forget(gained | lost, count)
        log.info(
            "%s: MASTER of %d partition(s) (gained %s, lost %s; %d FSM(s) dropped)",
            self.instance_id,
            len(self.follower.held),
            sorted(gained),
            sorted(lost),
            dropped,
        )
        if not gained or self._request_validation is None:
            return
        try:
            names = ctx.client.get_children(ctx.paths.idealstates)
        except NoNode:
            return
        tables = [
            t
            for t in sorted(names)
            if t.endswith("_REALTIME") and lead_partition(raw_table_name(t), count) in gained
        ]
        if tables:
            request, since = self._request_validation, self.follower.claimed_ms
            self._later(lambda: request(tables, self.instance_id, since))

    def _record(self, changes: list[MasterChange]) -> None:
        """Log the changes and queue them for the history writer (never blocks the loop: a
        database lock must not stall leadership)."""
        for c in changes:
            log.info(
                "leadControllerResource_%d MASTER: %s -> %s (%s)",
                c.partition,
                c.from_controller or "nobody",
                c.to_controller or "nobody",
                c.reason,
            )
        self._later(lambda: self._write_history(changes))

    def _later(self, job: Callable[[], object]) -> None:
        """Run `job` on the background thread (database and broker calls: never on the loop)."""
        if self._jobs_thread is None:
            self._jobs_thread = threading.Thread(
                target=self._run_jobs, name="controller-jobs", daemon=True
            )
            self._jobs_thread.start()
        self._jobs.put(job)

    def _run_jobs(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job()
            except Exception:  # Redis, the broker or the database away: logged, not fatal
                log.warning("controller background job failed", exc_info=True)
            finally:
                close_old_connections()
                self._jobs.task_done()

    def _write_history(self, changes: list[MasterChange]) -> None:
        rows = [
            LeadershipChange(
                partition_id=c.partition,
                from_controller=c.from_controller or "",
                to_controller=c.to_controller or "",
                at=datetime.fromtimestamp(c.at_ms / 1000, tz=UTC),
                reason=c.reason[:500],
                cluster_leader=self.instance_id,
                leaderless_ms=c.leaderless_ms,
            )
            for c in changes
        ]
        try:
            LeadershipChange.objects.bulk_create(rows)
        except DatabaseError:
            log.exception("cannot record %d leadership change(s)", len(rows))

    def flush_jobs(self, timeout_s: float = 5.0) -> None:
        """Wait (bounded) for the queued background jobs (a stop calls it)."""
        deadline = time.monotonic() + timeout_s
        while self._jobs.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.05)

    def hand_over(self, wait_s: float) -> None:
        """The graceful stop's hand-over (see the module docstring)."""
        self.follower.stop_leading()
        if not self.manager.wait_idle(wait_s):
            log.warning("%s: protocol calls still in flight after %.0f s", self.instance_id, wait_s)
        try:
            ctx = context.current()
            lost = self.follower.give_up(ctx.client, ctx.paths)
            self.election.resign(ctx.client, ctx.paths)
        except Exception as exc:  # ZooKeeper away: the session's end moves them after the delay
            log.warning("%s: hand-over failed: %s", self.instance_id, outage_reason(exc) or exc)
            return
        log.info("%s: handed over %d partition(s)", self.instance_id, len(lost))
        self.flush_jobs()
