"""Segments built on a Spark standalone cluster (`SPARK_MASTER=spark://...`), end to end.

`scripts/spark_standalone.sh` starts a real master and worker from the venv's pyspark distribution
(loopback, free ports, one worker with 1 core and 512 MB, state and logs under
var/test[/slot-N]/spark-standalone). The stack around it: a private Redis (the Celery broker and
the table's stream, so that only this stack's Spark worker takes its builds), a controller and one
server in the session Celery workers' ZooKeeper chroot, and a Celery spark worker whose
SPARK_MASTER is the standalone master: its SparkSession is the one application on the cluster
(`spark.executor.memory` 512m from a spark-defaults.conf in its SPARK_CONF_DIR), and its executors
get the project's code from the driver (tables.zip). Everything is stopped afterwards, also when
the test fails.

One segment is committed through the completion protocol (the server stages its rows, the build
runs on the cluster, commit end), then re-ingested on the cluster from the stream; both CRCs must
equal the CRC of the same rows built in local mode by the session's own Spark worker (`local[1]`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery
from celery.result import AsyncResult

from tables.builds import deep_store
from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.segment_metadata import SegmentStatus
from tables.models import Job
from tables.redisconn import get_redis
from tables.segments.staging import write_staging
from tables.streams.redis_streams import RedisStreamProvider, RedisTopicAdmin
from tables.zk.client import close_all
from tests import envdefaults
from tests.cluster_fixtures import PATHS, github_rows, load
from tests.ingest_cluster import IngestCluster, free_port, table_config
from tests.poll import wait_until

pytestmark = [
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.celery,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]
SCRIPTS = envdefaults.ROOT / "scripts"
SEGMENT_ROWS = 200
TIMEOUT = 300  # a cold cluster: three JVMs and an executor on a busy 2-core machine


class StandaloneStack(IngestCluster):
    """The standalone cluster, a private Redis, and the processes that use them."""

    def __init__(self, zk_hosts: str, state: Path, scratch: Path) -> None:
        super().__init__(zk_hosts, scratch / "servers", "standalone")
        self.state = state
        self.scratch = scratch
        self.redis_port = free_port()
        self.redis_url = f"redis://127.0.0.1:{self.redis_port}/0"
        self.master_url = f"spark://127.0.0.1:{free_port()}"
        self.cluster_start: subprocess.Popen | None = None
        self.probe: AsyncResult | None = None
        self._celery: Celery | None = None

    def _script_env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "VAR_DIR": str(self.scratch),
            "REDIS_PORT": str(self.redis_port),
            "SPARK_STANDALONE_DIR": str(self.state),
            "SPARK_MASTER_PORT": self.master_url.rsplit(":", 1)[1],
            "SPARK_MASTER_WEBUI_PORT": "0",
            "SPARK_WORKER_WEBUI_PORT": "0",
            "SPARK_WORKER_CORES": "1",
            "SPARK_WORKER_MEMORY": "512m",
        }
        env.pop("STARTED_FILE", None)  # not make test's: stopped by stop() below
        return env

    def _env(self) -> dict[str, str]:
        return {
            **super()._env(),
            "REDIS_URL": self.redis_url,
            "SPARK_MASTER": self.master_url,
            "SPARK_CONF_DIR": str(self.scratch / "spark-conf"),
        }

    def start(self) -> None:
        """Everything at once (the JVMs take long to start); returns when the cluster is up."""
        shutil.rmtree(self.state, ignore_errors=True)
        self.state.mkdir(parents=True)
        services = [str(SCRIPTS / "services.sh"), "start", "redis"]
        subprocess.run(services, env=self._script_env(), check=True, capture_output=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_start = subprocess.Popen(
            [str(SCRIPTS / "spark_standalone.sh"), "start"],
            env=self._script_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        (self.scratch / "spark-conf").mkdir()
        (self.scratch / "spark-conf" / "spark-defaults.conf").write_text(
            "spark.executor.memory 512m\n"
        )
        self.start_spark_worker()
        # Its SparkSession starts (and waits for an executor) while the rest comes up.
        self.probe = self.celery().send_task("tables.spark_probe", queue="spark")
        self.start_controller()
        self.start_server(0)
        out, _ = self.cluster_start.communicate(timeout=TIMEOUT)
        assert self.cluster_start.returncode == 0, out.decode(errors="replace")

    def spark_worker_pids(self) -> set[int]:
        """The spark Celery worker and its pool processes."""
        main = self.procs["spark"].pid
        tasks = Path(f"/proc/{main}/task")
        return {main} | {
            int(pid) for task in tasks.iterdir() for pid in (task / "children").read_text().split()
        }

    def celery(self) -> Celery:
        """A Celery client of this stack's broker (the session's app talks to the shared one)."""
        if self._celery is None:
            self._celery = Celery(  # not current: the project's tasks keep the session's app
                "standalone", broker=self.redis_url, backend=self.redis_url, set_as_current=False
            )
            self._celery.conf.update(
                task_serializer="json", result_serializer="json", accept_content=["json"]
            )
        return self._celery

    def stop(self) -> dict[str, int]:
        self.stop_worker("spark")
        codes = super().stop()
        if self.cluster_start is not None and self.cluster_start.poll() is None:
            self.cluster_start.kill()  # the script's own wait; the daemons are stopped below
            self.cluster_start.wait()
        if self._celery is not None:
            self._celery.close()
        scripts = {"env": self._script_env(), "capture_output": True, "timeout": 120}
        subprocess.run([str(SCRIPTS / "spark_standalone.sh"), "stop"], **scripts)
        subprocess.run([str(SCRIPTS / "services.sh"), "stop", "redis"], **scripts)
        return codes


@pytest.fixture
def stack(worker_zk, celery_workers, tmp_path) -> Iterator[StandaloneStack]:
    found = StandaloneStack(
        celery_workers.zk_hosts, envdefaults.VAR_DIR / "spark-standalone", tmp_path
    )
    try:
        found.start()
        wanted = {found.controller_id, found.server_id(0)}

        def live() -> bool:
            path = PATHS.liveinstances
            return worker_zk.exists(path) is not None and wanted <= set(
                worker_zk.get_children(path)
            )

        wait_until(live, timeout=90, what="controller and server live")
        yield found
    finally:
        found.stop()
        close_all()


def _create_table(stack: StandaloneStack) -> tuple[str, str, RedisTopicAdmin]:
    name = f"sa{uuid.uuid4().hex[:6]}"
    topic = f"topic-{uuid.uuid4().hex[:10]}"
    admin = RedisTopicAdmin(get_redis(stack.redis_url))
    admin.create_topic(topic, 1)
    rest = table_config(
        topic,
        **{
            "stream.redis.url": stack.redis_url,
            "realtime.segment.flush.threshold.segment.rows": str(SEGMENT_ROWS),
            "realtime.segment.flush.threshold.time": "1h",
        },
    )
    rest["tableName"] = name
    rest["segmentsConfig"]["schemaName"] = name
    rest["segmentsConfig"]["replication"] = "1"
    manager = ResourceManager(context.current())
    manager.add_schema({**load("githubEvents_schema.json"), "schemaName": name})
    manager.add_table(rest)
    return name, topic, admin


def _local_build(name: str, segment: str, rows: list[tuple[int, bytes]], scratch: Path):
    """`rows` built by the session's Spark worker (local mode) as a committer builds: the task
    and what to delete once it is done."""
    from tables.tasks import spark_build_segment  # imports pyspark

    start, end = rows[0][0], rows[-1][0] + 1
    local = scratch / "control.parquet"
    write_staging(rows, local)
    store = deep_store()
    staging = store.staging_key(name, f"{segment}.control")
    output = f"{name}/{segment}.tmp.control"
    store.publish(local, staging)
    task = spark_build_segment.delay(f"{name}_REALTIME", segment, staging, start, end, output)
    return task, (staging, output)


def _sha256(key: str) -> str:
    with deep_store().open_read(key) as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def _ran_on_the_cluster(stack: StandaloneStack, kind: str, segment: str) -> bool:
    # A build's segment is handed over (and may be committed) before its Job row is recorded.
    job = wait_until(
        lambda: Job.objects.filter(kind=kind, segment=segment, status=Job.Status.SUCCEEDED).first(),
        timeout=60,
        what=f"the {kind} of {segment} recorded",
    )
    return int(job.worker.rsplit(":", 1)[1]) in stack.spark_worker_pids()


def test_a_commit_and_a_reingestion_on_a_standalone_cluster(stack, tmp_path):
    name, topic, admin = _create_table(stack)
    table = f"{name}_REALTIME"
    manager = ResourceManager(context.current())
    (segment,) = manager.idealstate(table)
    admin.produce(topic, 0, github_rows()[:SEGMENT_ROWS], now_ms=0)

    # Committed through the protocol: the server's staged rows, built on the cluster.
    def done():
        meta = manager.segment_metadata(table, segment)
        return meta if meta.status is SegmentStatus.DONE else None

    meta = wait_until(done, timeout=TIMEOUT, interval=0.5, what=f"{segment} committed")
    assert stack.probe.get(TIMEOUT)["master"] == stack.master_url
    assert _ran_on_the_cluster(stack, Job.Kind.BUILD, segment)
    assert meta.total_docs == SEGMENT_ROWS
    start, end = int(meta.start_offset), int(meta.end_offset)
    stream = RedisStreamProvider(get_redis(stack.redis_url), topic)
    rows = [(m.offset, m.value) for m in stream.fetch(0, start, end - start, 0).messages]
    assert [offset for offset, _ in rows] == list(range(start, end))

    # The same rows built in local mode, while the cluster re-ingests them from the stream.
    final = deep_store().segment_key(name, segment)
    committed = _sha256(final)
    local, scratch = _local_build(name, segment, rows, tmp_path)
    reingest = stack.celery().send_task(
        "tables.spark_reingest_segment", args=[table, segment, start, end], queue="spark"
    )
    try:
        local_outcome = local.get(TIMEOUT)
    finally:
        for key in scratch:
            deep_store().delete(key)
    outcome = reingest.get(TIMEOUT)
    assert local_outcome["rows"] == SEGMENT_ROWS
    assert meta.crc == local_outcome["crc"]
    assert (outcome["rows"], outcome["crc"]) == (SEGMENT_ROWS, local_outcome["crc"])
    assert _sha256(final) == committed  # byte for byte
    assert _ran_on_the_cluster(stack, Job.Kind.REINGEST, segment)

    # One application ran on the standalone worker, its executor with the shipped code.
    apps = sorted((stack.state / "work").glob("app-*"))
    assert len(apps) == 1, apps
    assert list(apps[0].glob("*/tables.zip")), sorted(apps[0].rglob("*"))
