"""The store interface: what the project calls on a ZooKeeper client (ARCHITECTURE.md §3).

Contract:
- `ZkStore` is the small surface code outside `tables.zk` may use on `ClusterContext.client`:
  `get`, `exists`, `get_children`, `create`, `set`, `delete`, `ensure_path` and `transaction`,
  with ZooKeeper's semantics (versions start at 0 and grow by one per `set`; `version=-1` means
  "any version"; `create(makepath=True)` creates missing parents; `delete(recursive=True)` removes
  the subtree). Failures raise `tables.zk.errors` classes (`NoNode`, `NodeExists`, `BadVersion`,
  `NotEmpty`, other `ZooKeeperError`s), never kazoo's own.
- A transaction collects `create`, `set_data`, `check` and `delete` operations and `commit()`
  applies all or none: it returns one result per operation, a `ZooKeeperError` instance in place
  of the operation that failed (and `RolledBack`-style errors for the others) when it fails.
- Two implementations: `tables.zk.zookeeper.ZooKeeperStore` (the real ZooKeeper through kazoo, which
  also offers the pipelined `*_async` reads, locks and the session's id) and
  `tables.zk.memory.MemoryStore` (a dict, for fast tests). `tests/tables/zk/test_store_contract.py`
  runs one suite against both.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["Stat", "ZkStore", "ZkTransaction"]


class Stat(Protocol):
    """A znode's stat, with ZooKeeper's field names (`tables.zk.browse.STAT_FIELDS`)."""

    @property
    def version(self) -> int: ...

    @property
    def mtime(self) -> int: ...

    @property
    def ctime(self) -> int: ...

    @property
    def czxid(self) -> int: ...

    @property
    def mzxid(self) -> int: ...

    @property
    def pzxid(self) -> int: ...

    @property
    def cversion(self) -> int: ...

    @property
    def aversion(self) -> int: ...

    @property
    def ephemeralOwner(self) -> int: ...

    @property
    def dataLength(self) -> int: ...

    @property
    def numChildren(self) -> int: ...


class ZkTransaction(Protocol):
    def create(self, path: str, value: bytes = b"", ephemeral: bool = False) -> None: ...

    def set_data(self, path: str, value: bytes, version: int = -1) -> None: ...

    def check(self, path: str, version: int) -> None: ...

    def delete(self, path: str, version: int = -1) -> None: ...

    def commit(self) -> list[Any]: ...


@runtime_checkable
class ZkStore(Protocol):
    def get(self, path: str) -> tuple[bytes, Stat]: ...

    def exists(self, path: str) -> Stat | None: ...

    def get_children(self, path: str) -> list[str]: ...

    def create(
        self, path: str, value: bytes = b"", ephemeral: bool = False, makepath: bool = False
    ) -> str: ...

    def set(self, path: str, value: bytes, version: int = -1) -> Stat: ...

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> None: ...

    def ensure_path(self, path: str) -> bool: ...

    def transaction(self) -> ZkTransaction: ...
