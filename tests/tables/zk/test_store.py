"""The versioned store against the real ZooKeeper: create, read, compare-and-set, conflicts."""

from __future__ import annotations

import json
import threading

import pytest
from kazoo.exceptions import BadVersionError, NoNodeError

from tables.zk import store
from tables.zk.client import ZooKeeperUnavailable, new_client

pytestmark = pytest.mark.zk


def test_it_creates_and_reads_a_znode_with_its_version(zk):
    zk.create("/cluster/thing", b'{"a": 1}', makepath=True)
    got = store.read(zk, "/cluster/thing")
    assert got is not None
    assert json.loads(got.data) == {"a": 1}
    assert got.version == 0
    assert got.mtime_ms > 0
    assert store.read(zk, "/cluster/absent") is None


def test_it_refuses_a_write_with_a_stale_version(zk):
    zk.create("/n", b"v0")
    _, stat = zk.get("/n")
    zk.set("/n", b"v1", version=stat.version)
    with pytest.raises(BadVersionError):
        zk.set("/n", b"lost update", version=stat.version)
    assert zk.get("/n")[0] == b"v1"


def test_update_rereads_and_retries_after_a_version_conflict(zk, settings):
    zk.create("/counter", b"0")
    other = new_client(settings.ZK_HOSTS)
    calls = []

    def increment(data: bytes) -> bytes:
        calls.append(data)
        if len(calls) == 1:
            # Another writer gets in between our read and our write.
            other.set("/counter", b"10")
        return str(int(data) + 1).encode()

    try:
        result = store.update(zk, "/counter", increment)
    finally:
        other.stop()
        other.close()
    assert calls == [b"0", b"10"]
    assert result.data == b"11"
    assert zk.get("/counter")[0] == b"11"
    assert result.version == 2


def test_update_returns_the_unchanged_state_when_mutate_declines(zk):
    zk.create("/n", b"same")
    result = store.update(zk, "/n", lambda data: None)
    assert result.data == b"same"
    assert result.version == 0


def test_update_of_a_missing_znode_raises(zk):
    with pytest.raises(NoNodeError):
        store.update(zk, "/missing", lambda data: data)


def test_concurrent_updates_lose_nothing(zk):
    zk.create("/counter", b"0")
    threads, per_thread = 16, 50

    def work() -> None:
        for _ in range(per_thread):
            store.update(zk, "/counter", lambda data: str(int(data) + 1).encode())

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert int(zk.get("/counter")[0]) == threads * per_thread


def test_chroot_keeps_tests_apart(zk):
    zk.create("/mine", b"x")
    assert zk.get_children("/") == ["mine"]


def test_an_unreachable_zookeeper_is_one_clear_error():
    with pytest.raises(ZooKeeperUnavailable, match=r"ZooKeeper at 127\.0\.0\.1:1 is unreachable"):
        new_client("127.0.0.1:1", timeout=1.0)
