"""One kazoo client per process and per connect string, created lazily after fork.

Contract:
- `get_client(hosts)` returns the process's client for `hosts`; the first call in a process
  connects (bounded by `timeout`), later calls reuse it. Never create a client at import time:
  gunicorn and Celery fork after import, and a forked kazoo connection is shared by accident.
- The client outlives ZooKeeper stalls and session expiries. It is never replaced while it is
  reconnecting: kazoo reconnects by itself (back-off capped at `RECONNECT_MAX_DELAY_S`) and its
  watch recipes (DataWatch, ChildrenWatch) re-arm on the same client, so a process keeps its
  watches across an outage. A session expiry gives the same client a new session id; owners of
  session-bound nodes (live instances, CURRENTSTATES) compare `session_id_of` and re-register.
  While the client is not connected, `get_client` waits up to `timeout` for it and then raises
  `ZooKeeperUnavailable` (the web answers 503), rather than queueing calls that would hang.
- A state listener records the session state in `session_state(hosts)`; it only sets a value, it
  never blocks or calls ZooKeeper (kazoo runs listeners on its one event thread).
- `connection_problem(hosts, timeout)` answers a health probe without a ZooKeeper round trip:
  None while the process's client is connected, else why not (the session state: SUSPENDED while
  the connection is down, LOST after an expiry until the new session is up). Only a process that
  has no client yet connects (bounded by `timeout`); it never waits for a reconnect.
- `ZooKeeperUnavailable` is the one error for "could not connect in time", with a message fit for
  an operator; `unavailable_reason(exc)` names any error that means "ZooKeeper is not reachable
  right now" (kazoo's connection loss, session expiry, closed connection, time-outs), so callers
  outside this package need not import kazoo to tell a transient outage from a bug.
- Its connection thread waits on its sockets with one `poll` per wait
  (`tables.zk.poll_handler`), not kazoo's five system calls: in a busy process each call is a
  wait for the interpreter lock, and every ZooKeeper call of the process goes through that thread.
- A chroot in the connect string ("h1:p1,h2:p2,h3:p3/pinot") is honoured by kazoo, which prefixes
  it to every path; ZooKeeper refuses paths under a chroot node that does not exist, so
  `new_client` creates a missing chroot (and its parents) once, through a short-lived client on
  the same members without the chroot. Creating it twice at once is harmless (ensure_path).
"""

from __future__ import annotations

import logging
import os
import threading

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry, RetryFailedError

from .poll_handler import PollThreadingHandler

log = logging.getLogger(__name__)

__all__ = [
    "RECONNECT_MAX_DELAY_S",
    "ZooKeeperUnavailable",
    "close_all",
    "connection_problem",
    "get_client",
    "new_client",
    "session_state",
    "unavailable_reason",
]

# Reconnect attempts back off from 0.1 s to this cap (kazoo's default cap is an hour: after a 20 s
# outage a process could wait another 25 s before it even tried again).
RECONNECT_MAX_DELAY_S = 2.0


class ZooKeeperUnavailable(Exception):
    """ZooKeeper could not be reached within the timeout."""


_TRANSIENT = (
    ZooKeeperUnavailable,
    ConnectionLoss,
    SessionExpiredError,
    ConnectionClosedError,
    OperationTimeoutError,
    KazooTimeoutError,
    RetryFailedError,
)


def unavailable_reason(exc: BaseException) -> str | None:
    """Why `exc` means "ZooKeeper is not reachable right now", or None for any other error."""
    if not isinstance(exc, _TRANSIENT):
        return None
    return str(exc) or f"ZooKeeper is not reachable ({type(exc).__name__})"


_lock = threading.Lock()
_clients: dict[str, KazooClient] = {}
_states: dict[str, str] = {}
_owner_pid = os.getpid()


def _retry() -> KazooRetry:
    return KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_jitter=0.4, max_delay=2.0)


def new_client(hosts: str, timeout: float = 5.0) -> KazooClient:
    """A started client that the caller owns (and must stop)."""
    client = KazooClient(
        hosts=hosts,
        timeout=max(timeout, 1.0),
        connection_retry=_retry(),
        command_retry=_retry(),
        handler=PollThreadingHandler(),
    )
    # start_async rather than start: start() warns when the chroot is missing; it is made below.
    client.start_async().wait(timeout=timeout)
    if not client.connected:
        client.stop()
        client.close()
        raise ZooKeeperUnavailable(
            f"ZooKeeper at {hosts} is unreachable (no session within {timeout:g} s)"
        )
    try:
        if client.chroot and client.exists("/") is None:
            _create_chroot(hosts, client.chroot, timeout)
    except BaseException:
        client.stop()
        client.close()
        raise
    return client


def _create_chroot(hosts: str, chroot: str, timeout: float) -> None:
    root = new_client(hosts.split("/", 1)[0], timeout)
    try:
        root.ensure_path(chroot)
        log.info("created the ZooKeeper chroot %s", chroot)
    finally:
        root.stop()
        root.close()


def get_client(hosts: str, timeout: float = 5.0) -> KazooClient:
    """The process-wide client for `hosts`, connecting on first use.

    Raises ZooKeeperUnavailable when the client is not connected within `timeout` (it keeps
    reconnecting in the background; a later call returns it once it is back).
    """
    global _owner_pid
    with _lock:
        if os.getpid() != _owner_pid:
            # Forked: the parent's clients (and their threads) are not ours to use or stop.
            _clients.clear()
            _states.clear()
            _owner_pid = os.getpid()
        client = _clients.get(hosts)
        if client is not None and client._stopped.is_set():  # stopped by its owner: make anew
            _forget(hosts)
            client = None
        if client is None:
            client = new_client(hosts, timeout)
            _states[hosts] = KazooState.CONNECTED
            client.add_listener(lambda state: _states.__setitem__(hosts, state))
            _clients[hosts] = client
            return client
    if client.connected:
        return client
    # Reconnecting (a stall or an expired session): wait for it, outside the lock.
    if client._live.wait(timeout):
        return client
    raise ZooKeeperUnavailable(
        f"ZooKeeper at {hosts} is unreachable (session {_states.get(hosts, 'unknown')}, "
        f"not reconnected within {timeout:g} s)"
    )


def session_state(hosts: str) -> str | None:
    """The last session state seen for `hosts` (CONNECTED, SUSPENDED, LOST) or None."""
    return _states.get(hosts)


def connection_problem(hosts: str, timeout: float = 5.0) -> str | None:
    """None when this process's client for `hosts` is connected, else the reason (no round trip)."""
    with _lock:
        forked = os.getpid() != _owner_pid
        client = None if forked else _clients.get(hosts)
    if client is None or client._stopped.is_set():
        try:
            get_client(hosts, timeout)
        except ZooKeeperUnavailable as exc:
            return str(exc)
        return None
    if client.connected:
        return None
    return f"ZooKeeper session {_states.get(hosts, client.state)} at {hosts}: not connected"


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
