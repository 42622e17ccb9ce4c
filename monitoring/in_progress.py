"""Requests in progress, counted across every process of the cluster: the figure behind Pinot's
global controller gauge `reingestedSegmentUploadsInProgress` (round 2 §C.3), the
`POST /segments/reingested` requests being processed right now.

Why Redis, with a lease per request. Those requests run in whichever controller process (or web
process) a server called, while `/metrics` is scraped from any of them: a process-local gauge
would show each process its own requests only. `/metrics` gets every other live figure from
stores that all processes share: the database mirror (which the mirror sync fills from ZooKeeper
and from the servers' live state in Redis, itself kept with a TTL) and the `DurableCounter` rows.
A counter row (+1 at the start, -1 at the end) would stay raised for ever by a process killed
mid-request; a lease does not. So each request in progress is one member of a Redis sorted set
per cluster, `pinot:inprogress:<cluster>:<what>`, scored with the time until which it counts:
- `in_progress` adds the member with a lease of `LEASE_S` (30 s), renews it every third of that
  from a daemon thread while the request runs (however long it takes), and removes it at the end,
  whatever the outcome. A process that dies mid-request stops renewing: its request stops
  counting within `LEASE_S`.
- `count_in_progress` counts the members whose lease has not run out: one round trip.
- Times are the Redis server's (`TIME`, inside the scripts), never a process's clock, so
  controllers on machines whose clocks differ agree. Each write also drops the lapsed members and
  sets the set's own expiry to the longest lease, so nothing outlives the last request.
- Redis unavailable: the request goes on untracked (logged once per request) and must never fail
  for its gauge; `count_in_progress` raises `redis.RedisError`, and the scrape then shows the
  family without a sample (unknown, not 0).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import redis

__all__ = [
    "KEY_PREFIX",
    "LEASE_S",
    "REINGESTED_UPLOADS",
    "count_in_progress",
    "in_progress",
    "key_for",
]

log = logging.getLogger(__name__)

KEY_PREFIX = "pinot:inprogress"
REINGESTED_UPLOADS = "reingestedSegmentUploads"
LEASE_S = 30.0

# The Redis server's time in milliseconds (Redis 5+ replicates a script's effects, so TIME is
# allowed before writes).
_NOW_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""
# KEYS: the set. ARGV: the member, its lease in ms. Adds (or renews) the member.
_MARK_LUA = (
    _NOW_LUA
    + """
local lease = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
redis.call('PEXPIRE', KEYS[1], lease)
return now
"""
)
# KEYS: the set. The members whose lease has not run out.
_COUNT_LUA = _NOW_LUA + "return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')\n"


def key_for(cluster: str, what: str = REINGESTED_UPLOADS) -> str:
    return f"{KEY_PREFIX}:{cluster}:{what}"


def count_in_progress(client: redis.Redis, cluster: str, what: str = REINGESTED_UPLOADS) -> int:
    """How many requests of `what` are in progress now, in every process (redis.RedisError when
    Redis fails)."""
    return int(client.eval(_COUNT_LUA, 1, key_for(cluster, what)))


def _mark(client: redis.Redis, key: str, member: str, lease_s: float) -> None:
    client.eval(_MARK_LUA, 1, key, member, max(1, int(lease_s * 1000)))


def _renew(
    client: redis.Redis, key: str, member: str, lease_s: float, stop: threading.Event
) -> None:
    while not stop.wait(lease_s / 3):
        try:
            _mark(client, key, member, lease_s)
        except redis.RedisError as exc:  # tried again at the next renewal
            log.warning("%s: cannot renew the lease of %s: %s", key, member, exc)


@contextmanager
def in_progress(
    client: redis.Redis, cluster: str, what: str = REINGESTED_UPLOADS, lease_s: float = LEASE_S
) -> Iterator[bool]:
    """Count one request of `what` as in progress while the block runs (module docstring).
    Yields whether it is counted (False: Redis failed; the block runs all the same)."""
    key = key_for(cluster, what)
    member = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
    try:
        _mark(client, key, member, lease_s)
    except redis.RedisError as exc:
        log.warning("%s: not counted as in progress, Redis failed: %s", key, exc)
        yield False
        return
    stop = threading.Event()
    renewer = threading.Thread(
        target=_renew, args=(client, key, member, lease_s, stop), name="lease", daemon=True
    )
    renewer.start()
    try:
        yield True
    finally:
        stop.set()
        renewer.join()
        try:
            client.zrem(key, member)
        except redis.RedisError as exc:  # its lease runs out instead
            log.warning("%s: cannot remove %s (its lease runs out): %s", key, member, exc)
