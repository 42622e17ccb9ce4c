"""A real ingestion cluster for end-to-end tests: controllers and servers as processes.

They run in the Celery workers' ZooKeeper chroot (`worker_zk`), so the Spark worker that builds
committed segments sees the same cluster. Every process logs to var/test/logs/<name>.log; `kill`
sends any signal (SIGKILL for crash tests) and `start_*` again restarts with the same identity.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from django.conf import settings
from django.core.management import call_command

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentStatus
from tables.domain.table_config import switch_stream_type
from tables.redisconn import get_redis
from tables.streams.redis_streams import RedisStreamProvider
from tests import envdefaults
from tests.cluster_fixtures import load
from tests.ports import free_port

HOST = "127.0.0.1"


def table_config(topic: str, **stream: str) -> dict:
    """The githubEvents fixture config on a Redis topic, with stream config overrides."""
    rest = switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic)
    stream_map = rest["ingestionConfig"]["streamIngestionConfig"]["streamConfigMaps"][0]
    stream_map.pop("realtime.segment.flush.threshold.size", None)
    stream_map.update(stream)
    rest["segmentsConfig"]["replication"] = "2"
    return rest


class IngestCluster:
    def __init__(self, zk_hosts: str, data_dir: Path, log_prefix: str = "e2e") -> None:
        self.zk_hosts = zk_hosts
        self.data_dir = data_dir
        self.log_dir = envdefaults.VAR_DIR / "logs"
        self.log_prefix = log_prefix
        self.procs: dict[str, subprocess.Popen] = {}
        self.controller_ports: dict[int, int] = {0: free_port()}
        self.server_ports: dict[str, int] = {}

    @property
    def controller_port(self) -> int:
        return self.controller_ports[0]

    @property
    def controller_id(self) -> str:
        return self.controller_id_of(0)

    def controller_id_of(self, index: int) -> str:
        port = self.controller_ports.setdefault(index, free_port())
        return f"Controller_{HOST}_{port}"

    @staticmethod
    def controller_name(index: int) -> str:
        return "controller" if index == 0 else f"controller{index}"

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "ZK_HOSTS": self.zk_hosts,
            "DATABASE_URL": os.environ["DATABASE_TEST_URL"],
            "SERVER_DATA_DIR": str(self.data_dir),
        }

    def _spawn(
        self, name: str, args: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / f"{self.log_prefix}-{name}.log").open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "manage.py", *args],
                cwd=envdefaults.ROOT,
                env={**self._env(), **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.procs[name] = proc
        return proc

    def start_spark_worker(self) -> None:
        """A Celery spark worker of this stack's own (`spark`, log `<prefix>-spark.log`)."""
        self.start_worker("spark", "spark")

    def start_worker(self, name: str, queue: str) -> None:
        """A Celery worker of this stack's own on `queue` (process `name`, log
        `<prefix>-<name>.log`; queue "celery" runs the healing manager's runs), in a session of
        its own so that stopping its process group stops its pool (and Spark's JVM) too."""
        node = f"{name}@{self.log_prefix}-{os.getpid()}"
        args = ["worker", "-Q", queue, "-c", "1", "-n", node]
        args += ["--loglevel", "INFO", "--without-mingle", "--without-gossip"]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / f"{self.log_prefix}-{name}.log").open("ab") as log:
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "console", *args],
                cwd=envdefaults.ROOT,
                env=self._env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def stop_worker(self, name: str, timeout: float = 60) -> None:
        """Stop the Celery worker `name` (`start_worker`) with its process group: its pool and
        Spark's JVM; SIGKILL after `timeout` seconds."""
        worker = self.procs.pop(name, None)
        if worker is None or worker.poll() is not None:
            return
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()

    def start_controller(
        self, index: int = 0, env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        """Controller `index` (0 is `controller`, others `controller<index>`), same port and
        identity on a restart; `env` adds settings (e.g. LEAD_CONTROLLER_REBALANCE_DELAY_MS)."""
        port = self.controller_ports.setdefault(index, free_port())
        args = ["run_controller", "--port", str(port), "--interval", "0.5"]
        return self._spawn(self.controller_name(index), args, env)

    def server_id(self, index: int) -> str:
        port = self.server_ports.setdefault(f"server{index}", free_port())
        return f"Server_{HOST}_{port}"

    def start_server(self, index: int) -> subprocess.Popen:
        args = ["run_server", "--instance", self.server_id(index), "--hold-seconds", "0.5"]
        return self._spawn(f"server{index}", args)

    def kill(self, name: str, signum: int = signal.SIGKILL) -> int:
        proc = self.procs[name]
        if proc.poll() is None:
            proc.send_signal(signum)
        return proc.wait(timeout=60)

    def alive(self, name: str) -> bool:
        return self.procs[name].poll() is None

    def log(self, name: str) -> str:
        return (self.log_dir / f"{self.log_prefix}-{name}.log").read_text(errors="replace")

    def stop(self) -> dict[str, int]:
        """SIGTERM everything still running; returns each process's exit code."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[name] = proc.wait()
        return codes


def done_coverage(table: str) -> dict[int, tuple[int, int]]:
    """Per partition: (number of DONE segments, end offset of the last DONE one)."""
    manager = ResourceManager(context.current())
    out: dict[int, tuple[int, int]] = {}
    for segment in manager.segment_names(table):
        name = LLCSegmentName.parse(segment)
        meta = manager.segment_metadata(table, segment)
        if name is None or meta.status is not SegmentStatus.DONE:
            continue
        count, end = out.get(name.partition_group_id, (0, 0))
        out[name.partition_group_id] = (count + 1, max(end, int(meta.end_offset or 0)))
    return out


def produce(topic: str, count: int, rate: int) -> subprocess.Popen:
    """`manage.py produce` as its own process: `count` githubEvents rows at `rate` rows/s."""
    schema = envdefaults.PINOT_FIXTURES / "githubEvents_schema.json"
    args = ["produce", "--topic", topic, "--partitions", "4", "--rate", str(rate)]
    args += ["--schema", str(schema), "--count", str(count)]
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=envdefaults.ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def all_committed(topic: str, table: str) -> dict[int, tuple[int, int]] | None:
    """The DONE coverage once every produced row of the 4 partitions is committed, else None."""
    provider = RedisStreamProvider(get_redis(settings.REDIS_URL), topic)
    latest = {p: provider.latest_offset(p) for p in range(4)}
    coverage = done_coverage(table)
    if all(coverage.get(p, (0, 0))[1] == latest[p] for p in range(4)):
        return coverage
    return None


def verify_rows(table: str) -> str:
    """`verify_ledger <table> --rows`; returns its report (raises CommandError when broken)."""
    out = io.StringIO()
    call_command("verify_ledger", table, "--rows", stdout=out)
    return out.getvalue()


def admin_get(port: int, path: str) -> object:
    with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=10) as reply:
        body = reply.read().decode()
    return body if path == "/metrics" else json.loads(body)


def replicas_by_server(cluster: IngestCluster, table: str, count: int = 3) -> dict[int, list]:
    """Each live server's /debug/tables/<table> items (servers not answering are left out)."""
    out = {}
    for index in range(count):
        port = cluster.server_ports.get(f"server{index}")
        if port is None or not cluster.alive(f"server{index}"):
            continue
        try:
            out[index] = admin_get(port, f"/debug/tables/{table}")
        except OSError:
            continue
    return out


def find_phase(cluster: IngestCluster, table: str, phase: str) -> tuple[int, dict] | None:
    """(server index, debug item) of a replica whose consumer is in `phase`, if any."""
    for index, items in replicas_by_server(cluster, table).items():
        for item in items:
            if item.get("phase") == phase:
                return index, item
    return None
