"""What a service needs from its process: the ZooKeeper client, the cluster paths, the clock and
the settings it reads. Built once per call from Django settings; tests build their own."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from kazoo.client import KazooClient

from tables.zk.client import ZooKeeperUnavailable, get_client
from tables.zk.paths import ClusterPaths

from .errors import Unavailable

__all__ = ["ClusterContext", "current"]


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class ClusterContext:
    client: KazooClient
    paths: ClusterPaths
    redis_url: str
    now_ms: Callable[[], int] = field(default=_now_ms)


def current() -> ClusterContext:
    """The context of this process, from settings (ZK_HOSTS, CLUSTER_NAME, REDIS_URL)."""
    try:
        client = get_client(settings.ZK_HOSTS, timeout=settings.ZK_TIMEOUT_SECONDS)
    except ZooKeeperUnavailable as exc:
        raise Unavailable(str(exc)) from None
    return ClusterContext(client, ClusterPaths(settings.CLUSTER_NAME), settings.REDIS_URL)
