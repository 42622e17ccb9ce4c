"""The lead controller resource's assignment (tables.domain.lead_assignment): the cluster leader's
`plan`, each controller's `follow`, the EXTERNALVIEW and the IdealState helpers.

The last part is a seeded simulation of the cluster leader and the controllers with the
interleavings ZooKeeper allows: the leader's read-and-plan apart from its compare-and-set write,
controllers that claim a partition in their CURRENTSTATE from a possibly stale view and confirm it
by a later read (`tables.controller.lead_follower`), deaths, restarts, joins, hand-overs, disabling
and time passing. After every step no partition may have two acting MASTERs; once the events stop,
the assignment must settle evenly with one MASTER per partition.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pytest

from tables.domain.lead_assignment import (
    DEFAULT_REBALANCE_DELAY_MS,
    ControllerFacts,
    Move,
    assignment_of,
    assignment_record,
    follow,
    lead_view,
    masters_of,
    plan,
)
from tables.domain.leadership import LEAD_CONTROLLER_RESOURCE, partition_name
from tables.domain.znrecord import ZNRecord

N = 24
DELAY = DEFAULT_REBALANCE_DELAY_MS
T0 = 1_700_000_000_000
A, B, C, D = "Controller_a_9000", "Controller_b_9000", "Controller_c_9000", "Controller_d_9000"
EMPTY: frozenset[int] = frozenset()
# The simulation's events, restarts and enable flips weighted up: they make the races.
EVENTS = {"die": 1, "start": 3, "join": 1, "hand": 1, "close": 1, "time": 1, "able": 2, "remove": 1}

Assignment = dict[int, str | None]


def up(enabled: bool = True) -> ControllerFacts:
    return ControllerFacts(live=True, enabled=enabled)


def down(since: int = T0, **kw: bool) -> ControllerFacts:
    return ControllerFacts(live=False, offline_since_ms=since, **kw)


def counts(assignment: Mapping[int, str | None]) -> Counter[str]:
    return Counter(o for o in assignment.values() if o is not None)


def owned_by(assignment: Mapping[int, str | None], name: str) -> frozenset[int]:
    return frozenset(i for i, o in assignment.items() if o == name)


def holders_of(held: Mapping[str, Iterable[int]]) -> dict[int, frozenset[str]]:
    out: dict[int, frozenset[str]] = {}
    for name, partitions in held.items():
        for i in partitions:
            out[i] = out.get(i, EMPTY) | {name}
    return out


def as_held(assignment: Assignment, names: Iterable[str]) -> dict[int, frozenset[str]]:
    """Holders when `names` have followed `assignment` (hold exactly what is theirs)."""
    return holders_of({n: owned_by(assignment, n) for n in names})


def settle(
    current: Assignment, ctl: Mapping[str, ControllerFacts], delay: int, now: int
) -> tuple[Assignment, list[Move]]:
    """Plan until nothing changes, the live controllers following every plan at once."""
    moves: list[Move] = []
    followers = [n for n, f in ctl.items() if f.live]
    for _ in range(6):
        result = plan(N, current, ctl, as_held(current, followers), delay, now)
        if not result.changed:
            return current, moves
        current, moves = result.assignment, moves + result.moves
    raise AssertionError(f"no steady state after 6 plans: {counts(current)}")


def even(*names: str) -> Assignment:
    current, _ = settle(dict.fromkeys(range(N)), {n: up() for n in names}, DELAY, T0)
    return current


# --- plan ---------------------------------------------------------------------------------------
def test_24_partitions_over_3_controllers_from_nothing_are_8_8_8():
    ctl = {A: up(), B: up(), C: up()}
    result = plan(N, dict.fromkeys(range(N)), ctl, {}, DELAY, T0)
    assert counts(result.assignment) == {A: 8, B: 8, C: 8}
    assert sorted(m.partition for m in result.moves) == list(range(N))
    assert all(m.from_controller is None and m.reason == "unassigned" for m in result.moves)
    assert all(m.to_controller == result.assignment[m.partition] for m in result.moves)
    assert result.next_due_ms is None


def test_a_fourth_controller_takes_6_released_first_then_assigned_once_let_go():
    before = even(A, B, C)
    ctl = {A: up(), B: up(), C: up(), D: up()}
    old_holders = as_held(before, [A, B, C])
    first = plan(N, before, ctl, old_holders, DELAY, T0)
    released = {m.partition for m in first.moves}
    assert counts(first.assignment) == {A: 6, B: 6, C: 6}
    assert len(released) == 6
    for move in first.moves:
        assert move.from_controller == before[move.partition]
        assert move.to_controller is None
        assert "rebalance" in move.reason and D in move.reason
    assert all(first.assignment[i] == before[i] for i in range(N) if i not in released)

    # Nobody has let go yet: D gets nothing.
    assert not plan(N, first.assignment, ctl, old_holders, DELAY, T0).changed

    # A follows (gives up its 2); B and C lag: only A's 2 go to D.
    take, drop = follow(A, first.assignment, owned_by(before, A), True)
    assert take == EMPTY and drop == owned_by(before, A) & released and len(drop) == 2
    lagging = holders_of(
        {A: owned_by(first.assignment, A), B: owned_by(before, B), C: owned_by(before, C)}
    )
    second = plan(N, first.assignment, ctl, lagging, DELAY, T0)
    assert {m.partition for m in second.moves} == drop
    assert all(m.from_controller is None and m.to_controller == D for m in second.moves)

    final, rest = settle(second.assignment, ctl, DELAY, T0)
    assert counts(final) == {A: 6, B: 6, C: 6, D: 6}
    assert {i for i in range(N) if final[i] != before[i]} == released  # 6 moves, no more
    assert {m.partition for m in rest} == released - drop


def test_a_newcomer_gets_only_what_evens_the_counts():
    before: Assignment = {i: A if i < 12 else B for i in range(N)}
    after, _ = settle(before, {A: up(), B: up(), C: up()}, DELAY, T0)
    assert counts(after) == {A: 8, B: 8, C: 8}
    assert sum(1 for i in range(N) if after[i] != before[i]) == 8
    assert owned_by(after, A) <= owned_by(before, A)
    assert owned_by(after, B) <= owned_by(before, B)


def test_the_remainder_goes_to_those_already_holding_most():
    before: Assignment = {i: A if i < 10 else B if i < 17 else C for i in range(N)}
    after, _ = settle(before, {A: up(), B: up(), C: up(), D: up()}, DELAY, T0)
    assert counts(after) == {A: 6, B: 6, C: 6, D: 6}
    before25 = {**before, 24: C}
    result = plan(25, before25, {A: up(), B: up(), C: up()}, {}, DELAY, T0)
    # 25 over 3: A held most, it keeps 9; B 8; C had 8 and keeps them: 1 move from A to B.
    assert counts(result.assignment) == {A: 9, B: 7, C: 8}
    assert [(m.from_controller, m.to_controller) for m in result.moves] == [(A, None)]


def test_a_dead_controller_with_delay_0_loses_its_partitions_at_once():
    before = even(A, B, C)
    ctl = {A: up(), B: up(), C: down(T0)}

    first = plan(N, before, ctl, as_held(before, [A, B]), 0, T0)
    assert {m.partition for m in first.moves} == owned_by(before, C)
    assert first.next_due_ms is None
    after, moves = settle(first.assignment, ctl, 0, T0)  # no time passes
    for move in first.moves:
        assert (move.from_controller, move.to_controller) == (C, None)
        assert (
            move.reason
            == f"{C} is not live (rebalance delay 0): released for {after[move.partition]}"
        )
    assert counts(after) == {A: 12, B: 12}
    assert owned_by(after, A) >= owned_by(before, A)
    assert owned_by(after, B) >= owned_by(before, B)
    assert {m.partition for m in moves} == owned_by(before, C)
    assert all(m.from_controller is None and m.to_controller in (A, B) for m in moves)


def test_a_dead_controller_keeps_its_partitions_for_the_delay_then_they_move():
    before = even(A, B, C)
    ctl = {A: up(), B: up(), C: down(T0)}
    holders = as_held(before, [A, B])

    for now in (T0, T0 + 1_000, T0 + DELAY - 1):
        result = plan(N, before, ctl, holders, DELAY, now)
        assert not result.changed, now
        assert result.next_due_ms == T0 + DELAY

    due = plan(N, before, ctl, holders, DELAY, T0 + DELAY)
    assert {m.partition for m in due.moves} == owned_by(before, C)
    assert all(m.reason.startswith(f"{C} not live for 300 s") for m in due.moves)
    assert due.next_due_ms is None
    after, _ = settle(due.assignment, ctl, DELAY, T0 + DELAY)
    assert counts(after) == {A: 12, B: 12}


def test_a_kept_partition_set_does_not_count_in_the_live_spread():
    # C is away within the delay and D joins: the 16 partitions not kept go 6/5/5 or so.
    before = even(A, B, C)
    ctl = {A: up(), B: up(), C: down(T0), D: up()}
    after, _ = settle(before, ctl, DELAY, T0 + 10)
    assert owned_by(after, C) == owned_by(before, C)
    live_counts = sorted(counts(after)[n] for n in (A, B, D))
    assert sum(live_counts) == 16 and live_counts[-1] - live_counts[0] <= 1


def test_the_earliest_deadline_is_reported():
    before: Assignment = {i: [A, B, C][i % 3] for i in range(N)}
    ctl = {A: up(), B: down(T0 - 5_000), C: down(T0 - 1_000)}
    result = plan(N, before, ctl, {}, DELAY, T0)
    assert not result.changed
    assert result.next_due_ms == T0 - 5_000 + DELAY


def test_a_controller_back_within_the_delay_keeps_all_its_partitions():
    before = even(A, B, C)
    away = plan(N, before, {A: up(), B: up(), C: down(T0)}, as_held(before, [A, B]), DELAY, T0)
    assert not away.changed

    back = {A: up(), B: up(), C: up()}
    result = plan(N, before, back, as_held(before, [A, B]), DELAY, T0 + 100_000)
    assert not result.changed and result.next_due_ms is None
    take, drop = follow(C, result.assignment, EMPTY, True)
    assert take == owned_by(before, C) and drop == EMPTY and len(take) == 8


def test_a_hand_over_moves_at_once_despite_the_delay():
    before = even(A, B, C)
    ctl = {A: up(), B: up(), C: down(T0, handed_over=True)}
    first = plan(N, before, ctl, as_held(before, [A, B]), DELAY, T0)
    assert {m.partition for m in first.moves} == owned_by(before, C)
    assert all("handed its partitions over" in m.reason for m in first.moves)
    after, _ = settle(first.assignment, ctl, DELAY, T0)
    assert counts(after) == {A: 12, B: 12}


def test_a_live_controller_that_handed_over_is_given_nothing():
    before = even(A, B, C)
    ctl = {A: up(), B: up(), C: ControllerFacts(live=True, handed_over=True)}
    after, _ = settle(before, ctl, DELAY, T0)
    assert counts(after) == {A: 12, B: 12}


def test_a_disabled_live_controller_is_released_first_and_moved_once_it_lets_go():
    before = even(A, B, C)
    ctl = {A: up(), B: up(), C: up(enabled=False)}
    holding = as_held(before, [A, B, C])

    first = plan(N, before, ctl, holding, DELAY, T0)
    assert {m.partition for m in first.moves} == owned_by(before, C)
    assert all(m.to_controller is None and "disabled" in m.reason for m in first.moves)
    # C still holds them: nobody else gets them.
    assert not plan(N, first.assignment, ctl, holding, DELAY, T0).changed
    # C follows (not its own any more) and lets go; then they move.
    _, drop = follow(C, first.assignment, owned_by(before, C), True)
    assert drop == owned_by(before, C)
    after, _ = settle(first.assignment, ctl, DELAY, T0)
    assert counts(after) == {A: 12, B: 12}


def test_a_disabled_controller_that_is_not_live_loses_its_partitions_despite_the_delay():
    before = even(A, B, C)
    ctl = {A: up(), B: up(), C: down(T0, enabled=False)}
    after, moves = settle(before, ctl, DELAY, T0)
    assert counts(after) == {A: 12, B: 12}
    assert any("disabled" in m.reason for m in moves)


def test_an_owner_no_longer_in_the_controllers_map_loses_its_partitions_despite_the_delay():
    before = even(A, B, C)
    ctl = {A: up(), B: up()}
    first = plan(N, before, ctl, as_held(before, [A, B]), DELAY, T0)
    assert {m.partition for m in first.moves} == owned_by(before, C)
    assert all("no longer a controller" in m.reason for m in first.moves)
    assert first.next_due_ms is None
    assert counts(settle(first.assignment, ctl, DELAY, T0)[0]) == {A: 12, B: 12}


def test_without_live_controllers_nothing_changes():
    before = even(A, B, C)
    for ctl in ({}, {A: down(T0), B: down(T0), C: down(T0)}, {A: up(enabled=False)}):
        result = plan(N, before, ctl, {}, 0, T0 + 10 * DELAY)
        assert not result.changed and result.assignment == before
    kept = plan(N, before, {A: down(T0), B: down(T0), C: down(T0)}, {}, DELAY, T0)
    assert kept.next_due_ms == T0 + DELAY and not kept.changed


def test_an_unassigned_partition_still_held_elsewhere_waits():
    current: Assignment = {i: A if i < 12 else B for i in range(N)}
    current[0] = None  # A must get it back, but B still holds it (a lagging release)
    ctl = {A: up(), B: up()}
    waiting = plan(N, current, ctl, {0: frozenset({B})}, DELAY, T0)
    assert not waiting.changed
    # Held by the taker itself only: given at once.
    mine = plan(N, current, ctl, {0: frozenset({A})}, DELAY, T0)
    assert mine.moves == [Move(0, None, A, "unassigned")]


# --- follow -------------------------------------------------------------------------------------
def test_follow_takes_what_is_assigned_and_gives_up_the_rest():
    assignment: Assignment = {0: A, 1: A, 2: B, 3: None}
    assert follow(A, assignment, frozenset({1, 2, 3}), True) == ({0}, {2, 3})
    assert follow(A, assignment, frozenset({0, 1}), True) == (EMPTY, EMPTY)


def test_follow_gives_up_everything_while_the_resource_is_disabled():
    assignment: Assignment = {0: A, 1: A}
    assert follow(A, assignment, frozenset({0, 5}), False) == (EMPTY, {0, 5})
    assert follow(A, assignment, EMPTY, False) == (EMPTY, EMPTY)


# --- the EXTERNALVIEW and the IdealState --------------------------------------------------------
def test_lead_view_lists_each_partitions_masters_from_the_currentstates():
    view = lead_view(N, {B: frozenset({0, 1}), A: frozenset({1, 30}), C: EMPTY})
    assert view.id == LEAD_CONTROLLER_RESOURCE
    assert view.simple_fields == {"BUCKET_SIZE": "0", "STATE_MODEL_DEF_REF": "MasterSlave"}
    assert set(view.map_fields) == {partition_name(i) for i in range(N)}
    assert view.map_fields[partition_name(0)] == {B: "MASTER"}
    assert view.map_fields[partition_name(1)] == {A: "MASTER", B: "MASTER"}
    assert view.map_fields[partition_name(2)] == {}
    masters = masters_of(view, N)
    assert masters[0] == B and masters[1] == A and masters[2] is None
    assert masters_of(None, 3) == {0: None, 1: None, 2: None}


def test_the_assignment_round_trips_through_the_idealstate_list_fields():
    ideal = ZNRecord(
        id=LEAD_CONTROLLER_RESOURCE,
        simple_fields={"NUM_PARTITIONS": "24", "REBALANCE_DELAY": "300000"},
        list_fields={partition_name(0): ["old"]},
    )
    wanted = {i: [A, B, None][i % 3] for i in range(N)}
    record = assignment_record(ideal, wanted)

    assert assignment_of(record, N) == wanted
    assert record.list_fields[partition_name(2)] == []
    assert record.list_fields[partition_name(0)] == [A]
    assert record.simple_fields == ideal.simple_fields
    assert ideal.list_fields == {partition_name(0): ["old"]}  # the input is not changed
    assert assignment_of(ZNRecord(id=LEAD_CONTROLLER_RESOURCE), 2) == {0: None, 1: None}
    assert ZNRecord.from_dict(record.to_dict()) == record


# --- simulation ---------------------------------------------------------------------------------
@dataclass
class Node:
    """One controller as the simulation sees it (see tables.controller.lead_follower)."""

    live: bool = True
    enabled: bool = True  # its instance config's HELIX_ENABLED
    offline_since: int | None = None
    handed_over: bool = False
    stopping: bool = False
    removed: bool = False
    cs: frozenset[int] = EMPTY  # its CURRENTSTATE: what the cluster leader sees
    acting: frozenset[int] = EMPTY  # in memory: the partitions it answers as leader for
    claimed: frozenset[int] = EMPTY  # written to its CURRENTSTATE, not yet confirmed
    seen: int = 0  # the newest assignment version it has read (reads never go back)


@dataclass
class World:
    rng: random.Random
    delay: int
    now: int = T0
    versions: list[Assignment] = field(default_factory=lambda: [dict.fromkeys(range(N))])
    nodes: dict[str, Node] = field(default_factory=dict)
    planned: tuple[int, Assignment] | None = None  # the leader's plan, read but not written
    log: list[str] = field(default_factory=list)

    @property
    def latest(self) -> int:
        return len(self.versions) - 1

    def facts(self) -> dict[str, ControllerFacts]:
        """As the cluster leader reads them (tables.controller.cluster_leader)."""
        out = {}
        for name, n in self.nodes.items():
            if n.live:
                out[name] = ControllerFacts(live=True, enabled=n.enabled)
            elif not n.removed:
                out[name] = ControllerFacts(False, n.enabled, n.offline_since, n.handed_over)
        return out

    def holders(self) -> dict[int, frozenset[str]]:
        return holders_of({name: n.cs for name, n in self.nodes.items() if n.live})

    # The cluster leader: read and plan; later, compare-and-set.
    def plan_read(self) -> None:
        if self.planned is not None:  # busy writing the last one
            return
        result = plan(N, self.versions[-1], self.facts(), self.holders(), self.delay, self.now)
        self.planned = (self.latest, result.assignment) if result.changed else None
        moves = [(m.partition, m.from_controller, m.to_controller) for m in result.moves]
        self.log.append(f"leader reads v{self.latest}, plans {moves}")

    def plan_write(self) -> None:
        if self.planned is not None and self.planned[0] == self.latest:
            self.versions.append(self.planned[1])
            self.log.append(f"leader writes v{self.latest}")
        self.planned = None

    # A controller: a watch drops at once; a take is claimed, then confirmed by a later read.
    def read(self, node: Node, fresh: bool) -> Assignment:
        node.seen = self.latest if fresh else self.rng.randint(node.seen, self.latest)
        return self.versions[node.seen]

    def watch(self, name: str, fresh: bool = False) -> None:
        node = self.nodes[name]
        _, lost = follow(name, self.read(node, fresh), node.acting, True)
        node.acting -= lost
        self.log.append(f"{name} watch v{node.seen}: drops {sorted(lost)}")

    def claim(self, name: str, fresh: bool = False) -> None:
        node = self.nodes[name]
        if node.stopping or node.claimed:
            return
        take, drop = follow(name, self.read(node, fresh), node.acting, True)
        node.acting -= drop
        node.cs, node.claimed = node.acting | take, take
        self.log.append(f"{name} claims {sorted(take)} from v{node.seen}")
        node.seen = self.latest  # a read after one's own write sees all that came before it

    def confirm(self, name: str, fresh: bool = False) -> None:
        node = self.nodes[name]
        if not node.claimed:
            return
        view = self.read(node, fresh)
        _, lost = follow(name, view, node.acting, True)
        got = frozenset(i for i in node.claimed if view.get(i) == name)
        node.acting = (node.acting - lost) | got
        node.cs, node.claimed = node.acting, EMPTY
        self.log.append(f"{name} confirms {sorted(got)} at v{node.seen}")

    # Events.
    def start(self, name: str) -> None:
        node = self.nodes.setdefault(name, Node())
        node.live, node.offline_since, node.handed_over, node.stopping = True, None, False, False
        node.cs = node.acting = node.claimed = EMPTY
        node.seen = self.rng.randint(max(0, self.latest - 2), self.latest)
        self.log.append(f"{name} starts (new session)")

    def end(self, name: str, handed_over: bool = False) -> None:
        """A death (the session ends) or a hand-over (it gives all up; its session ends later)."""
        node = self.nodes[name]
        node.live = node.stopping = node.handed_over = handed_over
        node.offline_since, node.cs, node.acting, node.claimed = self.now, EMPTY, EMPTY, EMPTY
        self.log.append(f"{name} {'hands over' if handed_over else 'dies'}")

    def close(self, name: str) -> None:
        self.nodes[name].live = self.nodes[name].stopping = False
        self.log.append(f"{name} closes its session")

    def event(self) -> None:
        rng = self.rng
        running = [n for n, x in self.nodes.items() if x.live and not x.stopping]
        dead = [n for n, x in self.nodes.items() if not x.live and not x.removed]
        stopping = [n for n, x in self.nodes.items() if x.live and x.stopping]
        kind = rng.choices(list(EVENTS), list(EVENTS.values()))[0]
        if kind == "die" and running:
            self.end(rng.choice(running))
        elif kind == "start" and dead:
            self.start(rng.choice(dead))
        elif kind == "join" and len(self.nodes) < 7:
            self.start(f"Controller_{len(self.nodes)}_9000")
        elif kind == "hand" and running:
            self.end(rng.choice(running), handed_over=True)
        elif kind == "close" and stopping:
            self.close(rng.choice(stopping))
        elif kind == "time":
            self.now += rng.choice([1_000, self.delay // 2, self.delay + 1])
            self.log.append(f"time {self.now - T0}")
        elif kind == "able":
            name = rng.choice(sorted(self.nodes))
            self.nodes[name].enabled = not self.nodes[name].enabled
            self.log.append(f"{name} enabled={self.nodes[name].enabled}")
        elif kind == "remove" and dead:
            name = rng.choice(dead)
            self.nodes[name].removed = True
            self.log.append(f"{name} removed")

    def step(self) -> None:
        r = self.rng.random()
        live = [n for n, x in self.nodes.items() if x.live]
        if r < 0.2:
            self.event()
        elif r < 0.4:
            self.plan_read()
        elif r < 0.5:
            self.plan_write()
        elif live:
            name = self.rng.choice(live)
            self.rng.choice([self.watch, self.claim, self.confirm, self.sync])(name)

    def sync(self, name: str) -> None:
        self.claim(name)
        self.confirm(name)

    def check_one_master_each(self) -> None:
        acting: dict[int, str] = {}
        for name, node in self.nodes.items():
            if not node.live:
                continue
            assert node.acting <= node.cs, f"{name} acts beyond its CURRENTSTATE"
            for i in node.acting:
                assert i not in acting, f"partition {i}: {acting[i]} and {name}\n" + "\n".join(
                    self.log[-40:]
                )
                acting[i] = name

    def settle(self) -> None:
        """Rounds without events: the leader plans and writes, every controller follows."""
        for name in [n for n, x in self.nodes.items() if x.stopping]:
            self.close(name)
        for _ in range(10):
            before = (self.latest, {n: (x.cs, x.acting) for n, x in self.nodes.items()})
            self.plan_read()
            self.plan_write()
            for name in self.rng.sample(sorted(self.nodes), len(self.nodes)):
                if self.nodes[name].live:
                    self.watch(name, fresh=True)
                    self.claim(name, fresh=True)
                    self.confirm(name, fresh=True)
                self.check_one_master_each()
            if before == (self.latest, {n: (x.cs, x.acting) for n, x in self.nodes.items()}):
                return
        raise AssertionError("no steady state after 10 rounds\n" + "\n".join(self.log[-60:]))

    def check_settled(self) -> None:
        facts, current = self.facts(), self.versions[-1]
        leaders = sorted(n for n, f in facts.items() if f.live and f.enabled)
        if not leaders:
            return
        kept: dict[int, int] = {}
        for i, owner in current.items():
            f = facts.get(owner or "")
            if f and not f.live and f.enabled and not f.handed_over and self.delay > 0:
                assert f.offline_since_ms is not None
                if f.offline_since_ms + self.delay > self.now:
                    kept[i] = f.offline_since_ms + self.delay
        acting = {n: x.acting for n, x in self.nodes.items() if x.live}
        for i in range(N):
            if i in kept:
                continue
            assert current[i] in leaders, (i, current[i], self.log[-40:])
            assert [n for n, held in acting.items() if i in held] == [current[i]], i
        spread = [sum(1 for i in range(N) if i not in kept and current[i] == n) for n in leaders]
        assert max(spread) - min(spread) <= 1, (spread, leaders)
        result = plan(N, current, facts, self.holders(), self.delay, self.now)
        assert result.next_due_ms == (min(kept.values()) if kept else None)


@pytest.mark.parametrize("delay", [0, DELAY])
@pytest.mark.parametrize("seed", range(40))
def test_simulation_never_two_masters_and_settles_evenly(seed, delay):
    world = World(random.Random(seed * 2 + (delay > 0)), delay)
    for i in range(3):
        world.start(f"Controller_{i}_9000")
    world.settle()
    world.check_settled()
    for _ in range(8):
        for _ in range(60):
            world.step()
            world.check_one_master_each()
        world.settle()
        world.check_settled()


@pytest.mark.parametrize("how", ["restarted after a hand-over", "disabled and restarted"])
def test_simulation_replays_the_race_a_direct_move_loses(how):
    """Between the leader's read and its write, C (that a direct move would skip) claims and
    confirms its partitions from the assignment it reads: the leader must only release them,
    and give them to nobody else while C's CURRENTSTATE holds them."""
    world = World(random.Random(0), DELAY)
    for name in (A, B, C):
        world.start(name)
    world.settle()
    mine = owned_by(world.versions[-1], C)
    world.end(C, handed_over=how.startswith("restarted"))
    world.nodes[C].enabled = how.startswith("restarted")
    if how.startswith("restarted"):
        world.close(C)
        world.plan_read()
        world.start(C)
    else:
        world.start(C)
        world.plan_read()
    world.claim(C, fresh=True)
    world.confirm(C, fresh=True)
    assert world.nodes[C].acting == mine
    world.plan_write()
    assert all(world.versions[-1][i] is None for i in mine)  # released, not given to A or B
    world.plan_read()
    world.plan_write()
    assert all(world.versions[-1][i] in (None, C) for i in mine)
    for name in (A, B):
        world.sync(name)
        world.check_one_master_each()
    world.settle()
    world.check_settled()
