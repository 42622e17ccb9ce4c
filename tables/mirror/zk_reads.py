"""Pipelined ZooKeeper reads for the mirror (`tables.mirror.sync`), with the counts the
SyncReport shows.

Contract:
- A `Batch` collects asynchronous requests (get, get_children, a version probe) on one
  `ZooKeeperStore` (`tables.zk.zookeeper`) and hands back a `Pending` per request; nothing blocks
  until a `Pending.result()` is called, so a batch of N requests costs one pipelined round trip,
  not N. `Batch.wait()` counts that round trip.
- `Batch.get` resolves to `Znode(data, version, mtime_ms)` or None when the znode is missing;
  `Batch.children` to a list or None when the parent is missing. `Batch.get_many(paths)` resolves
  to one such answer per path, read with ZooKeeper's multiRead in one request per
  `MULTI_READ_OPS` paths (`tables.zk.batch_reads`): for the many small znodes of segment metadata,
  where kazoo's per-request cost would dominate the sync.
- `Batch.probe(checks)` asks whether every `(path, version)` still holds, in ONE request: a
  transaction of `check` ops (success = unchanged; `batch_reads.check_versions_async`); past
  `PROBE_OPS` checks, one transaction per `PROBE_OPS` (a request stays far below ZooKeeper's
  1 MB limit), all in the same round trip. A version of -1 means "the znode did not exist";
  ZooKeeper cannot check absence inside a transaction, so such a path costs an `exists` request
  in the same pipelined batch (unchanged while it still does not exist).
- `ReadCounters` adds up requests and round trips; it is only bookkeeping.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from tables.domain.znrecord import ZNRecord
from tables.zk import codec
from tables.zk.batch_reads import check_versions_async, get_many_async
from tables.zk.errors import NoNode
from tables.zk.zookeeper import ZooKeeperStore

__all__ = ["PROBE_OPS", "Batch", "Pending", "ReadCounters", "Znode", "record_of"]

PROBE_OPS = 1000

T = TypeVar("T")


@dataclass(frozen=True)
class Znode:
    data: bytes
    version: int
    mtime_ms: int


@dataclass
class ReadCounters:
    requests: int = 0
    round_trips: int = 0
    probes: int = 0  # version probes of tables (one request each, plus exists for absent znodes)
    segment_reads: int = 0


class Pending(Generic[T]):
    """An issued request; `result()` blocks until its answer is in."""

    def __init__(self, wait: Callable[[], T]) -> None:
        self._wait = wait
        self._done = False
        self._value: T | None = None

    def result(self) -> T:
        if not self._done:
            self._value = self._wait()
            self._done = True
        return self._value  # type: ignore[return-value]


def _get(async_result: Any) -> Znode | None:
    try:
        data, stat = async_result.get()
    except NoNode:
        return None
    return Znode(data or b"", stat.version, stat.mtime)


def _znode(found: tuple[bytes, Any] | None) -> Znode | None:
    return None if found is None else Znode(found[0], found[1].version, found[1].mtime)


def _children(async_result: Any) -> list[str] | None:
    try:
        return list(async_result.get())
    except NoNode:
        return None


class Batch:
    def __init__(self, client: ZooKeeperStore, counters: ReadCounters) -> None:
        self.client = client
        self.counters = counters
        self._pending: list[Pending[Any]] = []

    def _track(self, pending: Pending[T]) -> Pending[T]:
        self._pending.append(pending)
        return pending

    def get(self, path: str, segment: bool = False) -> Pending[Znode | None]:
        self.counters.requests += 1
        if segment:
            self.counters.segment_reads += 1
        handle = self.client.get_async(path)
        return self._track(Pending(lambda: _get(handle)))

    def get_many(self, paths: Sequence[str], segment: bool = False) -> Pending[list[Znode | None]]:
        """One answer per path, in order (see the module docstring)."""
        if not paths:
            return Pending(list)
        handle = get_many_async(self.client, paths)
        self.counters.requests += handle.requests
        if segment:
            self.counters.segment_reads += len(paths)
        return self._track(Pending(lambda: [_znode(found) for found in handle.get()]))

    def children(self, path: str) -> Pending[list[str] | None]:
        self.counters.requests += 1
        handle = self.client.get_children_async(path)
        return self._track(Pending(lambda: _children(handle)))

    def probe(self, checks: Sequence[tuple[str, int]]) -> Pending[bool]:
        """True when every znode is still at its version (-1: still absent)."""
        present = [(path, version) for path, version in checks if version >= 0]
        absent = [path for path, version in checks if version < 0]
        waits: list[Callable[[], bool]] = []
        for start in range(0, len(present), PROBE_OPS):
            handle = check_versions_async(self.client, present[start : start + PROBE_OPS])
            self.counters.requests += 1
            waits.append(handle.get)
        for path in absent:
            exists = self.client.exists_async(path)
            self.counters.requests += 1
            waits.append(lambda exists=exists: exists.get() is None)
        self.counters.probes += 1
        return self._track(Pending(lambda: all(wait() for wait in waits)))

    def wait(self) -> None:
        """Collect every answer of the batch (one round trip) and start a new batch."""
        for pending in self._pending:
            pending.result()
        if self._pending:
            self.counters.round_trips += 1
        self._pending = []


def record_of(znode: Znode | None, what: str, warnings: list[str]) -> ZNRecord | None:
    """The ZNRecord in `znode` (None when absent); an unreadable one is None and a warning."""
    if znode is None:
        return None
    try:
        return codec.decode(znode.data)
    except ValueError as exc:
        warnings.append(f"{what}: unreadable ({exc})")
        return None
