"""Reads answered from memory until ZooKeeper says the znode changed.

For hot read paths that ask the same small question many times a second (the completion
protocol's caller check: is this instance live, which replicas does the IdealState give this
segment) and can take an answer a few milliseconds old. A read queued in a session waits behind
that session's pending writes (ZooKeeper answers a session's requests in order), so under a burst
of commits every uncached read also waits for other threads' fsyncs.

Contract:
- `WatchedReads(client)`; `children(path)` is `path`'s children ([] when missing), `data(path)`
  its (bytes, stat) or None when missing. Keep one per process and client:
  `reads_through(client)` tells whether a client (a store wrapping the same kazoo client) is
  this one's; a new `WatchedReads` per call caches nothing and leaves a watcher per call on
  every znode it reads.
- The first read of a path, and the first after it changed, goes to ZooKeeper and leaves a
  one-shot watch (`tables.zk.watches.read_watched` / `children_watched`); until that watch fires,
  the same read is answered from memory, with no round trip.
- Staleness: a watch fires once the change is committed, and ZooKeeper delivers it to this session
  before any later reply; kazoo drops the fired watch on its connection thread before handing
  over that later reply (its callback runs afterwards, on another thread), and a cached answer
  is given only while its watch is still registered (`tables.zk.watches.still_watched`). So a
  change this session wrote is never answered stale afterwards; another session's change may
  be, for as long as its notification is in flight. Callers that
  must not act on a stale "no" (refusing a call) ask again with `fresh=True`, which reads
  ZooKeeper and re-arms the watch. `stale_ok_s` > 0 takes a value read less than that many
  seconds ago even when its znode changed since (for answers a recent past still makes right).
- A session change (expiry: every watch is lost) drops everything cached.
- Clients without watches (the in-memory store) are read directly each time.
- Thread-safe: the lock is never held across I/O; watch callbacks only mark entries stale.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tables.zk.watches import children_watched, read_watched, still_watched
from tables.zk.zookeeper import ZooKeeperStore, raw

__all__ = ["WatchedReads"]


@dataclass
class _Entry:
    value: Any = None
    session: Any = None
    gen: int = 0  # bumped by the entry's watch
    valid_gen: int = -1  # the gen its value was read in (valid while equal)
    read_at: float = 0.0  # time.monotonic() of the read that gave `value`

    def __post_init__(self) -> None:
        self.on_change = self.changed  # one callable per entry: the watch registry dedups by it

    def changed(self) -> None:
        self.gen += 1


class WatchedReads:
    def __init__(self, client: Any) -> None:
        self.client = client
        self._watches = _has_watches(client)
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], _Entry] = {}

    def reads_through(self, client: Any) -> bool:
        """Whether `client` is this cache's ZooKeeper session: the same kazoo client, however it
        is wrapped (each `ClusterContext` wraps the process's client in a new store object)."""
        return raw(client) is raw(self.client)

    def children(self, path: str, fresh: bool = False, stale_ok_s: float = 0.0) -> list[str]:
        if not self._watches:
            return list(self.client.get_children(path)) if self.client.exists(path) else []
        return self._read(("children", path), fresh, children_watched, stale_ok_s)

    def data(
        self, path: str, fresh: bool = False, stale_ok_s: float = 0.0
    ) -> tuple[bytes, Any] | None:
        if not self._watches:
            return None if self.client.exists(path) is None else self.client.get(path)
        return self._read(("data", path), fresh, read_watched, stale_ok_s)

    def _read(self, key: tuple[str, str], fresh: bool, read: Callable, stale_ok_s: float) -> Any:
        session = raw(self.client).client_id
        with self._lock:
            entry = self._entries.setdefault(key, _Entry())
            known = entry.valid_gen >= 0 and entry.session == session and not fresh
            if known and time.monotonic() - entry.read_at < stale_ok_s:
                return entry.value  # changed or not: the caller takes a value that young
            valid = entry.valid_gen == entry.gen
            if known and valid and still_watched(self.client, key[1], entry.on_change):
                return entry.value
            gen = entry.gen  # a watch firing during the read below makes this value stale
        read_at = time.monotonic()
        value = read(self.client, key[1], entry.on_change)
        with self._lock:
            entry.value, entry.session, entry.valid_gen = value, session, gen
            entry.read_at = read_at
        return value


def _has_watches(client: Any) -> bool:
    return isinstance(client, ZooKeeperStore) or hasattr(raw(client), "add_listener")
