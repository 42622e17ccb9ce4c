"""The lead-controller roles in-process against real ZooKeeper, each controller on a client of its
own (its own session): the cluster leader election (`tables.zk.election`), a controller following
its partitions of leadControllerResource (`LeadFollower`), and the cluster leader assigning them
and publishing the resource's EXTERNALVIEW (`ClusterLeader`). Sessions end for real: a client
is closed, or expired by ZooKeeper (a second client on the same session id and password closes
it). Nothing here runs a loop: the tests step the roles themselves until the cluster settles."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping

import pytest
from django.conf import settings
from kazoo.client import KazooClient

from tables.cluster.context import ClusterContext
from tables.controller.cluster_leader import (
    CONTROLLER_TAG,
    ClusterLeader,
    MasterChange,
    set_rebalance_delay,
)
from tables.controller.lead_follower import LeadFollower, history_path
from tables.domain.lead_assignment import assignment_of, assignment_record, masters_of
from tables.domain.leadership import LEAD_CONTROLLER_RESOURCE, lead_partition, partition_name
from tables.domain.znrecord import ZNRecord
from tables.zk.client import new_client
from tables.zk.election import LeaderElection, cluster_leader_id
from tables.zk.participants import register_participant, session_id_of
from tables.zk.records import read_record, update_record
from tables.zk.zookeeper import ZooKeeperStore, as_store
from tests.cluster_fixtures import PATHS
from tests.poll import wait_until

pytestmark = [pytest.mark.zk]

N = 24
TABLE = "githubEvents_REALTIME"
OTHER = "airlineStats_REALTIME"
P = lead_partition("githubEvents")
Q = lead_partition("airlineStats")
ME = "Controller_127.0.0.1_9001"
DELAY_MS = 300_000  # init_cluster's REBALANCE_DELAY, Pinot's default


@pytest.fixture
def clients(cluster, settings) -> Iterator[Callable[[], ZooKeeperStore]]:
    """Makes clients (each its own session) in the test's chroot; closes the ones still open."""
    made: list[ZooKeeperStore] = []

    def make() -> ZooKeeperStore:
        store = as_store(new_client(settings.ZK_HOSTS))
        made.append(store)
        return store

    yield make
    for store in made:
        with contextlib.suppress(Exception):
            store.stop()
            store.close()


def _close(store: ZooKeeperStore) -> None:
    """End the session now (its ephemeral znodes go with it)."""
    store.stop()
    store.close()


def _expire(store: ZooKeeperStore) -> None:
    """Make ZooKeeper expire `store`'s session: a second client on the same session id and
    password connects, then closes the session."""
    twin = KazooClient(hosts=settings.ZK_HOSTS, client_id=store.client_id)
    twin.start(timeout=10)
    twin.stop()
    twin.close()


def _assign(store: ZooKeeperStore, owners: Mapping[int, str]) -> None:
    """The resource's assignment (IdealState listFields): `owners`, every other partition none."""
    update_record(
        store,
        PATHS.idealstate(LEAD_CONTROLLER_RESOURCE),
        lambda ideal: assignment_record(ideal, {i: owners.get(i) for i in range(N)}),
    )


def _resource_enabled(store: ZooKeeperStore, enabled: bool) -> None:
    def put(record: ZNRecord) -> ZNRecord:
        record.simple_fields["RESOURCE_ENABLED"] = "true" if enabled else "false"
        return record

    update_record(store, PATHS.resource_config(LEAD_CONTROLLER_RESOURCE), put)


def _current_state(store: ZooKeeperStore, instance: str, session: str) -> ZNRecord | None:
    found = read_record(store, PATHS.currentstate(instance, session, LEAD_CONTROLLER_RESOURCE))
    return None if found is None else found.record


def _masters(store: ZooKeeperStore) -> dict[int, str | None]:
    found = read_record(store, PATHS.externalview(LEAD_CONTROLLER_RESOURCE))
    return masters_of(found.record if found else None, N)


# --- the cluster leader election ----------------------------------------------------------------
def test_one_candidate_leads_and_the_other_takes_over_when_its_session_ends(clients):
    first, second = clients(), clients()
    woken = threading.Event()
    a = LeaderElection("127.0.0.1_9001", lambda: None)
    b = LeaderElection("127.0.0.1_9002", woken.set)

    assert a.try_lead(first, PATHS)
    assert not b.try_lead(second, PATHS)
    assert a.try_lead(first, PATHS)  # still, on the same session
    leader = read_record(second, PATHS.controller_leader)
    assert leader.record.id == "127.0.0.1_9001"
    assert leader.record.simple_fields["SESSION_ID"] == session_id_of(first)
    assert cluster_leader_id(second, PATHS) == "127.0.0.1_9001"

    _close(first)  # its session ends: the ephemeral LEADER znode goes, b's watch fires
    wait_until(woken.is_set, timeout=30, what="the waiting candidate is woken")
    assert cluster_leader_id(second, PATHS) is None
    assert b.try_lead(second, PATHS)
    assert cluster_leader_id(second, PATHS) == "127.0.0.1_9002"
    history = read_record(second, f"{PATHS.controller}/HISTORY").record.list_fields["HISTORY"]
    assert len(history) == 2
    assert "CONTROLLER=127.0.0.1_9001" in history[0]
    assert "CONTROLLER=127.0.0.1_9002" in history[1]


def test_a_restarted_leader_takes_its_znode_back_and_resign_hands_the_role_on(clients):
    old, new, other = clients(), clients(), clients()
    assert LeaderElection("127.0.0.1_9001", lambda: None).try_lead(old, PATHS)
    # The same controller restarted (a new session) before ZooKeeper expired the old one.
    restarted = LeaderElection("127.0.0.1_9001", lambda: None)
    assert restarted.try_lead(new, PATHS)
    leader = read_record(other, PATHS.controller_leader).record
    assert leader.simple_fields["SESSION_ID"] == session_id_of(new)

    waiting = LeaderElection("127.0.0.1_9002", lambda: None)
    assert not waiting.try_lead(other, PATHS)
    waiting.resign(other, PATHS)  # not the leader: changes nothing
    assert cluster_leader_id(other, PATHS) == "127.0.0.1_9001"
    restarted.resign(new, PATHS)
    assert cluster_leader_id(other, PATHS) is None
    assert waiting.try_lead(other, PATHS)


# --- a controller following its partitions ------------------------------------------------------
def _follower(
    store: ZooKeeperStore, instance: str = ME, woken: threading.Event | None = None
) -> tuple[LeadFollower, threading.Event]:
    """`instance` registered as a controller participant on `store`'s session, and its follower
    (watching), which sets `woken` (a new Event if none) when it should be stepped."""
    port = int(instance.rsplit("_", 1)[1])
    register_participant(store, PATHS, instance, "127.0.0.1", port, [CONTROLLER_TAG])
    woken = woken or threading.Event()
    follower = LeadFollower(instance, woken.set)
    follower.watch(store, PATHS)
    return follower, woken


def test_a_follower_claims_confirms_and_drops_its_partitions(clients):
    store = clients()
    follower, woken = _follower(store)
    session = session_id_of(store)
    assert follower.sync(store, PATHS) == (frozenset(), frozenset())
    assert _current_state(store, ME, session).map_fields == {}
    history = read_record(store, history_path(PATHS, ME)).record.simple_fields
    assert history["HANDOVER"] == "false" and int(history["LAST_ONLINE_TIME"]) > 0

    woken.clear()
    _assign(store, {P: ME, Q: "Controller_127.0.0.1_9002"})
    wait_until(woken.is_set, timeout=30, what="the IdealState watch wakes the loop")
    assert not follower.leads(TABLE)  # a partition is taken in `sync`, never by the watch

    assert follower.claimed_ms is None
    assert follower.sync(store, PATHS) == (frozenset({P}), frozenset())
    assert follower.held == frozenset({P})
    assert follower.leads(TABLE) and not follower.leads(OTHER)
    path = PATHS.currentstate(ME, session, LEAD_CONTROLLER_RESOURCE)
    assert follower.claimed_ms == store.exists(path).mtime  # the claim, in ZooKeeper's clock
    state = _current_state(store, ME, session)
    assert state.map_fields == {partition_name(P): {"CURRENT_STATE": "MASTER"}}
    assert state.simple_fields["SESSION_ID"] == session
    assert state.simple_fields["STATE_MODEL_DEF"] == "MasterSlave"

    # Unassigned: the watch gives it up in memory at once, the next sync says so in ZooKeeper.
    _assign(store, {Q: "Controller_127.0.0.1_9002"})
    wait_until(lambda: not follower.leads(TABLE), timeout=30, what="the partition given up")
    assert follower.held == frozenset()
    assert follower.sync(store, PATHS) == (frozenset(), frozenset({P}))  # reported as lost
    assert _current_state(store, ME, session).map_fields == {}


def test_with_the_resource_disabled_only_the_cluster_leader_leads(clients):
    store = clients()
    follower, _ = _follower(store)
    _assign(store, {P: ME})
    assert follower.sync(store, PATHS) == (frozenset({P}), frozenset())

    _resource_enabled(store, False)
    wait_until(lambda: not follower.enabled, timeout=30, what="the config watch")
    assert not follower.leads(TABLE) and follower.held == frozenset()
    # Assigned, but nothing is taken while the resource is disabled; the loss is reported.
    assert follower.sync(store, PATHS) == (frozenset(), frozenset({P}))
    assert follower.held == frozenset()
    assert _current_state(store, ME, session_id_of(store)).map_fields == {}
    follower.set_cluster_leader(True)  # Pinot's fallback: the cluster leader leads every table
    assert follower.leads(TABLE) and follower.leads(OTHER)
    follower.set_cluster_leader(False)
    assert not follower.leads(TABLE)

    _resource_enabled(store, True)
    wait_until(lambda: follower.enabled, timeout=30, what="the config watch")
    follower.sync(store, PATHS)
    assert follower.leads(TABLE) and not follower.leads(OTHER)


def test_a_follower_drops_everything_when_its_session_is_lost(clients):
    store = clients()
    follower, _ = _follower(store)
    _assign(store, {P: ME, Q: ME})
    follower.sync(store, PATHS)
    follower.set_cluster_leader(True)
    old = session_id_of(store)
    assert follower.held == frozenset({P, Q})

    _expire(store)
    wait_until(lambda: follower.held == frozenset(), timeout=30, what="all partitions dropped")
    assert not follower.leads(TABLE) and not follower.leads(OTHER)
    # The client gets a new session; the old one's ephemeral live instance is gone.
    wait_until(lambda: store.connected and session_id_of(store) != old, timeout=30, what="new")
    assert store.exists(PATHS.liveinstance(ME)) is None

    # A sync on the new session claims the partitions still assigned to it afresh, under the new
    # session's CURRENTSTATE; the old session's is deleted.
    # (given up on LOST and taken again: reported both lost and gained, so FSMs are rebuilt)
    assert follower.sync(store, PATHS) == (frozenset({P, Q}), frozenset({P, Q}))
    assert follower.leads(TABLE)
    assert _current_state(store, ME, old) is None
    assert set(_current_state(store, ME, session_id_of(store)).map_fields) == {
        partition_name(P),
        partition_name(Q),
    }


# --- the cluster leader over three controllers --------------------------------------------------
class Node:
    """One controller in-process: its session, its follower, its cluster-leader role."""

    def __init__(self, store: ZooKeeperStore, port: int) -> None:
        self.id = f"Controller_127.0.0.1_{port}"
        self.store = store
        self.ctx = ClusterContext(store, PATHS, settings.REDIS_URL)
        self.woken = threading.Event()
        self.wake = self.woken.set  # one callable, as the controller's loop has
        self.changes: list[MasterChange] = []
        self.follower, _ = _follower(store, self.id, self.woken)
        election = LeaderElection(f"127.0.0.1_{port}", self.wake)
        self.leader = ClusterLeader(election, DELAY_MS, self.wake, self.changes.extend)

    def step(self) -> int | None:
        self.follower.sync(self.store, PATHS)
        due = self.leader.step(self.ctx)
        self.follower.set_cluster_leader(self.leader.leading)
        return due


def _settled(nodes: list[Node], share: int) -> Callable[[], bool]:
    """A condition that steps every node once, then checks: one MASTER per partition in the
    EXTERNALVIEW, `share` partitions each, the same as assigned and as each follower holds."""

    def check() -> bool:
        for node in nodes:
            node.step()
        store = nodes[0].store
        masters = _masters(store)
        ideal = read_record(store, PATHS.idealstate(LEAD_CONTROLLER_RESOURCE)).record
        if masters != assignment_of(ideal, N) or None in masters.values():
            return False
        return all(
            node.follower.held == frozenset(i for i, m in masters.items() if m == node.id)
            and len(node.follower.held) == share
            for node in nodes
        )

    return check


@pytest.fixture
def three(clients) -> list[Node]:
    nodes = [Node(clients(), 9001 + k) for k in range(3)]
    wait_until(_settled(nodes, 8), timeout=60, what="8/8/8")
    assert sum(node.leader.leading for node in nodes) == 1
    return nodes


def _split(nodes: list[Node]) -> tuple[Node, list[Node]]:
    """(the cluster leader, the others)."""
    (leader,) = [n for n in nodes if n.leader.leading]
    return leader, [n for n in nodes if n is not leader]


def test_three_controllers_split_8_8_8_and_a_dead_ones_partitions_move_with_delay_0(three):
    leader, (victim, survivor) = _split(three)
    assert {c.partition for c in leader.changes} == set(range(N))
    assert all(c.from_controller is None and c.reason == "unassigned" for c in leader.changes)
    lost = victim.follower.held
    set_rebalance_delay(leader.ctx, 0)
    leader.changes.clear()
    leader.woken.clear()

    _close(victim.store)
    wait_until(leader.woken.is_set, timeout=30, what="the live instances' watch wakes the leader")
    alive = [leader, survivor]
    wait_until(_settled(alive, 12), timeout=60, what="12/12 after the death")
    masters = _masters(leader.store)
    assert all(masters[i] in (leader.id, survivor.id) for i in lost)

    gone = [c for c in leader.changes if c.to_controller is None]
    assert {c.partition for c in gone} == lost
    assert all(c.from_controller == victim.id for c in gone)
    assert all("is not live (its ZooKeeper session ended)" in c.reason for c in gone)
    back = {c.partition: c for c in leader.changes if c.to_controller is not None}
    assert set(back) == lost
    for i, change in back.items():
        assert (change.from_controller, change.to_controller) == (victim.id, masters[i])
        assert "is not live (rebalance delay 0): released for" in change.reason
        assert change.leaderless_ms is not None and change.leaderless_ms >= 0
    # The two steps of every move: released, then given.
    assert len(leader.changes) == 2 * len(lost)


def test_with_a_delay_a_dead_ones_partitions_wait_for_it_and_it_gets_them_back(three, clients):
    leader, (victim, survivor) = _split(three)
    lost = victim.follower.held
    _close(victim.store)

    def leaderless() -> bool:
        leader.step()
        survivor.step()
        return all(_masters(leader.store)[i] is None for i in lost)

    wait_until(leaderless, timeout=30, what="the dead controller's partitions without a MASTER")
    now = leader.ctx.now_ms()
    due = leader.step()
    assert due is not None and now < due <= now + DELAY_MS
    ideal = read_record(leader.store, PATHS.idealstate(LEAD_CONTROLLER_RESOURCE)).record
    assert all(assignment_of(ideal, N)[i] == victim.id for i in lost)  # kept for it
    history = read_record(leader.store, history_path(PATHS, victim.id)).record.simple_fields
    assert int(history["LAST_OFFLINE_TIME"]) >= int(history["LAST_ONLINE_TIME"])

    # It comes back (a new session) within the delay: the same partitions, nothing moved.
    returned = Node(clients(), int(victim.id.rsplit("_", 1)[1]))
    wait_until(_settled([leader, survivor, returned], 8), timeout=60, what="8/8/8 again")
    assert returned.follower.held == lost


def test_a_graceful_hand_over_moves_the_partitions_without_the_delay(three):
    leader, (leaving, survivor) = _split(three)
    lost = leaving.follower.held
    assert leaving.follower.give_up(leaving.store, PATHS) == lost
    assert not leaving.follower.leads(TABLE)
    _close(leaving.store)
    wait_until(_settled([leader, survivor], 12), timeout=60, what="12/12 after the hand-over")
    back = [c for c in leader.changes if c.from_controller == leaving.id and c.to_controller]
    assert {c.partition for c in back} == lost
    assert all("shut down and handed its partitions over" in c.reason for c in back)
