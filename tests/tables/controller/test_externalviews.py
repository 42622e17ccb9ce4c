"""The controller's EXTERNALVIEW upkeep (`tables.controller.externalviews`) on a real ZooKeeper:
written from the servers' current states, left alone when equal, and a compare-and-set on the
version it read that looks again when it loses."""

from __future__ import annotations

import pytest

from tables.cluster.context import ClusterContext
from tables.controller.externalviews import refresh_table_views
from tables.domain.znrecord import ZNRecord
from tables.zk.paths import ClusterPaths
from tables.zk.records import create_record, read_record, write_record
from tables.zk.zookeeper import ZooKeeperStore

pytestmark = [pytest.mark.zk]

PATHS = ClusterPaths("PinotCluster")
TABLE = "t_REALTIME"
SERVER = "Server_127.0.0.1_7001"


class StrangerWritesFirst:
    """The real store; the first set of `path` is preceded by somebody else's write of it."""

    def __init__(self, store: ZooKeeperStore, path: str) -> None:
        self.store, self.path, self.armed, self.sets = store, path, True, 0

    def set(self, path, value, version=-1):
        if path == self.path:
            self.sets += 1
            if self.armed:
                self.armed = False
                found = read_record(self.store, path)
                found.record.map_fields = {"stranger": {SERVER: "ERROR"}}
                write_record(self.store, path, found.record, found.version)
        return self.store.set(path, value, version=version)

    def __getattr__(self, name):
        return getattr(self.store, name)


def _states(zk, **segments: str) -> None:
    path = PATHS.currentstate(SERVER, "s1", TABLE)
    record = ZNRecord(id=TABLE, map_fields={s: {"CURRENT_STATE": v} for s, v in segments.items()})
    if zk.exists(path) is None:
        create_record(ZooKeeperStore(zk), path, record)
    else:
        write_record(ZooKeeperStore(zk), path, record, zk.exists(path).version)


def test_the_view_follows_the_current_states_and_a_lost_race_is_looked_at_again(zk):
    store = ZooKeeperStore(zk)
    create_record(store, PATHS.idealstate(TABLE), ZNRecord(id=TABLE))
    create_record(
        store, PATHS.liveinstance(SERVER), ZNRecord(id=SERVER, simple_fields={"SESSION_ID": "s1"})
    )
    view_path = PATHS.externalview(TABLE)
    racing = StrangerWritesFirst(store, view_path)
    ctx = ClusterContext(racing, PATHS, "redis://unused")
    _states(zk, seg0="CONSUMING")
    assert refresh_table_views(ctx, lambda table: True) == [TABLE]  # created
    assert read_record(store, view_path).record.map_fields == {"seg0": {SERVER: "CONSUMING"}}
    assert refresh_table_views(ctx, lambda table: True) == []  # equal: left alone
    assert zk.exists(view_path).version == 0
    _states(zk, seg0="ONLINE", seg1="CONSUMING")
    assert refresh_table_views(ctx, lambda table: True) == [TABLE]
    # The stranger's write made the first compare-and-set lose; the view was read again.
    assert racing.sets == 2
    assert read_record(store, view_path).record.map_fields == {
        "seg0": {SERVER: "ONLINE"},
        "seg1": {SERVER: "CONSUMING"},
    }
    assert refresh_table_views(ctx, lambda table: False) == []  # not led: not looked at
