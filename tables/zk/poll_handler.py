"""kazoo's threading handler with a one-syscall `select`.

kazoo's connection thread waits on its sockets through `handler.select` before every request it
sends and every reply it reads (several times per ZooKeeper operation). The stock
`SequentialThreadingHandler.select` builds a fresh `selectors.DefaultSelector` for each call:
epoll_create, one epoll_ctl per descriptor, epoll_wait and close, five system calls where one
`poll` does. Each system call releases the interpreter lock and takes it back, and in a busy
process (the controller under a 64-partition pause: some 20 request threads waiting on ZooKeeper
at once) every take-back queues behind the other threads, so the connection thread, which every
ZooKeeper call goes through, spends its time waiting for the lock rather than for ZooKeeper.

Contract: `PollThreadingHandler` is `SequentialThreadingHandler` with `select` answered by one
`select.poll` call, with kazoo's exact semantics (`kazoo.handlers.utils.selector_select`): the
objects given come back in the read list when their descriptor is readable or hung up (read
wins over write when both hold), in the write list when only writable; the third list is always
empty; a negative or non-numeric timeout, or a closed descriptor, raise as kazoo does
(ValueError / TypeError). `bench/zk_client.py` measures both handlers under the same load.
"""

from __future__ import annotations

import math
import select
from collections import defaultdict
from typing import Any

from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import fileobj_to_fd

__all__ = ["PollThreadingHandler", "poll_select"]

_READ = select.POLLIN
_WRITE = select.POLLOUT


def poll_select(
    rlist: list[Any], wlist: list[Any], xlist: list[Any], timeout: float | None = None
) -> tuple[list[Any], list[Any], list[Any]]:
    """kazoo's `selector_select(rlist, wlist, xlist, timeout)` in one `poll` system call."""
    if timeout is not None:
        if not isinstance(timeout, (int, float)):
            raise TypeError("timeout must be a number")
        if timeout < 0:
            raise ValueError("timeout must be non-negative")
    masks: dict[int, int] = defaultdict(int)
    objects: dict[int, list[Any]] = defaultdict(list)
    for mask, fileobjs in ((_READ, rlist), (_WRITE, wlist)):
        for fileobj in fileobjs:
            fd = fileobj_to_fd(fileobj)
            masks[fd] |= mask
            objects[fd].append(fileobj)
    poller = select.poll()
    for fd, mask in masks.items():
        poller.register(fd, mask)
    timeout_ms = None if timeout is None else math.ceil(timeout * 1000)
    readable: list[Any] = []
    writable: list[Any] = []
    for fd, event in poller.poll(timeout_ms):
        if event & select.POLLNVAL:
            raise ValueError("Invalid event mask or fd")
        if event & ~_WRITE:  # readable, hung up or in error: as selectors reads it
            readable.extend(objects[fd])
        elif event & ~_READ:
            writable.extend(objects[fd])
    return readable, writable, []


class PollThreadingHandler(SequentialThreadingHandler):
    """kazoo's threading handler, waiting on its sockets with one `poll` (module docstring)."""

    name = "poll_threading_handler"

    def select(self, *args: Any, **kwargs: Any) -> tuple[list[Any], list[Any], list[Any]]:
        return poll_select(*args, **kwargs)
