"""One kazoo client per process and per connect string, created lazily after fork.

Contract:
- `get_client(hosts)` returns a started client; the first call in a process connects (bounded by
  `timeout`), later calls reuse it. Never create a client at import time: gunicorn and Celery fork
  after import, and a forked kazoo connection is shared by accident.
- A state listener records the session state in `session_state(hosts)`; it only sets a value, it
  never blocks or calls ZooKeeper (kazoo runs listeners on its one event thread).
- `ZooKeeperUnavailable` is the one error for "could not connect in time", with a message fit for
  an operator.
"""

from __future__ import annotations

import logging
import os
import threading

from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError

log = logging.getLogger(__name__)

__all__ = ["ZooKeeperUnavailable", "close_all", "get_client", "new_client", "session_state"]


class ZooKeeperUnavailable(Exception):
    """ZooKeeper could not be reached within the timeout."""


_lock = threading.Lock()
_clients: dict[str, KazooClient] = {}
_states: dict[str, str] = {}
_owner_pid = os.getpid()


def new_client(hosts: str, timeout: float = 5.0) -> KazooClient:
    """A started client that the caller owns (and must stop)."""
    client = KazooClient(hosts=hosts, timeout=max(timeout, 1.0))
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError:
        client.stop()
        client.close()
        raise ZooKeeperUnavailable(
            f"ZooKeeper at {hosts} is unreachable (no session within {timeout:g} s)"
        ) from None
    return client


def get_client(hosts: str, timeout: float = 5.0) -> KazooClient:
    """The process-wide client for `hosts`, connecting on first use."""
    global _owner_pid
    with _lock:
        if os.getpid() != _owner_pid:
            # Forked: the parent's clients (and their threads) are not ours to use or stop.
            _clients.clear()
            _states.clear()
            _owner_pid = os.getpid()
        client = _clients.get(hosts)
        if client is not None and client.connected:
            return client
        if client is not None:
            _forget(hosts)
        client = new_client(hosts, timeout)
        _states[hosts] = KazooState.CONNECTED
        client.add_listener(lambda state: _states.__setitem__(hosts, state))
        _clients[hosts] = client
        return client


def session_state(hosts: str) -> str | None:
    """The last session state seen for `hosts` (CONNECTED, SUSPENDED, LOST) or None."""
    return _states.get(hosts)


def _forget(hosts: str) -> None:
    client = _clients.pop(hosts, None)
    _states.pop(hosts, None)
    if client is not None:
        try:
            client.stop()
            client.close()
        except Exception:  # a dead connection may fail to close; it is dropped either way
            log.debug("closing kazoo client for %s failed", hosts, exc_info=True)


def close_all() -> None:
    """Stop every client of this process (shutdown, and between tests)."""
    with _lock:
        for hosts in list(_clients):
            _forget(hosts)
