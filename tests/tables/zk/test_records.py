"""ZNRecord reads against the real ZooKeeper: `read_records` pipelines, in order, None where
missing, the same answers as one `read_record` each (and on the in-memory store too)."""

from __future__ import annotations

import pytest

from tables.domain.znrecord import ZNRecord
from tables.zk.memory import MemoryStore
from tables.zk.records import create_record, read_record, read_records, update_record
from tables.zk.zookeeper import as_store

pytestmark = pytest.mark.zk


def _fill(client) -> list[str]:
    paths = [f"/records/r{i}" for i in range(5)]
    for i, path in enumerate(paths):
        create_record(client, path, ZNRecord(id=f"r{i}", simple_fields={"i": str(i)}))
    update_record(client, paths[2], lambda r: ZNRecord(id=r.id, simple_fields={"i": "two"}))
    return paths


@pytest.mark.parametrize("kind", ["zookeeper", "memory"])
def test_read_records_answers_as_one_read_record_each_in_order(zk, kind):
    client = as_store(zk) if kind == "zookeeper" else MemoryStore()
    paths = _fill(client)
    wanted = [*paths[::-1], "/records/missing", paths[2]]
    found = read_records(client, wanted)
    assert found == [read_record(client, path) for path in wanted]
    assert found[len(paths)] is None
    assert [r.record.simple_fields["i"] for r in found if r is not None][:2] == ["4", "3"]
    assert (found[-1].record.simple_fields["i"], found[-1].version) == ("two", 1)
    assert read_records(client, []) == []


class _CountingReads:
    """A store that counts the reads it answers."""

    def __init__(self, inner) -> None:
        self.inner, self.reads = inner, 0

    def get(self, path):
        self.reads += 1
        return self.inner.get(path)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _bump(record: ZNRecord) -> ZNRecord:
    return ZNRecord(id=record.id, simple_fields={"n": str(int(record.simple_fields["n"]) + 1)})


@pytest.mark.parametrize("kind", ["zookeeper", "memory"])
def test_an_update_on_the_znode_as_known_writes_without_reading(zk, kind):
    inner = as_store(zk) if kind == "zookeeper" else MemoryStore()
    create_record(inner, "/records/k", ZNRecord(id="k", simple_fields={"n": "0"}))
    client = _CountingReads(inner)
    known = read_record(client, "/records/k")

    written = update_record(client, "/records/k", _bump, known=known)
    assert client.reads == 1  # the read that made `known`, none for the update
    assert (written.record.simple_fields["n"], written.version) == ("1", known.version + 1)

    # Stale now: its write's version conflict reads, and the update lands on the znode as it is.
    again = update_record(client, "/records/k", _bump, known=known)
    assert client.reads == 2
    assert (again.record.simple_fields["n"], again.version) == ("2", known.version + 2)
    assert read_record(inner, "/records/k").record.simple_fields["n"] == "2"


def test_a_refusal_on_the_znode_as_known_is_decided_again_on_a_read(zk):
    client = as_store(zk)
    create_record(client, "/records/r", ZNRecord(id="r", simple_fields={"state": "OLD"}))
    known = read_record(client, "/records/r")
    update_record(client, "/records/r", lambda r: ZNRecord(id="r", simple_fields={"state": "OK"}))

    def only_from_ok(record: ZNRecord) -> ZNRecord:
        if record.simple_fields["state"] != "OK":
            raise ValueError("not OK")
        return ZNRecord(id="r", simple_fields={"state": "DONE"})

    written = update_record(client, "/records/r", only_from_ok, known=known)  # stale: reads
    assert written.record.simple_fields["state"] == "DONE"
    with pytest.raises(ValueError, match="not OK"):  # what is read still refuses
        update_record(client, "/records/r", only_from_ok, known=written)
