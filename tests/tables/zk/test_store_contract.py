"""One contract for both stores: the dict-backed fake (`MemoryStore`) and the real ZooKeeper
(`ZooKeeperStore` over the `zk` fixture). Each test runs against both; a difference is a bug in
the fake."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tables.domain.znrecord import ZNRecord
from tables.zk.errors import BadVersion, NodeExists, NoNode, NotEmpty, ZooKeeperError
from tables.zk.interface import ZkStore
from tables.zk.memory import MemoryStore
from tables.zk.records import create_record, read_record, update_record
from tables.zk.zookeeper import ZooKeeperStore


@pytest.fixture(params=["memory", pytest.param("zookeeper", marks=pytest.mark.zk)])
def store(request) -> Iterator[ZkStore]:
    if request.param == "memory":
        yield MemoryStore()
    else:
        yield ZooKeeperStore(request.getfixturevalue("zk"))


def test_both_satisfy_the_interface(store):
    assert isinstance(store, ZkStore)


def test_create_get_and_exists(store):
    assert store.exists("/a") is None
    assert store.create("/a", b"one") == "/a"
    data, stat = store.get("/a")
    assert (data, stat.version) == (b"one", 0)
    assert store.exists("/a").version == 0
    assert isinstance(stat.mtime, int)


def test_create_twice_is_node_exists(store):
    store.create("/a", b"")
    with pytest.raises(NodeExists):
        store.create("/a", b"again")
    assert store.get("/a")[0] == b""


def test_create_without_parent_is_no_node_unless_makepath(store):
    with pytest.raises(NoNode):
        store.create("/p/c", b"x")
    store.create("/p/c/d", b"x", makepath=True)
    assert store.get("/p/c/d")[0] == b"x"
    assert store.get_children("/p") == ["c"]


def test_reads_of_a_missing_znode(store):
    with pytest.raises(NoNode):
        store.get("/missing")
    with pytest.raises(NoNode):
        store.get_children("/missing")
    with pytest.raises(NoNode):
        store.set("/missing", b"x")


def test_set_with_version_is_compare_and_set(store):
    store.create("/a", b"0")
    assert store.set("/a", b"1", version=0).version == 1
    with pytest.raises(BadVersion):
        store.set("/a", b"stale", version=0)
    assert store.set("/a", b"2").version == 2  # -1: any version
    assert store.get("/a")[0] == b"2"


def test_children_are_names(store):
    store.ensure_path("/f")
    for name in ("b", "a", "c"):
        store.create(f"/f/{name}", b"")
    assert sorted(store.get_children("/f")) == ["a", "b", "c"]


def test_delete(store):
    store.create("/f/x", b"", makepath=True)
    with pytest.raises(NotEmpty):
        store.delete("/f")
    with pytest.raises(BadVersion):
        store.delete("/f/x", version=3)
    store.delete("/f/x")
    assert store.exists("/f/x") is None
    with pytest.raises(NoNode):
        store.delete("/f/x")


def test_recursive_delete_removes_the_tree_and_ignores_a_missing_one(store):
    store.create("/f/x/y", b"", makepath=True)
    store.create("/f/z", b"")
    store.delete("/f", recursive=True)
    assert store.exists("/f") is None
    store.delete("/f", recursive=True)  # gone already: not an error


def test_ensure_path_is_idempotent(store):
    assert store.ensure_path("/e/f/g")
    assert store.ensure_path("/e/f/g")
    assert store.exists("/e/f/g") is not None


def test_a_transaction_applies_everything(store):
    store.create("/t", b"0")
    tx = store.transaction()
    tx.create("/t/a", b"a")
    tx.set_data("/t", b"1", version=0)
    tx.check("/t/a", 0)
    results = tx.commit()
    assert not any(isinstance(r, Exception) for r in results)
    assert store.get("/t")[0] == b"1"
    assert store.get("/t/a")[0] == b"a"


@pytest.mark.parametrize("failure", ["exists", "version"])
def test_a_failed_transaction_applies_nothing(store, failure):
    store.create("/t", b"0")
    store.create("/t/a", b"")
    tx = store.transaction()
    tx.create("/t/b", b"b")
    if failure == "exists":
        tx.create("/t/a", b"again")
    else:
        tx.set_data("/t", b"1", version=7)
    tx.delete("/t/a")
    results = tx.commit()
    assert len(results) == 3
    assert all(isinstance(r, ZooKeeperError) for r in results)
    assert isinstance(results[1], NodeExists if failure == "exists" else BadVersion)
    assert store.exists("/t/b") is None
    assert store.get("/t")[0] == b"0"
    assert store.exists("/t/a") is not None


def test_records_round_trip_and_compare_and_set_over_the_store(store):
    record = ZNRecord(id="r", simple_fields={"n": "0"})
    create_record(store, "/records/r", record)
    with pytest.raises(NodeExists):
        create_record(store, "/records/r", record)

    def bump(current: ZNRecord) -> ZNRecord:
        out = current.copy()
        out.simple_fields["n"] = str(int(out.simple_fields["n"]) + 1)
        return out

    assert update_record(store, "/records/r", bump).version == 1
    found = read_record(store, "/records/r")
    assert found is not None
    assert (found.record.simple_fields["n"], found.version) == ("1", 1)
    assert read_record(store, "/records/missing") is None
