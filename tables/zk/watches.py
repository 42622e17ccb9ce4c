"""Watches on znodes: kazoo's ChildrenWatch and DataWatch recipes behind two functions.

Contract:
- `watch_children(client, path, fn)` calls `fn(children)` now and after every change of `path`'s
  children; `watch_data(client, path, fn)` calls `fn(data, stat)` now and after every change of
  `path`'s data (`data` and `stat` are None while the znode does not exist). `client` is a
  `ZooKeeperStore` or a kazoo client (a watch needs a real ZooKeeper).
- Callbacks run on kazoo's callback thread: they must return quickly; returning False stops the
  watch. Watches re-arm by themselves after a reconnect on the same client (`tables.zk.client`).
- The returned handle is opaque; keep it referenced for as long as the watch should live.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from tables.zk.zookeeper import raw

__all__ = ["Watch", "watch_children", "watch_data"]

Watch = Any  # the recipe object; opaque to callers


def watch_children(client: Any, path: str, fn: Callable[[list[str]], bool | None]) -> Watch:
    """Call `fn(children)` now and after every change of `path`'s children."""
    return ChildrenWatch(raw(client), path, fn)


def watch_data(client: Any, path: str, fn: Callable[[Any, Any], bool | None]) -> Watch:
    """Call `fn(data, stat)` now and after every change of `path`'s data."""
    return DataWatch(raw(client), path, fn)
