"""One Redis connection pool per process and URL, created lazily (after any fork)."""

from __future__ import annotations

import os
import threading

import redis

__all__ = ["get_redis"]

_lock = threading.Lock()
_clients: dict[tuple[int, str, float], redis.Redis] = {}


def get_redis(url: str, timeout: float = 5.0) -> redis.Redis:
    """A client for `url` whose calls fail after `timeout` seconds instead of hanging."""
    key = (os.getpid(), url, timeout)
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = redis.Redis.from_url(
                url, socket_timeout=timeout, socket_connect_timeout=timeout, decode_responses=False
            )
            _clients[key] = client
        return client
