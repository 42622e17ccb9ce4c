"""`MemoryStore`: the store interface (`tables.zk.interface.ZkStore`) over a dict, for fast tests.

Contract:
- Behaves as ZooKeeper does for every call of the interface, as far as the project relies on it;
  `tests/tables/zk/test_store_contract.py` runs the same suite against this store and against the
  real ZooKeeper (`ZooKeeperStore`), which keeps the two honest.
- Versions start at 0 and grow by one per `set`; `mtime` is milliseconds from `now_ms`.
- A stat carries ZooKeeper's fields (`tables.zk.browse.STAT_FIELDS`): zxids from one counter of
  the store (`czxid` at create, `mzxid` at each set, `pzxid` at each change of the children),
  `cversion` grows by one per child created or deleted, `dataLength` is the data's size and
  `ephemeralOwner` the session id of `client_id` for an ephemeral znode, 0 otherwise.
- Errors are the project's (`tables.zk.errors`): `NoNode`, `NodeExists`, `BadVersion`, `NotEmpty`.
  A recursive delete of a missing znode is not an error (as kazoo's). A transaction applies all of
  its operations or none; when it fails, its results hold the failing operation's error and a
  rolled-back error for every other operation.
- Thread-safe (one lock). No watches, sessions or pipelined reads: code needing those needs a real
  ZooKeeper. Ephemeral znodes are only flagged (there is no session to end).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from kazoo.exceptions import RolledBackError

from tables.zk.errors import BadVersion, NodeExists, NoNode, NotEmpty, ZooKeeperError, translate

__all__ = ["MemoryStat", "MemoryStore"]


SESSION_ID = 1  # the session of `MemoryStore.client_id`


@dataclass(frozen=True)
class MemoryStat:
    version: int
    mtime: int
    ctime: int
    ephemeral: bool = False
    numChildren: int = 0  # ZooKeeper's names from here on
    czxid: int = 0
    mzxid: int = 0
    pzxid: int = 0
    cversion: int = 0
    aversion: int = 0
    dataLength: int = 0

    @property
    def ephemeralOwner(self) -> int:
        return SESSION_ID if self.ephemeral else 0


@dataclass
class _Node:
    data: bytes
    stat: MemoryStat
    children: set[str] = field(default_factory=set)


def _parent(path: str) -> str:
    head = path.rsplit("/", 1)[0]
    return head or "/"


def _name(path: str) -> str:
    return path.rsplit("/", 1)[1]


def _norm(path: str) -> str:
    if not path.startswith("/"):
        raise ValueError(f"not an absolute znode path: {path!r}")
    return path.rstrip("/") or "/"


class _Transaction:
    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._ops: list[Callable[[dict[str, _Node]], Any]] = []

    def create(self, path: str, value: bytes = b"", ephemeral: bool = False) -> None:
        self._ops.append(lambda nodes: self._store._create(nodes, path, value, ephemeral, False))

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self._ops.append(lambda nodes: self._store._set(nodes, path, value, version))

    def check(self, path: str, version: int) -> None:
        def check(nodes: dict[str, _Node]) -> bool:
            node = self._store._node(nodes, path)
            if node.stat.version != version:
                raise BadVersion(path)
            return True

        self._ops.append(check)

    def delete(self, path: str, version: int = -1) -> None:
        self._ops.append(lambda nodes: self._store._delete(nodes, path, version))

    def commit(self) -> list[Any]:
        return self._store._commit(self._ops)


class MemoryStore:
    """A dict-backed ZooKeeper for tests (see the module's contract)."""

    def __init__(self, now_ms: Callable[[], int] | None = None) -> None:
        self._now = now_ms or (lambda: int(time.time() * 1000))
        self._lock = threading.RLock()
        self._locks: dict[str, threading.Lock] = {}
        now = self._now()
        self._zxid = 0
        self._nodes: dict[str, _Node] = {"/": _Node(b"", MemoryStat(0, now, now))}

    # --- the interface ---------------------------------------------------------------------------
    def get(self, path: str) -> tuple[bytes, MemoryStat]:
        with self._lock:
            node = self._node(self._nodes, path)
            return node.data, self._stat(node)

    def exists(self, path: str) -> MemoryStat | None:
        with self._lock:
            node = self._nodes.get(_norm(path))
            return None if node is None else self._stat(node)

    def get_children(self, path: str) -> list[str]:
        with self._lock:
            return sorted(self._node(self._nodes, path).children)

    def create(
        self, path: str, value: bytes = b"", ephemeral: bool = False, makepath: bool = False
    ) -> str:
        with self._lock:
            return self._create(self._nodes, path, value, ephemeral, makepath)

    def set(self, path: str, value: bytes, version: int = -1) -> MemoryStat:
        with self._lock:
            return self._set(self._nodes, path, value, version)

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        with self._lock:
            path = _norm(path)
            if recursive:
                if path in self._nodes:
                    self._drop_tree(path)
                return
            self._delete(self._nodes, path, version)

    def ensure_path(self, path: str) -> bool:
        with self._lock:
            path = _norm(path)
            if path not in self._nodes:
                self._create(self._nodes, path, b"", False, True)
            return True

    def transaction(self) -> _Transaction:
        return _Transaction(self)

    # --- a few extras of the real store, enough for the controller's code ------------------------
    @property
    def client_id(self) -> tuple[int, bytes]:
        return (SESSION_ID, b"")

    @property
    def connected(self) -> bool:
        return True

    def lock(self, path: str, identifier: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(_norm(path), threading.Lock())

    # --- internals (called with the lock held) ---------------------------------------------------
    @staticmethod
    def _node(nodes: dict[str, _Node], path: str) -> _Node:
        node = nodes.get(_norm(path))
        if node is None:
            raise NoNode(path)
        return node

    @staticmethod
    def _stat(node: _Node) -> MemoryStat:
        return replace(node.stat, numChildren=len(node.children), dataLength=len(node.data))

    def _next_zxid(self) -> int:
        self._zxid += 1
        return self._zxid

    @staticmethod
    def _children_changed(parent: _Node, zxid: int) -> None:
        parent.stat = replace(parent.stat, cversion=parent.stat.cversion + 1, pzxid=zxid)

    def _create(
        self, nodes: dict[str, _Node], path: str, value: bytes, ephemeral: bool, makepath: bool
    ) -> str:
        path = _norm(path)
        if path == "/" or path in nodes:
            raise NodeExists(path)
        parent = _parent(path)
        if parent not in nodes:
            if not makepath:
                raise NoNode(parent)
            self._create(nodes, parent, b"", False, True)
        now, zxid = self._now(), self._next_zxid()
        stat = MemoryStat(0, now, now, ephemeral, czxid=zxid, mzxid=zxid, pzxid=zxid)
        nodes[path] = _Node(bytes(value), stat)
        nodes[parent].children.add(_name(path))
        self._children_changed(nodes[parent], zxid)
        return path

    def _set(self, nodes: dict[str, _Node], path: str, value: bytes, version: int) -> MemoryStat:
        node = self._node(nodes, path)
        if version != -1 and version != node.stat.version:
            raise BadVersion(path)
        node.data = bytes(value)
        node.stat = replace(
            node.stat, version=node.stat.version + 1, mtime=self._now(), mzxid=self._next_zxid()
        )
        return self._stat(node)

    def _delete(self, nodes: dict[str, _Node], path: str, version: int) -> bool:
        path = _norm(path)
        node = self._node(nodes, path)
        if node.children:
            raise NotEmpty(path)
        if version != -1 and version != node.stat.version:
            raise BadVersion(path)
        del nodes[path]
        nodes[_parent(path)].children.discard(_name(path))
        self._children_changed(nodes[_parent(path)], self._next_zxid())
        return True

    def _drop_tree(self, path: str) -> None:
        for child in list(self._nodes[path].children):
            self._drop_tree(f"{path.rstrip('/')}/{child}")
        if path != "/":
            self._delete(self._nodes, path, -1)

    def _commit(self, ops: list[Callable[[dict[str, _Node]], Any]]) -> list[Any]:
        with self._lock:
            trial = {p: _Node(n.data, n.stat, set(n.children)) for p, n in self._nodes.items()}
            results: list[Any] = []
            for i, op in enumerate(ops):
                try:
                    results.append(op(trial))
                except ZooKeeperError as exc:
                    rolled = translate(RolledBackError())
                    return [rolled] * i + [exc] + [rolled] * (len(ops) - i - 1)
            self._nodes = trial
            return results
