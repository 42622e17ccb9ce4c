"""Fixtures over the real services that scripts/test.sh started.

- `zk`: a kazoo client inside a fresh chroot of its own; settings.ZK_HOSTS points at that chroot.
- `redis_client` / `redis_prefix`: the test Redis, and a key prefix of the test's own (its keys are
  deleted afterwards).
- `spark`: one SparkSession (local[1], UI off, loopback) for the whole session.
- `celery_workers`: real worker processes (the default queue and the spark queue) and beat, as
  `make demo` runs them, for the whole session; `worker_zk` is the ZooKeeper chroot they use.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from django.conf import settings
from kazoo.client import KazooClient

from tables.redisconn import get_redis
from tables.zk.client import close_all, new_client
from tests import envdefaults
from tests.cluster_fixtures import cluster, servers, topic  # noqa: F401  (shared fixtures)
from tests.procs import CeleryProcesses

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
ZK_ROOT_HOSTS = f"127.0.0.1:{envdefaults.ZK_PORT}"


@pytest.fixture
def zk(settings) -> Iterator[KazooClient]:
    chroot = f"/test-{uuid.uuid4().hex[:12]}"
    root = new_client(ZK_ROOT_HOSTS)
    root.ensure_path(chroot)
    client = new_client(ZK_ROOT_HOSTS + chroot)
    settings.ZK_HOSTS = ZK_ROOT_HOSTS + chroot
    try:
        yield client
    finally:
        client.stop()
        client.close()
        close_all()
        root.delete(chroot, recursive=True)
        root.stop()
        root.close()


@pytest.fixture
def redis_client():
    return get_redis(settings.REDIS_URL)


@pytest.fixture
def redis_prefix(redis_client) -> Iterator[str]:
    prefix = f"test:{uuid.uuid4().hex[:12]}:"
    yield prefix
    keys = list(redis_client.scan_iter(match=prefix + "*", count=1000))
    if keys:
        redis_client.delete(*keys)


@pytest.fixture(scope="session")
def spark():
    from tables.segments.spark import get_session, stop_session

    session = get_session(master="local[1]", driver_memory="1g")
    yield session
    stop_session()


@pytest.fixture(scope="session")
def celery_workers() -> Iterator[CeleryProcesses]:
    procs = CeleryProcesses(envdefaults.VAR_DIR / "logs", ZK_ROOT_HOSTS)
    procs.start()
    try:
        yield procs
    finally:
        procs.stop()


@pytest.fixture
def worker_zk(celery_workers, settings) -> Iterator[KazooClient]:
    """Like `zk`, but in the Celery workers' chroot, so tasks see what the test wrote. Emptied
    after each test."""
    client = new_client(celery_workers.zk_hosts)
    settings.ZK_HOSTS = celery_workers.zk_hosts
    try:
        yield client
    finally:
        for child in client.get_children("/"):
            client.delete(f"/{child}", recursive=True)
        client.stop()
        client.close()
        close_all()


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    # Debian's Chromium; never Playwright's own download (there is no network for it here).
    return {
        **browser_type_launch_args,
        "executable_path": "/usr/bin/chromium",
        "args": CHROMIUM_ARGS,
    }
