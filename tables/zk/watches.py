"""Watches on znodes: kazoo's ChildrenWatch and DataWatch recipes behind two functions.

Contract:
- `watch_children(client, path, fn)` calls `fn(children)` now and after every change of `path`'s
  children; `watch_data(client, path, fn)` calls `fn(data, stat)` now and after every change of
  `path`'s data (`data` and `stat` are None while the znode does not exist). `client` is a
  `ZooKeeperStore` or a kazoo client (a watch needs a real ZooKeeper).
- Callbacks run on kazoo's callback thread: they must return quickly; returning False stops the
  watch. Watches re-arm by themselves after a reconnect on the same client (`tables.zk.client`).
- The returned handle is opaque; keep it referenced for as long as the watch should live.
- `read_watched(client, path, fn)` / `children_watched(client, path, fn)` read once and leave a
  one-shot watch that calls `fn()` (no arguments) at the next change of the znode (its creation
  when it is missing) or of its children; a reader that re-reads on every wake-up re-arms them.
  The same `fn` registered twice on one path fires once. `still_watched(client, path, fn)` tells,
  without a round trip, whether that watch has not fired yet, exactly as of now (module below).
- `listen_session(client, fn)` calls `fn(state)` with "CONNECTED", "SUSPENDED" or "LOST" on every
  change of the session's state, on kazoo's event thread: `fn` must only set memory, never call
  ZooKeeper or block. LOST means the session expired: every ephemeral znode and every watch of it
  is gone, and the client is getting a new session.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kazoo.exceptions import NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from tables.zk.errors import translating
from tables.zk.interface import Stat
from tables.zk.zookeeper import raw

__all__ = [
    "Watch",
    "children_watched",
    "listen_session",
    "read_watched",
    "still_watched",
    "watch_children",
    "watch_data",
]

Watch = Any  # the recipe object; opaque to callers


def watch_children(client: Any, path: str, fn: Callable[[list[str]], bool | None]) -> Watch:
    """Call `fn(children)` now and after every change of `path`'s children."""
    return ChildrenWatch(raw(client), path, fn)


def watch_data(client: Any, path: str, fn: Callable[[Any, Any], bool | None]) -> Watch:
    """Call `fn(data, stat)` now and after every change of `path`'s data."""
    return DataWatch(raw(client), path, fn)


def _trigger(fn: Callable[[], None]) -> Callable[[Any], None]:
    """One callable per `fn` (kazoo keeps a set of watchers per path: it fires once)."""
    cached = _TRIGGERS.get(id(fn))
    if cached is None or cached[0] is not fn:
        cached = (fn, lambda _event: fn())
        _TRIGGERS[id(fn)] = cached
    return cached[1]


_TRIGGERS: dict[int, tuple[Callable[[], None], Callable[[Any], None]]] = {}


def read_watched(client: Any, path: str, fn: Callable[[], None]) -> tuple[bytes, Stat] | None:
    """`path`'s data and stat (None when missing), with a one-shot watch calling `fn()`: a data
    watch while `path` exists (one round trip), else an exists watch (a failed read leaves no
    watch, in ZooKeeper or in kazoo's registry)."""
    kazoo, watcher = raw(client), _trigger(fn)
    with translating():
        while True:
            try:
                return kazoo.get(path, watch=watcher)
            except NoNodeError:
                if kazoo.exists(path, watch=watcher) is None:
                    return None
            # created between the two calls: its exists watch fired; read it


def children_watched(client: Any, path: str, fn: Callable[[], None]) -> list[str]:
    """`path`'s children ([] when missing), with a one-shot watch calling `fn()`: a children
    watch while `path` exists (its deletion fires it too), else an exists watch."""
    kazoo, watcher = raw(client), _trigger(fn)
    with translating():
        while True:
            try:
                return kazoo.get_children(path, watch=watcher)
            except NoNodeError:
                if kazoo.exists(path, watch=watcher) is None:
                    return []
            # created between the two calls: its exists watch fired; read its children


def still_watched(client: Any, path: str, fn: Callable[[], None]) -> bool:
    """Whether the one-shot watch that `read_watched` / `children_watched` left on `path` for
    `fn` is still pending. Kazoo's connection thread drops a watch from its registry the moment
    the change arrives, before it hands any later reply to a caller, while `fn` itself runs later
    on the callback thread: so a False here is never later than this session's own write that
    fired it. (A watch is registered just after its read's reply is handed over: checked in that
    instant, it reads as gone, which only costs a read.)"""
    kazoo = raw(client)
    cached = _TRIGGERS.get(id(fn))
    if cached is None or cached[0] is not fn:
        return False
    full = kazoo.chroot + path if kazoo.chroot else path
    watcher = cached[1]
    return watcher in kazoo._data_watchers.get(full, ()) or watcher in kazoo._child_watchers.get(
        full, ()
    )


def listen_session(client: Any, fn: Callable[[str], None]) -> None:
    """Call `fn("CONNECTED" | "SUSPENDED" | "LOST")` on each session state change."""
    raw(client).add_listener(lambda state: fn(str(state)))
