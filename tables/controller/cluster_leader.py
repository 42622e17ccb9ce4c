"""The cluster leader's work on leadControllerResource: the part of Helix's controller that
assigns the resource's partitions and publishes its EXTERNALVIEW.

Contract:
- Only the controller holding `/CONTROLLER/LEADER` (`tables.zk.election`) writes the resource's
  assignment (IdealState listFields) and EXTERNALVIEW, each by compare-and-set; a write that
  loses a version race is not retried blindly: the next step re-reads and plans again.
- A step reads the live controllers (LIVEINSTANCES with the `controller` tag in their instance
  config), each one's CURRENTSTATE of the resource on its live session, and, for owners that are
  not live, their participant HISTORY (LAST_OFFLINE_TIME, HANDOVER; the leader stamps
  LAST_OFFLINE_TIME when it first sees one gone). Every read leaves a one-shot watch that wakes
  the controller's loop, so a controller's death, a CURRENTSTATE change or a new controller is
  acted on at once; `step` returns when a kept partition's rebalance delay runs out, so the loop
  wakes then too. The delay is the resource IdealState's REBALANCE_DELAY, read at every step as
  Helix does (each controller writes its LEAD_CONTROLLER_REBALANCE_DELAY_MS there at start; an
  operator may change it at run time).
- The EXTERNALVIEW lists, per partition, the live controllers whose CURRENTSTATE holds it as
  MASTER: a controller whose session ended drops out of it at once (its tables have no leader
  until the partition moves, which the console and /metrics show).
- Each change of a partition's MASTER in the view is handed to `record` as a `MasterChange`
  (from, to, why, how long it had none): the leadership history.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from tables.cluster.context import ClusterContext
from tables.domain.lead_assignment import (
    ControllerFacts,
    Move,
    assignment_of,
    assignment_record,
    lead_view,
    masters_of,
    plan,
)
from tables.domain.leadership import (
    DEFAULT_NUM_PARTITIONS,
    LEAD_CONTROLLER_RESOURCE,
    partition_id,
)
from tables.domain.znrecord import ZNRecord
from tables.zk import codec
from tables.zk.election import LeaderElection
from tables.zk.errors import BadVersion, NodeExists, NoNode
from tables.zk.group_commit import update_idealstate
from tables.zk.records import create_record, read_record, write_record
from tables.zk.watches import children_watched, read_watched

from .lead_follower import history_path, participant_history

__all__ = [
    "CONTROLLER_TAG",
    "ClusterLeader",
    "MasterChange",
    "rebalance_delay_ms",
    "set_rebalance_delay",
]

log = logging.getLogger("tables.controller.leadership")

CONTROLLER_TAG = "controller"
CONTROLLER_PREFIX = "Controller_"


@dataclass(frozen=True)
class MasterChange:
    partition: int
    from_controller: str | None
    to_controller: str | None
    reason: str
    at_ms: int
    leaderless_ms: int | None


@dataclass
class _Controllers:
    facts: dict[str, ControllerFacts]
    held: dict[str, frozenset[int]]  # live controller -> partitions its CURRENTSTATE holds


class ClusterLeader:
    """The cluster-leader role of one controller."""

    def __init__(
        self,
        election: LeaderElection,
        delay_ms: int,
        wake: Callable[[], None],
        record: Callable[[list[MasterChange]], None],
    ) -> None:
        self.election = election
        self.delay_ms = delay_ms
        self._wake = wake
        self._record = record
        self.leading = False
        self._masters: dict[int, str | None] = {}
        self._lost_at: dict[int, int] = {}
        self._why: dict[int, str] = {}
        self._last: dict[int, str] = {}  # the last MASTER each partition had

    def step(self, ctx: ClusterContext) -> int | None:
        """Lead if possible and, as leader, bring view and assignment up to date. Returns the
        epoch ms of the next rebalance deadline, if one is pending."""
        leading = self.election.try_lead(ctx.client, ctx.paths)
        if leading and not self.leading:
            log.info("%s is the cluster leader", self.election.leader_id)
        if not leading:
            self.leading = False
            return None
        ideal = read_record(ctx.client, ctx.paths.idealstate(LEAD_CONTROLLER_RESOURCE))
        if ideal is None:
            return None
        count = int(ideal.record.simple_fields.get("NUM_PARTITIONS", DEFAULT_NUM_PARTITIONS))
        if not self.leading:
            self._take_over(ctx, count)
            self.leading = True
        now = ctx.now_ms()
        current = assignment_of(ideal.record, count)
        controllers = self._controllers(ctx, current, now)
        self._publish_view(ctx, count, controllers, now)
        holders: dict[int, frozenset[str]] = {}
        for name, partitions in controllers.held.items():
            for i in partitions:
                holders[i] = holders.get(i, frozenset()) | {name}
        delay = rebalance_delay_ms(ideal.record, self.delay_ms)
        result = plan(count, current, controllers.facts, holders, delay, now)
        if result.changed:
            self._assign(ctx, ideal.record, ideal.version, result.assignment, result.moves)
        return result.next_due_ms

    # --- reads --------------------------------------------------------------------------------
    def _take_over(self, ctx: ClusterContext, count: int) -> None:
        """The masters the previous leader published are where the history continues from."""
        view = read_record(ctx.client, ctx.paths.externalview(LEAD_CONTROLLER_RESOURCE))
        self._masters = masters_of(view.record if view else None, count)
        self._lost_at, self._why = {}, {}

    def _controllers(
        self, ctx: ClusterContext, current: dict[int, str | None], now: int
    ) -> _Controllers:
        client, paths = ctx.client, ctx.paths
        live = children_watched(client, paths.liveinstances, self._wake)
        out = _Controllers({}, {})
        for name in sorted(n for n in live if n.startswith(CONTROLLER_PREFIX)):
            config = read_record(client, paths.participant_config(name))
            tags = config.record.list_fields.get("TAG_LIST", []) if config else []
            if CONTROLLER_TAG not in tags:
                continue
            found = read_watched(client, paths.liveinstance(name), self._wake)
            if found is None:
                continue
            session = codec.decode(found[0]).simple_fields.get("SESSION_ID", "")
            enabled = config.record.simple_fields.get("HELIX_ENABLED") != "false"
            out.facts[name] = ControllerFacts(live=True, enabled=enabled)
            out.held[name] = self._held_by(ctx, name, session)
        for name in sorted({o for o in current.values() if o} - set(out.facts)):
            facts = self._absent(ctx, name, now)
            if facts is not None:
                out.facts[name] = facts
        return out

    def _held_by(self, ctx: ClusterContext, name: str, session: str) -> frozenset[int]:
        path = ctx.paths.currentstate(name, session, LEAD_CONTROLLER_RESOURCE)
        found = read_watched(ctx.client, path, self._wake)
        if found is None or not found[0]:
            return frozenset()
        held = set()
        for partition, fields in codec.decode(found[0]).map_fields.items():
            if fields.get("CURRENT_STATE") == "MASTER":
                try:
                    held.add(partition_id(partition))
                except ValueError:
                    continue
        return frozenset(held)

    def _absent(self, ctx: ClusterContext, name: str, now: int) -> ControllerFacts | None:
        """What is known of an owner that is not live (None: it is no participant any more)."""
        config = read_record(ctx.client, ctx.paths.participant_config(name))
        if config is None:
            return None
        history = read_record(ctx.client, history_path(ctx.paths, name))
        fields = history.record.simple_fields if history else {}
        online = _int(fields.get("LAST_ONLINE_TIME"))
        offline = _int(fields.get("LAST_OFFLINE_TIME"))
        if offline is None or (online is not None and offline < online):
            participant_history(ctx.client, ctx.paths, name, LAST_OFFLINE_TIME=str(now))
            offline = now
        return ControllerFacts(
            live=False,
            enabled=config.record.simple_fields.get("HELIX_ENABLED") != "false",
            offline_since_ms=offline,
            handed_over=fields.get("HANDOVER") == "true",
        )

    # --- writes -------------------------------------------------------------------------------
    def _publish_view(
        self, ctx: ClusterContext, count: int, controllers: _Controllers, now: int
    ) -> None:
        view = lead_view(count, controllers.held)
        path = ctx.paths.externalview(LEAD_CONTROLLER_RESOURCE)
        found = read_record(ctx.client, path)
        try:
            if found is None:
                create_record(ctx.client, path, view)
            elif found.record.map_fields != view.map_fields:
                write_record(ctx.client, path, view, found.version)
            else:
                return
        except (BadVersion, NodeExists):
            self._wake()
            return
        self._note_changes(masters_of(view, count), controllers, now)

    def _note_changes(
        self, masters: dict[int, str | None], controllers: _Controllers, now: int
    ) -> None:
        changes = []
        for i, master in masters.items():
            before = self._masters.get(i)
            if master == before:
                continue
            if master is None:
                self._lost_at[i] = now
                reason = self._why.get(i) or self._loss_reason(before, controllers)
                changes.append(MasterChange(i, before, None, reason, now, None))
            else:
                since = self._lost_at.pop(i, None)
                reason = self._why.pop(i, None) or "assigned"
                gap = now - since if since is not None else None
                previous = before or self._last.get(i)
                changes.append(MasterChange(i, previous, master, reason, now, gap))
            if (master or before) is not None:
                self._last[i] = master or before
            self._masters[i] = master
        if changes:
            self._record(changes)

    @staticmethod
    def _loss_reason(before: str | None, controllers: _Controllers) -> str:
        facts = controllers.facts.get(before or "")
        if facts is None or not facts.live:
            if facts is not None and facts.handed_over:
                return f"{before} shut down and handed its partitions over"
            return f"{before} is not live (its ZooKeeper session ended)"
        return f"{before} gave it up"

    def _assign(
        self,
        ctx: ClusterContext,
        ideal: ZNRecord,
        version: int,
        assignment: dict[int, str | None],
        moves: list[Move],
    ) -> None:
        path = ctx.paths.idealstate(LEAD_CONTROLLER_RESOURCE)
        try:
            write_record(ctx.client, path, assignment_record(ideal, assignment), version)
        except (BadVersion, NoNode):
            self._wake()
            return
        self._wake()  # a release is followed by the assignment on the next step
        for move in moves:
            if move.from_controller is not None or move.partition not in self._why:
                self._why[move.partition] = move.reason
            log.info(
                "leadControllerResource_%d: %s -> %s (%s)",
                move.partition,
                move.from_controller or "nobody",
                move.to_controller or "nobody",
                move.reason,
            )


def rebalance_delay_ms(ideal: ZNRecord, default: int) -> int:
    """The resource's REBALANCE_DELAY (0 when DELAY_REBALANCE_ENABLED is "false"), as Helix
    reads it from the IdealState; `default` when it is missing or not a number."""
    if ideal.simple_fields.get("DELAY_REBALANCE_ENABLED") == "false":
        return 0
    value = _int(ideal.simple_fields.get("REBALANCE_DELAY"))
    return default if value is None else max(0, value)


def set_rebalance_delay(ctx: ClusterContext, delay_ms: int) -> None:
    """Write `delay_ms` as the resource's REBALANCE_DELAY (each controller does at start, as
    Pinot's controllers rewrite the resource's settings)."""
    wanted = str(delay_ms)

    def put(record: ZNRecord) -> ZNRecord | None:
        if record.simple_fields.get("REBALANCE_DELAY") == wanted:
            return None
        record.simple_fields["REBALANCE_DELAY"] = wanted
        return record

    update_idealstate(ctx.client, ctx.paths.idealstate(LEAD_CONTROLLER_RESOURCE), put)


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
