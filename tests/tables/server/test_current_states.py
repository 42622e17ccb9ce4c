"""A server's CURRENTSTATES writes (`tables.server.current_states`) on a real ZooKeeper: what is
written, and overlapping publishes coalescing into few writes without losing a state."""

from __future__ import annotations

import threading

import pytest

from tables.cluster.context import ClusterContext
from tables.server.current_states import STATE_MODEL, CurrentStatesWriter
from tables.zk.paths import ClusterPaths
from tables.zk.records import read_record, write_record
from tables.zk.zookeeper import ZooKeeperStore
from tests.poll import wait_until

pytestmark = [pytest.mark.zk]

PATHS = ClusterPaths("PinotCluster")
SERVER = "Server_127.0.0.1_7001"
TABLE = "t_REALTIME"


class States:
    """The replicas' states as a server holds them, counting reads (one per write)."""

    def __init__(self) -> None:
        self.map: dict[str, dict[str, str]] = {}
        self.reads = 0
        self.hold_next = False  # the next read waits for `release`
        self.release = threading.Event()
        self.reading = threading.Event()
        self.fail_next = False

    def set(self, segment: str, state: str) -> None:
        self.map[segment] = {"CURRENT_STATE": state}

    def __call__(self, table: str) -> dict[str, dict[str, str]]:
        self.reads += 1
        snapshot = {k: dict(v) for k, v in self.map.items()}
        self.reading.set()
        if self.hold_next:
            self.hold_next = False
            assert self.release.wait(10)
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("states unreadable")
        return snapshot


@pytest.fixture
def writer(zk):
    states = States()
    ctx = ClusterContext(zk, PATHS, "redis://unused")
    races: list[int] = []
    return CurrentStatesWriter(
        SERVER, lambda: ctx, lambda: "s1", states, lambda: races.append(1)
    ), states


def _written(zk) -> dict:
    found = read_record(zk, PATHS.currentstate(SERVER, "s1", TABLE))
    return found.record if found else None


def test_the_states_are_written_under_the_session_and_an_equal_record_is_left_alone(zk, writer):
    publisher, states = writer
    states.set("seg0", "CONSUMING")
    publisher.publish(TABLE)
    record = _written(zk)
    assert record.map_fields == {"seg0": {"CURRENT_STATE": "CONSUMING"}}
    assert record.simple_fields["SESSION_ID"] == "s1"
    assert record.simple_fields["STATE_MODEL_DEF"] == STATE_MODEL
    version = zk.exists(PATHS.currentstate(SERVER, "s1", TABLE)).version
    publisher.publish(TABLE)  # nothing changed: no write
    assert zk.exists(PATHS.currentstate(SERVER, "s1", TABLE)).version == version


def test_overlapping_publishes_coalesce_and_every_state_lands(zk, writer):
    publisher, states = writer
    states.set("seg0", "CONSUMING")
    states.hold_next = True
    first = threading.Thread(target=publisher.publish, args=(TABLE,))
    first.start()
    assert states.reading.wait(10)  # the first write has read its states and is held
    threads = []
    for index in range(1, 11):  # ten transitions while it is held, each publishing
        states.set(f"seg{index}", "ONLINE")
        thread = threading.Thread(target=publisher.publish, args=(TABLE,))
        thread.start()
        threads.append(thread)
    # Every call counted (they wait for the held write) before it is let go.
    wait_until(lambda: publisher._asked[TABLE] == 11, timeout=10, what="11 calls waiting")
    states.release.set()
    for thread in [first, *threads]:
        thread.join(10)
        assert not thread.is_alive()
    assert _written(zk).map_fields == {
        f"seg{i}": {"CURRENT_STATE": "ONLINE"} for i in range(1, 11)
    } | {"seg0": {"CURRENT_STATE": "CONSUMING"}}
    assert states.reads == 2  # the held write, then one for the ten that came meanwhile


def test_a_failed_write_covers_nobody(zk, writer):
    publisher, states = writer
    states.set("seg0", "CONSUMING")
    states.fail_next = True
    with pytest.raises(RuntimeError, match="states unreadable"):
        publisher.publish(TABLE)
    assert _written(zk) is None
    publisher.publish(TABLE)
    assert _written(zk).map_fields == {"seg0": {"CURRENT_STATE": "CONSUMING"}}


class CountingStore:
    """The real ZooKeeper store, counting reads of znode data by path."""

    def __init__(self, client) -> None:
        self.client, self.gets = client, []

    def get(self, path, *args, **kwargs):
        self.gets.append(path)
        return self.client.get(path, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.client, name)


def test_after_its_first_write_the_writer_sets_without_reading_first(zk):
    states, counting = States(), CountingStore(ZooKeeperStore(zk))
    ctx = ClusterContext(counting, PATHS, "redis://unused")
    publisher = CurrentStatesWriter(SERVER, lambda: ctx, lambda: "s1", states, lambda: None)
    path = PATHS.currentstate(SERVER, "s1", TABLE)
    states.set("seg0", "CONSUMING")
    publisher.publish(TABLE)  # created: nothing known yet
    states.set("seg0", "ONLINE")
    publisher.publish(TABLE)  # the first update reads (it knows nothing of the znode)
    reads = len(counting.gets)
    for index in range(1, 6):
        states.set(f"seg{index}", "CONSUMING")
        publisher.publish(TABLE)
    publisher.publish(TABLE)  # equal states: nothing to write
    assert counting.gets[reads:] == []  # five writes, no read
    assert _written(zk).map_fields == {"seg0": {"CURRENT_STATE": "ONLINE"}} | {
        f"seg{i}": {"CURRENT_STATE": "CONSUMING"} for i in range(1, 6)
    }
    assert zk.exists(path).version == 6


def test_a_write_by_someone_else_or_a_deletion_is_read_and_overwritten(zk, writer):
    publisher, states = writer
    path = PATHS.currentstate(SERVER, "s1", TABLE)
    states.set("seg0", "CONSUMING")
    publisher.publish(TABLE)
    states.set("seg0", "ONLINE")
    publisher.publish(TABLE)  # now the writer knows the version
    stranger = _written(zk)
    stranger.map_fields = {"other": {"CURRENT_STATE": "ERROR"}}
    write_record(zk, path, stranger, zk.exists(path).version)  # its known version is stale
    states.set("seg1", "CONSUMING")
    publisher.publish(TABLE)
    expected = {"seg0": {"CURRENT_STATE": "ONLINE"}, "seg1": {"CURRENT_STATE": "CONSUMING"}}
    assert _written(zk).map_fields == expected
    zk.delete(path)
    states.set("seg2", "CONSUMING")
    publisher.publish(TABLE)
    assert _written(zk).map_fields == expected | {"seg2": {"CURRENT_STATE": "CONSUMING"}}
