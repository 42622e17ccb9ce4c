"""The `ingest` fixture: a controller and three servers as real processes, in the Celery workers'
ZooKeeper chroot (so the Spark worker builds for them), stopped with SIGTERM afterwards."""

from __future__ import annotations

import glob
from collections.abc import Iterator

import pytest

from tests.cluster_fixtures import PATHS
from tests.ingest_cluster import IngestCluster
from tests.poll import wait_until


def live(zk) -> set[str]:
    return set(zk.get_children(PATHS.liveinstances)) if zk.exists(PATHS.liveinstances) else set()


@pytest.fixture
def ingest(worker_zk, celery_workers, tmp_path, request) -> Iterator[IngestCluster]:
    # Logs: var/test/logs/<test name>-<process>.log, fresh for each run of the test.
    cluster = IngestCluster(celery_workers.zk_hosts, tmp_path / "servers", request.node.name)
    for old in cluster.log_dir.glob(f"{glob.escape(request.node.name)}-*.log"):
        old.unlink()
    cluster.start_controller()
    for index in range(3):
        cluster.start_server(index)
    wanted = {cluster.controller_id, *(cluster.server_id(i) for i in range(3))}
    wait_until(lambda: wanted <= live(worker_zk), timeout=90, what="controller and 3 servers live")
    try:
        yield cluster
    finally:
        cluster.stop()
