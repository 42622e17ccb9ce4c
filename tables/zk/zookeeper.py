"""`ZooKeeperStore`: the store interface (`tables.zk.interface.ZkStore`) over a kazoo client: the
real ZooKeeper.

Contract:
- Every call is kazoo's call of the same name, with kazoo's exceptions translated into the
  project's (`tables.zk.errors.translate`), including the results of a transaction and of the
  pipelined `*_async` reads (their `.get()` raises translated).
- Besides the interface it offers what only a real ZooKeeper has: `get_async`,
  `get_children_async`, `exists_async` (pipelined reads), `lock(path, identifier)` (kazoo's Lock
  recipe; `acquire` raises `LockTimeout`), the session (`client_id`, `connected`) and `stop` /
  `close` for the owner of the client.
- `as_store(client)` wraps a kazoo client (a store is returned as it is);
  `raw(store)` gives the kazoo client back, for the recipes inside `tables.zk` (watches, locks,
  listeners).
"""

from __future__ import annotations

from typing import Any

from kazoo.client import KazooClient

from tables.zk.errors import translate, translating
from tables.zk.interface import Stat

__all__ = ["ZooKeeperStore", "as_store", "raw"]


class _Async:
    """A pending kazoo request whose `get()` raises the project's errors."""

    def __init__(self, result: Any) -> None:
        self._result = result

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        with translating():
            return self._result.get(block, timeout)


class _Transaction:
    def __init__(self, tx: Any) -> None:
        self._tx = tx

    def create(self, path: str, value: bytes = b"", ephemeral: bool = False) -> None:
        self._tx.create(path, value, ephemeral=ephemeral)

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self._tx.set_data(path, value, version=version)

    def check(self, path: str, version: int) -> None:
        self._tx.check(path, version)

    def delete(self, path: str, version: int = -1) -> None:
        self._tx.delete(path, version=version)

    def commit(self) -> list[Any]:
        with translating():
            return [translate(r) if isinstance(r, Exception) else r for r in self._tx.commit()]

    def commit_async(self) -> _Async:
        return _Async(_TranslatedResults(self._tx.commit_async()))


class _TranslatedResults:
    def __init__(self, result: Any) -> None:
        self._result = result

    def get(self, block: bool = True, timeout: float | None = None) -> list[Any]:
        results = self._result.get(block, timeout)
        return [translate(r) if isinstance(r, Exception) else r for r in results]


class _Lock:
    def __init__(self, lock: Any) -> None:
        self._lock = lock

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        with translating():
            return bool(self._lock.acquire(blocking=blocking, timeout=timeout))

    def release(self) -> bool:
        with translating():
            return bool(self._lock.release())


class ZooKeeperStore:
    """A kazoo client behind the project's store interface."""

    def __init__(self, client: KazooClient) -> None:
        self.kazoo = client

    def __repr__(self) -> str:
        return f"ZooKeeperStore({self.kazoo.hosts!r})"

    # --- the interface ---------------------------------------------------------------------------
    def get(self, path: str) -> tuple[bytes, Stat]:
        with translating():
            return self.kazoo.get(path)

    def exists(self, path: str) -> Stat | None:
        with translating():
            return self.kazoo.exists(path)

    def get_children(self, path: str) -> list[str]:
        with translating():
            return self.kazoo.get_children(path)

    def create(
        self, path: str, value: bytes = b"", ephemeral: bool = False, makepath: bool = False
    ) -> str:
        with translating():
            return self.kazoo.create(path, value, ephemeral=ephemeral, makepath=makepath)

    def set(self, path: str, value: bytes, version: int = -1) -> Stat:
        with translating():
            return self.kazoo.set(path, value, version=version)

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        with translating():
            self.kazoo.delete(path, version=version, recursive=recursive)

    def ensure_path(self, path: str) -> bool:
        with translating():
            return bool(self.kazoo.ensure_path(path))

    def transaction(self) -> _Transaction:
        return _Transaction(self.kazoo.transaction())

    # --- what only a real ZooKeeper has ----------------------------------------------------------
    def get_async(self, path: str) -> _Async:
        return _Async(self.kazoo.get_async(path))

    def get_children_async(self, path: str) -> _Async:
        return _Async(self.kazoo.get_children_async(path))

    def exists_async(self, path: str) -> _Async:
        return _Async(self.kazoo.exists_async(path))

    def lock(self, path: str, identifier: str) -> _Lock:
        return _Lock(self.kazoo.Lock(path, identifier))

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        return self.kazoo.client_id

    @property
    def connected(self) -> bool:
        return bool(self.kazoo.connected)

    def stop(self) -> None:
        self.kazoo.stop()

    def close(self) -> None:
        self.kazoo.close()


def as_store(client: Any) -> Any:
    """`client` as a store: a kazoo client wrapped in a `ZooKeeperStore`, any store as it is."""
    return ZooKeeperStore(client) if isinstance(client, KazooClient) else client


def raw(client: Any) -> KazooClient:
    """The kazoo client under `client` (a `ZooKeeperStore` or a kazoo client)."""
    return client.kazoo if isinstance(client, ZooKeeperStore) else client
