"""System checks: a missing or unreachable ZooKeeper or Redis is explained in one line.

They run with `manage.py check` and with every command that runs system checks (migrate, the
long-running commands). `--skip-checks` skips them where the services are not needed.
"""

from __future__ import annotations

from django.conf import settings
from django.core.checks import CheckMessage, Error, register

from tables.redisconn import get_redis
from tables.zk.client import ZooKeeperUnavailable, new_client

START_HINT = "Start the local services with `scripts/services.sh start`, or point {var} elsewhere."


@register("services")
def zookeeper_reachable(**_: object) -> list[CheckMessage]:
    try:
        client = new_client(settings.ZK_HOSTS, timeout=min(settings.ZK_TIMEOUT_SECONDS, 3.0))
    except ZooKeeperUnavailable as exc:
        return [Error(str(exc), hint=START_HINT.format(var="ZK_HOSTS"), id="console.E001")]
    except ValueError as exc:  # kazoo rejects a malformed connect string
        return [Error(f"ZK_HOSTS={settings.ZK_HOSTS!r} is malformed: {exc}", id="console.E003")]
    client.stop()
    client.close()
    return []


@register("services")
def redis_reachable(**_: object) -> list[CheckMessage]:
    try:
        get_redis(settings.REDIS_URL, timeout=3.0).ping()
    except Exception as exc:
        message = f"Redis at {settings.REDIS_URL} is unreachable ({type(exc).__name__}: {exc})"
        return [Error(message, hint=START_HINT.format(var="REDIS_URL"), id="console.E002")]
    return []
