"""ZNRecords in ZooKeeper: versioned reads, creates, and compare-and-set updates.

`update_record` is `tables.zk.store.update` at the ZNRecord level: `mutate` gets a copy of the
current record and returns the new one (or None for "no change"); it may run several times under
contention, so it must not have side effects. The controller's IdealState writes use
`tables.zk.group_commit.update_idealstate` instead: the same contract, with the concurrent calls of
one process batched into one compare-and-set write.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kazoo.exceptions import NoNodeError

from tables.domain.znrecord import ZNRecord
from tables.zk import codec, store
from tables.zk.interface import ZkStore

__all__ = [
    "VersionedRecord",
    "create_record",
    "read_record",
    "read_records",
    "update_record",
    "write_record",
]


@dataclass(frozen=True)
class VersionedRecord:
    record: ZNRecord
    version: int
    mtime_ms: int


def read_record(client: ZkStore, path: str) -> VersionedRecord | None:
    found = store.read(client, path)
    if found is None:
        return None
    return VersionedRecord(codec.decode(found.data), found.version, found.mtime_ms)


def read_records(client: ZkStore, paths: Sequence[str]) -> list[VersionedRecord | None]:
    """`read_record` of each path, in order (None where missing). On a real ZooKeeper (a client
    with `get_async`) every read is sent before the first answer is awaited: one round trip's
    wait for all of them instead of one each. Not atomic, like separate reads."""
    get_async = getattr(client, "get_async", None)
    if get_async is None or len(paths) < 2:
        return [read_record(client, path) for path in paths]
    pending = [get_async(path) for path in paths]
    out: list[VersionedRecord | None] = []
    for handle in pending:
        try:
            data, stat = handle.get()
        except NoNodeError:
            out.append(None)
            continue
        out.append(VersionedRecord(codec.decode(data), stat.version, stat.mtime))
    return out


def create_record(client: ZkStore, path: str, record: ZNRecord, ephemeral: bool = False) -> None:
    """Create the znode (and its parents); NodeExistsError if it is there already."""
    client.create(path, codec.encode(record), makepath=True, ephemeral=ephemeral)


def write_record(client: ZkStore, path: str, record: ZNRecord, version: int) -> int:
    """Set the znode only if its version is still `version`; returns the new version."""
    return client.set(path, codec.encode(record), version=version).version


def update_record(
    client: ZkStore,
    path: str,
    mutate: Callable[[ZNRecord], ZNRecord | None],
    known: VersionedRecord | None = None,
) -> VersionedRecord:
    """Compare-and-set `mutate` over the record at `path`, retried on version conflicts. Returns
    the record as written (the one `mutate` returned last: not decoded again from its bytes) or,
    when `mutate` changed nothing, as read. `known`: the znode as read earlier, tried first
    without reading (`tables.zk.store.update`)."""
    written: list[ZNRecord] = []

    def apply(data: bytes) -> bytes | None:
        new = mutate(codec.decode(data))
        written[:] = [] if new is None else [new]
        return None if new is None else codec.encode(new)

    as_read = None
    if known is not None:
        as_read = store.Versioned(codec.encode(known.record), known.version, known.mtime_ms)
    result = store.update(client, path, apply, known=as_read)
    record = written[0] if written else codec.decode(result.data)
    return VersionedRecord(record, result.version, result.mtime_ms)
