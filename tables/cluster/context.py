"""What a service needs from its process: the ZooKeeper store, the cluster paths, the clock and
the settings it reads. Built once per call from Django settings; tests build their own.

Contract: `ClusterContext.client` is a store (`tables.zk.interface.ZkStore`) whose errors are the
project's (`tables.zk.errors`). A bare ZooKeeper client given in its place (tests build contexts
from the `zk` fixture) is wrapped in a `ZooKeeperStore` on construction, so services only ever see
the project's errors.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings

from tables.zk.client import ZooKeeperUnavailable, get_client
from tables.zk.interface import ZkStore
from tables.zk.paths import ClusterPaths
from tables.zk.zookeeper import as_store

from .errors import Unavailable

__all__ = ["ClusterContext", "current"]


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class ClusterContext:
    client: ZkStore
    paths: ClusterPaths
    redis_url: str
    now_ms: Callable[[], int] = field(default=_now_ms)

    def __post_init__(self) -> None:
        object.__setattr__(self, "client", as_store(self.client))


def current() -> ClusterContext:
    """The context of this process, from settings (ZK_HOSTS, CLUSTER_NAME, REDIS_URL)."""
    try:
        client = get_client(settings.ZK_HOSTS, timeout=settings.ZK_TIMEOUT_SECONDS)
    except ZooKeeperUnavailable as exc:
        raise Unavailable(str(exc)) from None
    return ClusterContext(client, ClusterPaths(settings.CLUSTER_NAME), settings.REDIS_URL)
