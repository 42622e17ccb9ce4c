"""Watched reads on the real ZooKeeper: answered from memory until the znode changes, never stale
after this session's own write, re-read after another session's change once notified, on demand
(`fresh`), and after a session change."""

from __future__ import annotations

import threading

import pytest

from tables.zk.client import new_client
from tables.zk.memory import MemoryStore
from tables.zk.watched_reads import WatchedReads
from tables.zk.zookeeper import as_store
from tests.poll import wait_until

pytestmark = pytest.mark.zk


def _counting(zk) -> list[str]:
    """The kazoo requests made from now on (every one goes through `_call`)."""
    calls: list[str] = []
    original = zk._call

    def counting(request, async_object):
        calls.append(type(request).__name__)
        return original(request, async_object)

    zk._call = counting
    return calls


def test_a_cached_read_makes_no_round_trip(zk):
    zk.create("/n", b"v0")
    zk.create("/n/a")
    reads = WatchedReads(as_store(zk))
    assert reads.data("/n")[0] == b"v0" and reads.children("/n") == ["a"]
    calls = _counting(zk)
    try:
        for _ in range(5):
            assert reads.data("/n")[0] == b"v0" and reads.children("/n") == ["a"]
    finally:
        del zk._call  # the instance attribute goes: kazoo's own method again
    assert calls == []


def test_a_changed_znode_is_read_in_one_round_trip_and_a_missing_one_watched(zk, settings):
    zk.create("/n", b"v0")
    reads = WatchedReads(as_store(zk))
    assert reads.data("/n")[0] == b"v0"
    zk.set("/n", b"v1")
    calls = _counting(zk)
    try:
        assert reads.data("/n")[0] == b"v1"
        assert calls == ["GetData"]
        assert reads.data("/missing") is None  # the failed read, then an exists watch
        assert calls == ["GetData", "GetData", "Exists"]
        assert reads.data("/missing") is None  # answered by the exists watch's cache
        assert len(calls) == 3
    finally:
        del zk._call  # the instance attribute goes: kazoo's own method again
    other = new_client(settings.ZK_HOSTS)
    try:
        other.create("/missing", b"here")
        wait_until(lambda: reads.data("/missing") is not None, 10, what="the creation notified")
        assert reads.data("/missing")[0] == b"here"
    finally:
        other.stop()
        other.close()


def test_own_writes_are_never_answered_stale(zk):
    zk.create("/n", b"v0")
    reads = WatchedReads(as_store(zk))
    for i in range(1, 20):
        assert reads.data("/n")[0] == f"v{i - 1}".encode()
        zk.set("/n", f"v{i}".encode())
        zk.create(f"/n/c{i}")
        assert reads.data("/n")[0] == f"v{i}".encode()
        assert len(reads.children("/n")) == i


def test_another_sessions_change_is_read_once_notified_or_on_demand(zk, settings):
    zk.create("/n", b"v0")
    reads = WatchedReads(as_store(zk))
    assert reads.data("/n")[0] == b"v0" and reads.children("/n") == []
    other = new_client(settings.ZK_HOSTS)
    try:
        other.set("/n", b"v1")
        other.create("/n/x")
        wait_until(lambda: reads.data("/n")[0] == b"v1", 10, what="the change notified")
        wait_until(lambda: reads.children("/n") == ["x"], 10, what="the new child notified")
        other.delete("/n/x")
        other.set("/n", b"v2")
        assert reads.data("/n", fresh=True)[0] == b"v2"  # no wait: read on demand
        assert reads.children("/n", fresh=True) == []
        other.delete("/n")
        assert reads.data("/n", fresh=True) is None and reads.children("/n", fresh=True) == []
    finally:
        other.stop()
        other.close()


def test_a_lost_watch_or_a_new_session_drops_the_cache(zk, settings, monkeypatch):
    zk.create("/n", b"v0")
    reads = WatchedReads(as_store(zk))
    assert reads.data("/n")[0] == b"v0"
    for watchers in zk._data_watchers.values():  # the watch lost, as an expired session loses it
        watchers.clear()
    other = new_client(settings.ZK_HOSTS)
    try:
        other.set("/n", b"v1")
    finally:
        other.stop()
        other.close()
    assert reads.data("/n")[0] == b"v1"  # no watch pending: read again, though nobody said so
    calls = []
    original = zk._call

    def counting(request, async_object):
        calls.append(request)
        return original(request, async_object)

    monkeypatch.setattr(zk, "_call", counting)
    assert reads.data("/n")[0] == b"v1" and calls == []  # watched again: from memory
    monkeypatch.setattr(type(zk), "client_id", property(lambda self: (12345, b"x")))
    assert reads.data("/n")[0] == b"v1" and calls  # another session: read again


def test_a_watch_fired_by_an_own_write_is_seen_before_its_callback_runs(zk):
    """kazoo runs watch callbacks on its callback thread, after the write's reply: the cache asks
    kazoo's registry of pending watches instead, so it is right at once. Here the callback thread
    is held for the whole test: no callback runs at all."""
    zk.create("/n", b"v0")
    zk.create("/n/a")
    reads = WatchedReads(as_store(zk))
    release = threading.Event()
    zk.handler.callback_queue.put(lambda: release.wait(30))
    try:
        for i in range(1, 20):
            assert reads.data("/n")[0] == f"v{i - 1}".encode()
            assert len(reads.children("/n")) == i
            zk.set("/n", f"v{i}".encode())
            zk.create(f"/n/c{i}")
            assert reads.data("/n")[0] == f"v{i}".encode()
            assert len(reads.children("/n")) == i + 1
    finally:
        release.set()


def test_a_store_without_watches_is_read_each_time():
    store = MemoryStore()
    store.create("/n", b"v0")
    reads = WatchedReads(store)
    assert reads.data("/n")[0] == b"v0" and reads.children("/n") == []
    store.set("/n", b"v1")
    assert reads.data("/n")[0] == b"v1" and reads.children("/missing") == []


def test_a_young_value_is_taken_when_the_caller_says_so(zk):
    zk.create("/n", b"v0")
    reads = WatchedReads(as_store(zk))
    assert reads.data("/n")[0] == b"v0"
    zk.set("/n", b"v1")
    assert reads.data("/n", stale_ok_s=60.0)[0] == b"v0"  # read just now: good enough
    assert reads.data("/n")[0] == b"v1"  # otherwise the change is seen
    assert reads.data("/n", stale_ok_s=60.0)[0] == b"v1"
    assert reads.data("/n", fresh=True, stale_ok_s=60.0)[0] == b"v1"
