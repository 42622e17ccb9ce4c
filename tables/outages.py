"""Is this error a store outage (ZooKeeper or Redis not reachable right now)?

One question every retry loop and the web's error handling ask: an outage is waited out (capped
back-off, a 503 with the reason), anything else is a bug or a permanent condition. Callers need not
know which client library raised it.
"""

from __future__ import annotations

import redis
from kombu.exceptions import OperationalError

from tables.cluster.errors import Unavailable
from tables.streams.base import StreamUnavailable
from tables.zk.client import unavailable_reason

__all__ = ["outage_reason"]


def outage_reason(exc: BaseException) -> str | None:
    """ "ZooKeeper: ..." / "Redis: ..." when `exc` means a store is unreachable, else None."""
    zk = unavailable_reason(exc)
    if zk is not None:
        return f"ZooKeeper: {zk}"
    if isinstance(exc, Unavailable):
        return exc.message
    if isinstance(exc, StreamUnavailable):
        return str(exc)
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return f"Redis is not reachable: {exc or type(exc).__name__}"
    if isinstance(exc, OperationalError):  # Celery's broker (Redis) refused a task
        return f"the task queue (Redis) is not reachable: {exc}"
    return None
