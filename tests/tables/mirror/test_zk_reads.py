"""The mirror's batched ZooKeeper reads (tables.mirror.zk_reads over tables.zk.batch_reads) against
the real ZooKeeper: multiRead answers in order, missing znodes, requests split past
MULTI_READ_OPS, the fallback to single gets for a server that does not know multiRead, and the
version probe transaction."""

from __future__ import annotations

import pytest

from tables.mirror.zk_reads import Batch, ReadCounters
from tables.zk import batch_reads
from tables.zk.zookeeper import ZooKeeperStore

pytestmark = [pytest.mark.zk]


@pytest.fixture
def store(zk):
    for index in range(7):
        zk.create(f"/reads/n{index}", f"value {index}".encode(), makepath=True)
    zk.set("/reads/n3", b"changed")  # version 1
    return ZooKeeperStore(zk)


def _read(store, paths, counters=None):
    batch = Batch(store, counters or ReadCounters())
    many = batch.get_many(paths, segment=True)
    batch.wait()
    return many.result()


def test_get_many_answers_every_path_in_order_with_none_for_missing(store, monkeypatch):
    monkeypatch.setattr(batch_reads, "MULTI_READ_OPS", 3)
    paths = ["/reads/n3", "/reads/missing", *(f"/reads/n{i}" for i in (0, 1, 2, 4, 5, 6))]
    counters = ReadCounters()

    found = _read(store, paths, counters)

    assert found[0] is not None and (found[0].data, found[0].version) == (b"changed", 1)
    assert found[1] is None
    assert [z.data for z in found[2:]] == [f"value {i}".encode() for i in (0, 1, 2, 4, 5, 6)]
    assert all(z.mtime_ms > 0 for z in found if z is not None)
    assert (counters.requests, counters.segment_reads, counters.round_trips) == (3, 8, 1)
    assert _read(store, []) == []


def test_a_server_without_multiread_is_read_with_single_gets(store, zk, monkeypatch):
    # ZooKeeper answers an opcode it does not know with UNIMPLEMENTED, as a 3.5 server answers
    # multiRead.
    monkeypatch.setattr(batch_reads.MultiRead, "type", 99)
    try:
        found = _read(store, ["/reads/n0", "/reads/missing", "/reads/n3"])
        assert zk in batch_reads._unsupported
        again = _read(store, ["/reads/n1", "/reads/missing"])  # single gets from the start
    finally:
        batch_reads._unsupported.discard(zk)
    assert [None if z is None else z.data for z in found] == [b"value 0", None, b"changed"]
    assert [None if z is None else z.data for z in again] == [b"value 1", None]
    assert zk.get("/reads/n0")[0] == b"value 0"  # the session is fine


def test_probe_is_true_while_every_version_holds(store, zk):
    def probe(checks):
        batch = Batch(store, ReadCounters())
        pending = batch.probe(checks)
        batch.wait()
        return pending.result()

    checks = [("/reads/n0", 0), ("/reads/n3", 1), ("/reads/absent", -1)]
    assert probe(checks) is True
    zk.set("/reads/n0", b"moved")
    assert probe(checks) is False
    assert probe([("/reads/n0", 1), ("/reads/n3", 1)]) is True
    zk.create("/reads/absent", b"")
    assert probe([("/reads/absent", -1)]) is False
    assert probe([("/reads/gone", 0)]) is False  # a missing znode fails its check
