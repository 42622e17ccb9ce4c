"""Versioned reads and compare-and-set writes of znodes.

Every write of shared cluster state goes through `update`: read the znode with its version, compute
the new value, write it only if the version is unchanged (`set(..., version=v)`), and on
`BadVersionError` read again and recompute. A concurrent writer can therefore never lose another's
update. `mutate` must be a pure function of the bytes it is given, since it may run several times.

Under contention the losers back off for a random, growing delay (full jitter, capped), so that no
writer starves: without it, writers sharing one connection collide in lock step round after round.
Connection loss is retried by kazoo's own retry in the caller's client; this layer retries only on
version conflicts (one retry layer per kind of failure).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.exceptions import BadVersionError, NoNodeError

from tables.zk.interface import ZkStore

__all__ = ["ConflictLimitExceeded", "Versioned", "read", "update"]

BACKOFF_BASE_SECONDS = 0.002
BACKOFF_CAP_SECONDS = 0.1


class ConflictLimitExceeded(Exception):
    """`update` met a version conflict on every one of its attempts."""


@dataclass(frozen=True)
class Versioned:
    data: bytes
    version: int
    mtime_ms: int


def read(client: ZkStore, path: str) -> Versioned | None:
    """The znode's bytes and version, or None when it does not exist."""
    try:
        data, stat = client.get(path)
    except NoNodeError:
        return None
    return Versioned(data=data, version=stat.version, mtime_ms=stat.mtime)


def backoff_delay(attempt: int, rng: Callable[[], float] = random.random) -> float:
    """Full-jitter exponential backoff after the `attempt`-th conflict (1-based)."""
    return rng() * min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** min(attempt, 16))


def _write_known(
    client: ZkStore, path: str, mutate: Callable[[bytes], bytes | None], known: Versioned
) -> Versioned | None:
    """What `mutate` makes of `known`, written compare-and-set on its version; None when it
    refuses or changes nothing (decided again on what a read finds) or the znode changed since."""
    try:
        new = mutate(known.data)
    except Exception:
        return None
    if new is None:
        return None
    try:
        stat = client.set(path, new, version=known.version)
    except BadVersionError:
        return None
    return Versioned(data=new, version=stat.version, mtime_ms=stat.mtime)


def update(
    client: ZkStore,
    path: str,
    mutate: Callable[[bytes], bytes | None],
    max_attempts: int = 200,
    sleep: Callable[[float], None] = time.sleep,
    known: Versioned | None = None,
) -> Versioned:
    """Apply `mutate` to the znode's current bytes with compare-and-set, retrying on conflict.

    `mutate` returns the new bytes, or None to leave the znode as it is. Returns the state after the
    write (or the unchanged state). Raises NoNodeError if the znode does not exist, and
    ConflictLimitExceeded after `max_attempts` conflicts in a row. `known`: the znode as the
    caller read it earlier: the first attempt applies `mutate` to it and writes without reading
    (a read waits behind the session's pending writes); when it changed since, the write's
    version conflict sends the next attempt to read it, without a back-off. Only what is read
    decides a refusal (`mutate` raising) or "nothing to write": either, on `known`, reads first.
    """
    if known is not None:
        written = _write_known(client, path, mutate, known)
        if written is not None:
            return written
    for attempt in range(1, max_attempts + 1):
        data, stat = client.get(path)
        new = mutate(data)
        if new is None:
            return Versioned(data=data, version=stat.version, mtime_ms=stat.mtime)
        try:
            new_stat = client.set(path, new, version=stat.version)
        except BadVersionError:
            sleep(backoff_delay(attempt))
            continue
        return Versioned(data=new, version=new_stat.version, mtime_ms=new_stat.mtime)
    raise ConflictLimitExceeded(f"{path}: version conflict on each of {max_attempts} attempts")
