"""The project's ZooKeeper errors: what code outside `tables.zk` catches (ARCHITECTURE.md §3).

Contract:
- `ZooKeeperError` is the base of every error a store (`tables.zk.interface.ZkStore`) raises or
  returns in a transaction's results. The named ones are what callers test for: `NoNode` (the
  znode, or its parent on create, is missing), `NodeExists` (create of an existing znode),
  `BadVersion` (a compare-and-set lost), `NotEmpty` (delete of a znode with children) and
  `LockTimeout` (a lock not acquired in time). Any other failure (connection loss, session
  expiry, ...) is a plain `ZooKeeperError` subclass; `tables.zk.client.unavailable_reason` tells
  the transient ones apart.
- `translate(exc)` turns one of kazoo's exceptions into the project's: the result is an instance
  of the project class AND of kazoo's original class (each project class subclasses the kazoo one
  it stands for), so code written against either catches it; a non-kazoo exception is returned
  as it is. `translating()` is the context manager that re-raises translated, with the original
  traceback. `tables.zk` translates on every call of its store (`ZooKeeperStore`); the in-memory
  store (`tables.zk.memory`) raises these classes directly.
- Only `tables.zk` imports kazoo; nothing else needs to.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from kazoo import exceptions as kz

__all__ = [
    "BadVersion",
    "LockTimeout",
    "NoNode",
    "NodeExists",
    "NotEmpty",
    "ZooKeeperError",
    "translate",
    "translating",
]


class ZooKeeperError(Exception):
    """Base of the project's ZooKeeper errors."""


class NoNode(ZooKeeperError, kz.NoNodeError):
    """The znode (or, on create, its parent) does not exist."""


class NodeExists(ZooKeeperError, kz.NodeExistsError):
    """The znode to create exists already."""


class BadVersion(ZooKeeperError, kz.BadVersionError):
    """The znode is no longer at the version the write expected."""


class NotEmpty(ZooKeeperError, kz.NotEmptyError):
    """The znode to delete has children."""


class LockTimeout(ZooKeeperError, kz.LockTimeout):
    """A lock was not acquired within its timeout."""


_NAMED: dict[type[BaseException], type[ZooKeeperError]] = {
    kz.NoNodeError: NoNode,
    kz.NodeExistsError: NodeExists,
    kz.BadVersionError: BadVersion,
    kz.NotEmptyError: NotEmpty,
    kz.LockTimeout: LockTimeout,
}
_made: dict[type[BaseException], type[ZooKeeperError]] = {}
_lock = threading.Lock()


def _project_class(cls: type[BaseException]) -> type[ZooKeeperError]:
    """The project class standing for kazoo's `cls` (made once for the unnamed ones)."""
    named = _NAMED.get(cls)
    if named is not None:
        return named
    with _lock:
        made = _made.get(cls)
        if made is None:
            made = type(cls.__name__, (ZooKeeperError, cls), {"__module__": __name__})
            _made[cls] = made
            globals().setdefault(cls.__name__, made)  # findable by name (pickling, Celery)
        return made


def translate(exc: BaseException) -> BaseException:
    """`exc` as the project's error when it is kazoo's; otherwise `exc` itself."""
    if isinstance(exc, ZooKeeperError) or not isinstance(exc, kz.KazooException):
        return exc
    out = _project_class(type(exc))(*exc.args)
    out.__cause__, out.__context__ = exc.__cause__, exc.__context__
    out.__traceback__ = exc.__traceback__
    return out


@contextmanager
def translating() -> Iterator[None]:
    """Re-raise kazoo's exceptions as the project's (see `translate`)."""
    try:
        yield
    except kz.KazooException as exc:
        raise translate(exc) from None


# Every kazoo error has its project class from import on, so any of them unpickles by name.
for _cls in list(vars(kz).values()):
    if isinstance(_cls, type) and issubclass(_cls, kz.KazooException):
        _project_class(_cls)
