"""kazoo's threading handler with a one-syscall `select` and buffered receives.

kazoo's connection thread waits on its sockets through `handler.select` before every request it
sends and every reply it reads (several times per ZooKeeper operation). The stock
`SequentialThreadingHandler.select` builds a fresh `selectors.DefaultSelector` for each call:
epoll_create, one epoll_ctl per descriptor, epoll_wait and close, five system calls where one
`poll` does. Each system call releases the interpreter lock and takes it back, and in a busy
process (the controller under a 64-partition pause: some 20 request threads waiting on ZooKeeper
at once) every take-back queues behind the other threads, so the connection thread, which every
ZooKeeper call goes through, spends its time waiting for the lock rather than for ZooKeeper.

Its sockets are `BufferedSocket`s: kazoo reads each reply with four system calls (a wait and a
receive for the 4-byte length, a wait and a receive for the body), and under a burst of replies
every one of them queued for the lock again; one receive now takes every reply the kernel holds,
and the reads and waits after it are answered from that buffer with no system call
(`bench/zk_client.py`, 16 callers and 2 spinning threads: 26 updates/s against 16 unbuffered).

Contract: `PollThreadingHandler` is `SequentialThreadingHandler` with `select` answered by one
`select.poll` call, with kazoo's exact semantics (`kazoo.handlers.utils.selector_select`): the
objects given come back in the read list when their descriptor is readable or hung up (read
wins over write when both hold), in the write list when only writable; the third list is always
empty; a negative or non-numeric timeout, or a closed descriptor, raise as kazoo does
(ValueError / TypeError). A `BufferedSocket` with received bytes not read yet (`pending()`) is
readable at once: `select` answers with those sockets alone, without a system call, every other
time; the times between it polls the other descriptors without waiting (timeout 0) and answers
the buffered sockets readable as well, so that a stream of replies does not hold back kazoo's
requests (its loop sends one whenever its request pipe is in the answer). kazoo reads a socket that
has `pending()` bytes without waiting on it first (its path for TLS sockets, whose own buffered
bytes `pending()` includes). `bench/zk_client.py` measures both handlers under the same load.
"""

from __future__ import annotations

import math
import select
from collections import defaultdict
from typing import Any

from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import fileobj_to_fd

__all__ = ["BufferedSocket", "PollThreadingHandler", "poll_select"]

_READ = select.POLLIN
_WRITE = select.POLLOUT
READ_CHUNK = 256 * 1024  # the most one receive takes from the kernel


class BufferedSocket:
    """A connected socket whose receives are buffered: one `recv` takes what the kernel holds
    (up to `READ_CHUNK`), and the reads after it are answered from that without a system call.
    `pending()` says how many bytes are buffered (an `ssl.SSLSocket`'s own are counted too):
    kazoo reads without waiting on the socket first when it is positive, and `poll_select`
    answers "readable" for it, every other time without polling (`skip_poll`). Everything else
    is the wrapped socket's."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._buffer = b""
        self._offset = 0
        self._skipped = False  # the last select with bytes buffered asked the kernel nothing

    def skip_poll(self) -> bool:
        """Whether this select may answer from the buffer alone: every other one, so that the
        other descriptors (kazoo's requests to send) are looked at while replies keep coming."""
        self._skipped = not self._skipped
        return self._skipped

    def fileno(self) -> int:
        return self._sock.fileno()

    def pending(self) -> int:
        own = getattr(self._sock, "pending", None)
        return len(self._buffer) - self._offset + (own() if own is not None else 0)

    def recv(self, size: int) -> bytes:
        if self._offset < len(self._buffer):
            chunk = self._buffer[self._offset : self._offset + size]
            self._offset += len(chunk)
            if self._offset >= len(self._buffer):
                self._buffer, self._offset = b"", 0
            return chunk
        data = self._sock.recv(max(size, READ_CHUNK))
        if len(data) > size:
            self._buffer, self._offset = data, size
            return data[:size]
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def poll_select(
    rlist: list[Any], wlist: list[Any], xlist: list[Any], timeout: float | None = None
) -> tuple[list[Any], list[Any], list[Any]]:
    """kazoo's `selector_select(rlist, wlist, xlist, timeout)` in at most one `poll` system call
    (none when a `BufferedSocket` may answer from its buffer: module docstring)."""
    if timeout is not None:
        if not isinstance(timeout, (int, float)):
            raise TypeError("timeout must be a number")
        if timeout < 0:
            raise ValueError("timeout must be non-negative")
    buffered = [obj for obj in rlist if isinstance(obj, BufferedSocket) and obj.pending() > 0]
    if buffered:  # readable already: the kernel is asked every other time, without waiting
        if all(obj.skip_poll() for obj in buffered):
            return buffered, [], []
        timeout = 0
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
    for obj in buffered:
        if not any(obj is seen for seen in readable):
            readable.append(obj)
            writable = [seen for seen in writable if seen is not obj]  # read wins
    return readable, writable, []


class PollThreadingHandler(SequentialThreadingHandler):
    """kazoo's threading handler, waiting on its sockets with one `poll` (module docstring)."""

    name = "poll_threading_handler"

    def __init__(self, *args: Any, buffered: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.buffered = buffered  # False: plain sockets (bench/zk_client.py's comparison)

    def select(self, *args: Any, **kwargs: Any) -> tuple[list[Any], list[Any], list[Any]]:
        return poll_select(*args, **kwargs)

    def create_connection(self, *args: Any, **kwargs: Any) -> Any:
        sock = super().create_connection(*args, **kwargs)
        return BufferedSocket(sock) if self.buffered else sock
