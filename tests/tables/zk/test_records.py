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
