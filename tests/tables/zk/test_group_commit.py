"""IdealState group commit against the real ZooKeeper: concurrent updates of one znode in one
process queue and go in one compare-and-set write, each applied once, in order; a call that
raises or declines affects only its caller; a version conflict re-applies the whole batch."""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Callable

import pytest

from tables.domain.znrecord import ZNRecord
from tables.zk import codec
from tables.zk.client import new_client
from tables.zk.errors import NoNode
from tables.zk.group_commit import KNOWN_FOR_S, GroupCommit, update_idealstate, waiting
from tables.zk.records import VersionedRecord, create_record, read_record
from tables.zk.zookeeper import as_store
from tests.poll import wait_until

pytestmark = pytest.mark.zk

PATH = "/PinotCluster/IDEALSTATES/t_REALTIME"
ORDER = "order"


def _append(name: str) -> Callable[[ZNRecord], ZNRecord]:
    def change(record: ZNRecord) -> ZNRecord:
        record.list_fields[ORDER] = [*record.list_fields.get(ORDER, []), name]
        return record

    return change


class Call(threading.Thread):
    """One caller in a thread of its own: its result or its exception."""

    def __init__(self, store, mutate: Callable[[ZNRecord], ZNRecord | None]) -> None:
        super().__init__(daemon=True)
        self.store, self.mutate = store, mutate
        self.result: VersionedRecord | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = update_idealstate(self.store, PATH, self.mutate)
        except Exception as exc:
            self.error = exc

    def outcome(self) -> VersionedRecord | BaseException:
        self.join(timeout=30)
        assert not self.is_alive()
        return self.error if self.error is not None else self.result  # type: ignore[return-value]


class Held:
    """A first call whose mutation waits until released, so that the next calls queue."""

    def __init__(self, store, name: str = "held") -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.runs = 0

        def hold(record: ZNRecord) -> ZNRecord:
            self.runs += 1
            self.entered.set()
            assert self.release.wait(timeout=30)
            return _append(name)(record)

        self.call = Call(store, hold)
        self.call.start()
        assert self.entered.wait(timeout=30)


def _queue(store, mutate) -> Call:
    """Start a call and wait until it waits in the queue (so the queue's order is known)."""
    before = waiting(store, PATH)
    call = Call(store, mutate)
    call.start()
    wait_until(lambda: waiting(store, PATH) == before + 1, timeout=10, what="the call queues")
    return call


@pytest.fixture
def store(zk):
    store = as_store(zk)
    create_record(store, PATH, ZNRecord(id="t_REALTIME", simple_fields={"NUM_PARTITIONS": "16"}))
    return store


def _order(store) -> list[str]:
    found = read_record(store, PATH)
    assert found is not None
    return found.record.list_fields.get(ORDER, [])


def test_16_threads_x_50_updates_to_an_idealstate_of_800_segments_lose_none(store):
    threads, per_thread = 16, 50
    returned: dict[str, VersionedRecord] = {}

    def work(worker: int) -> None:
        for i in range(per_thread):
            name = f"t__{worker}__{i}__20240101T0000Z"

            def add(record: ZNRecord, name: str = name) -> ZNRecord:
                record.map_fields[name] = {"Server_a_1": "CONSUMING", "Server_b_1": "CONSUMING"}
                return record

            returned[name] = update_idealstate(store, PATH, add)

    workers = [threading.Thread(target=work, args=(w,)) for w in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    found = read_record(store, PATH)
    assert found is not None
    assert len(found.record.map_fields) == threads * per_thread == len(returned)
    # Each caller got the record as written right after its own mutation.
    assert all(name in result.record.map_fields for name, result in returned.items())
    assert max(result.version for result in returned.values()) == found.version


def test_calls_queued_behind_a_write_go_in_one_write_each_once_in_order(store):
    held = Held(store, "a")
    calls = [_queue(store, _append(name)) for name in ("b", "c", "d")]
    held.release.set()
    first = held.call.outcome()
    results = [call.outcome() for call in calls]
    assert isinstance(first, VersionedRecord) and first.version == 1
    assert [r.version for r in results] == [2, 2, 2]  # one write for the three
    assert [r.record.list_fields[ORDER] for r in results] == [
        ["a", "b"],
        ["a", "b", "c"],
        ["a", "b", "c", "d"],
    ]
    assert _order(store) == ["a", "b", "c", "d"]


def test_a_call_that_raises_or_declines_affects_only_its_caller(store):
    def boom(record: ZNRecord) -> ZNRecord:
        record.list_fields[ORDER] = ["garbage"]  # changed in place, then raises: not written
        raise ValueError("no such segment")

    held = Held(store, "a")
    raising = _queue(store, boom)
    declining = _queue(store, lambda record: None)
    adding = _queue(store, _append("d"))
    held.release.set()
    held.call.outcome()
    error = raising.outcome()
    assert isinstance(error, ValueError) and str(error) == "no such segment"
    unchanged, added = declining.outcome(), adding.outcome()
    assert isinstance(unchanged, VersionedRecord) and unchanged.record.list_fields[ORDER] == ["a"]
    assert isinstance(added, VersionedRecord) and added.record.list_fields[ORDER] == ["a", "d"]
    assert unchanged.version == added.version == 2
    assert _order(store) == ["a", "d"]


def test_a_version_conflict_reapplies_the_whole_batch_once_with_the_calls_queued_meanwhile(
    store, settings
):
    other = as_store(new_client(settings.ZK_HOSTS))  # another session: another process
    runs: dict[str, int] = {"b": 0, "c": 0}
    late: list[Call] = []

    def b(record: ZNRecord) -> ZNRecord:
        runs["b"] += 1
        if runs["b"] == 1:
            # Between the batch's read and its write: another process writes, and one more call
            # of this process queues.
            update_idealstate(other, PATH, _append("x"))
            late.append(_queue(store, _append("e")))
        return _append("b")(record)

    def c(record: ZNRecord) -> ZNRecord:
        runs["c"] += 1
        return _append("c")(record)

    try:
        held = Held(store, "a")
        queued = [_queue(store, b), _queue(store, c)]
        held.release.set()
        held.call.outcome()
        results = [call.outcome() for call in queued]
        results += [call.outcome() for call in late]  # `late` is filled by b's first run
    finally:
        other.stop()
        other.close()
    assert runs == {"b": 2, "c": 2}
    assert _order(store) == ["a", "x", "b", "c", "e"]
    assert all(isinstance(r, VersionedRecord) for r in results)
    assert [r.version for r in results] == [3, 3, 3]  # a: 1, x: 2, the retried batch: 3


def test_a_read_or_write_failure_goes_to_every_caller_of_the_batch(store, settings):
    held = Held(store, "a")
    calls = [_queue(store, _append("b")), _queue(store, _append("c"))]
    store.delete(PATH)  # the table is deleted meanwhile
    held.release.set()
    outcomes = [held.call.outcome(), *(call.outcome() for call in calls)]
    assert [type(o) for o in outcomes] == [NoNode, NoNode, NoNode]
    assert outcomes[1] is not outcomes[2]  # each caller raises an exception of its own


def test_a_call_too_large_for_the_write_limit_fails_alone(store):
    blob = base64.b64encode(os.urandom(2 * codec.WRITE_SIZE_LIMIT)).decode()  # incompressible

    def huge(record: ZNRecord) -> ZNRecord:
        record.simple_fields["blob"] = blob
        return record

    held = Held(store, "a")
    calls = [_queue(store, _append("b")), _queue(store, huge), _queue(store, _append("d"))]
    held.release.set()
    held.call.outcome()
    small, large, last = (call.outcome() for call in calls)
    assert isinstance(large, codec.RecordTooLarge)
    assert isinstance(small, VersionedRecord) and isinstance(last, VersionedRecord)
    assert _order(store) == ["a", "b", "d"]
    assert (
        last.record.list_fields[ORDER] == ["a", "b", "d"]
        and "blob" not in last.record.simple_fields
    )


def test_another_client_does_not_queue_behind_this_one(store, settings):
    other = as_store(new_client(settings.ZK_HOSTS))
    try:
        held = Held(store, "a")
        assert update_idealstate(other, PATH, _append("x")).version == 1  # not held up
        held.release.set()
        assert isinstance(held.call.outcome(), VersionedRecord)
    finally:
        other.stop()
        other.close()
    assert held.runs == 2  # its write lost the version race and was applied again
    assert _order(store) == ["x", "a"]


def test_a_mutation_that_updates_the_same_znode_does_not_wait_on_itself(store):
    runs: list[int] = []

    def outer(record: ZNRecord) -> ZNRecord:
        runs.append(1)
        if len(runs) == 1:
            update_idealstate(store, PATH, _append("inner"))
        return _append("outer")(record)

    call = Call(store, outer)
    call.start()
    assert isinstance(call.outcome(), VersionedRecord)
    assert len(runs) == 2  # the batch met the inner write's version and was applied again
    assert _order(store) == ["inner", "outer"]


def test_after_a_write_the_next_batches_write_on_its_version_without_reading(store, monkeypatch):
    reads: list[str] = []
    real_get = store.get
    monkeypatch.setattr(store, "get", lambda path: reads.append(path) or real_get(path))
    update_idealstate(store, PATH, _append("a"))  # nothing known yet: read, then write
    assert reads == [PATH]
    for name in ("b", "c", "d"):
        update_idealstate(store, PATH, _append(name))
    assert reads == [PATH]  # each batch wrote on the version the one before it got
    assert _order(store) == ["a", "b", "c", "d"]
    assert store.exists(PATH).version == 4


def test_another_process_writing_in_between_is_read_by_the_next_batch(store, settings):
    other = as_store(new_client(settings.ZK_HOSTS))  # another session: another process

    def needs_y(record: ZNRecord) -> ZNRecord:
        if "y" not in record.list_fields[ORDER]:
            raise ValueError("y is missing")
        return _append("c")(record)

    try:
        update_idealstate(store, PATH, _append("a"))
        update_idealstate(other, PATH, _append("x"))
        added = update_idealstate(store, PATH, _append("b"))  # a conflict on what it knew
        assert added.record.list_fields[ORDER] == ["a", "x", "b"] and added.version == 3
        update_idealstate(other, PATH, _append("y"))
        # A call that raises, or declines, answers the znode as it is, not what this process
        # last wrote: on the bytes it knew (without "y") this one raises.
        done = update_idealstate(store, PATH, needs_y)
        assert done.record.list_fields[ORDER] == ["a", "x", "b", "y", "c"] and done.version == 5
        update_idealstate(other, PATH, _append("z"))
        declined = update_idealstate(store, PATH, lambda record: None)
        assert declined.record.list_fields[ORDER] == ["a", "x", "b", "y", "c", "z"]
        assert declined.version == 6
    finally:
        other.stop()
        other.close()


def test_a_write_is_a_base_only_within_known_for_s_and_only_for_its_own_client(
    store, settings, monkeypatch
):
    now = [100.0]
    group = GroupCommit(clock=lambda: now[0])
    reads: list[str] = []
    real_get = store.get
    monkeypatch.setattr(store, "get", lambda path: reads.append(path) or real_get(path))
    group.update(store, PATH, _append("a"))
    group.update(store, PATH, _append("b"))
    assert len(reads) == 1  # b on the bytes a wrote
    now[0] += KNOWN_FOR_S + 0.1
    group.update(store, PATH, _append("c"))
    assert len(reads) == 2  # too old: read again
    other = as_store(new_client(settings.ZK_HOSTS))
    try:
        assert group._last_written(other, PATH) is None  # another client knows nothing
    finally:
        other.stop()
        other.close()
    assert _order(store) == ["a", "b", "c"]
