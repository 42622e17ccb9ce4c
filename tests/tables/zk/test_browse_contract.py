"""The browser's reads (`tables.zk.browse`) against both stores: the dict-backed fake and the real
ZooKeeper. Each test runs on both; a difference is a bug in the fake."""

from __future__ import annotations

import gzip
from collections.abc import Iterator

import pytest

from tables.zk.browse import STAT_FIELDS, Unpackable, children_stats, stat_fields, unpack
from tables.zk.errors import NoNode
from tables.zk.interface import ZkStore
from tables.zk.memory import MemoryStore
from tables.zk.zookeeper import ZooKeeperStore


@pytest.fixture(params=["memory", pytest.param("zookeeper", marks=pytest.mark.zk)])
def store(request) -> Iterator[ZkStore]:
    if request.param == "memory":
        yield MemoryStore()
    else:
        yield ZooKeeperStore(request.getfixturevalue("zk"))


def test_a_stat_has_every_field_of_zookeepers(store):
    store.create("/a", b"12345")
    fields = stat_fields(store.exists("/a"))
    assert list(fields) == list(STAT_FIELDS)
    assert fields["dataLength"] == 5
    assert (fields["version"], fields["numChildren"], fields["ephemeralOwner"]) == (0, 0, 0)
    assert fields["ctime"] <= fields["mtime"]
    assert fields["czxid"] == fields["mzxid"] > 0


def test_sets_and_children_move_the_versions_and_zxids(store):
    store.create("/a", b"")
    before = stat_fields(store.exists("/a"))
    store.set("/a", b"xy", version=0)
    store.create("/a/c", b"")
    store.delete("/a/c")
    after = stat_fields(store.exists("/a"))
    assert (after["version"], after["cversion"], after["dataLength"]) == (1, 2, 2)
    assert after["mzxid"] > before["mzxid"]
    assert after["pzxid"] > after["mzxid"]
    assert after["czxid"] == before["czxid"]


def test_an_ephemeral_znode_names_its_session(store):
    store.create("/e", b"", ephemeral=True)
    assert stat_fields(store.exists("/e"))["ephemeralOwner"] == store.client_id[0] != 0


def test_children_stats(store):
    store.create("/p/b", b"bb", makepath=True)
    store.create("/p/a", b"a")
    stats = children_stats(store, "/p")
    assert list(stats) == ["a", "b"]
    assert (stats["a"]["dataLength"], stats["b"]["dataLength"]) == (1, 2)
    assert children_stats(store, "/p/a") == {}
    with pytest.raises(NoNode):
        children_stats(store, "/missing")


def test_unpack_undoes_gzip_within_a_bound():
    assert unpack(b'{"id": "x"}') == b'{"id": "x"}'
    assert unpack(gzip.compress(b"x" * 1000)) == b"x" * 1000
    with pytest.raises(Unpackable):
        unpack(gzip.compress(b"x" * 1000), limit=999)
    with pytest.raises(Unpackable):
        unpack(b"\x1f\x8bnot gzip at all")
    with pytest.raises(Unpackable):
        unpack(gzip.compress(b'{"id": "c"}')[:12])
