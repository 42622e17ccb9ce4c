"""An ingestion stack on ZooKeeper and Redis of its own, for outage tests that stop or kill them.

The shared test services must never be frozen under other tests, so `OutageStack` starts a private
ZooKeeper and Redis with `scripts/services.sh` (free ports, state under a temporary folder, Redis
with its append-only file as `make demo` runs it), then a Spark Celery worker on that Redis, a
default-queue worker (the healing manager's runs: a commit an outage left half-done is
repaired by the run the controller asks for when it leads again, HEALING_TRIGGER_ON_LEADERSHIP
on as in production), a
controller and three servers, all as real processes (logs: var/test/logs/outage-*.log).
`freeze`/`thaw` SIGSTOP and SIGCONT a store, `kill_redis` SIGKILLs Redis and starts it again on
the same folder.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

from tests import envdefaults
from tests.ingest_cluster import IngestCluster, free_port
from tests.poll import wait_until

__all__ = ["OutageStack"]

SERVICES = envdefaults.ROOT / "scripts" / "services.sh"
PIDFILES = {"zookeeper": "zookeeper/zk.pid", "redis": "redis/redis.pid"}


class OutageStack(IngestCluster):
    def __init__(self, var_dir: Path) -> None:
        super().__init__("", var_dir / "servers", "outage")
        self.var_dir = var_dir
        self.zk_port, self.redis_port = free_port(), free_port()
        self.zk_hosts = f"127.0.0.1:{self.zk_port}"
        self.redis_url = f"redis://127.0.0.1:{self.redis_port}/0"

    # --- the private stores -----------------------------------------------------------------
    def _services(self, *args: str) -> None:
        env = {
            **os.environ,
            "VAR_DIR": str(self.var_dir),
            "ZK_PORT": str(self.zk_port),
            "REDIS_PORT": str(self.redis_port),
        }
        env.pop("STARTED_FILE", None)  # not make test's: these are stopped by stop() below
        subprocess.run([str(SERVICES), *args], env=env, check=True, capture_output=True)

    def pid(self, service: str) -> int:
        return int((self.var_dir / PIDFILES[service]).read_text().strip())

    def freeze(self, service: str) -> None:
        os.kill(self.pid(service), signal.SIGSTOP)

    def thaw(self, service: str) -> None:
        os.kill(self.pid(service), signal.SIGCONT)

    def kill_redis(self) -> None:
        """SIGKILL Redis (no shutdown, no final fsync) and start it again on the same folder."""
        pid = self.pid("redis")
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not Path(f"/proc/{pid}").exists(), timeout=10, what="redis gone")
        self._services("start", "redis")

    # --- processes ----------------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        # A controller that leads again (after a session expiry, or a ZooKeeper leader's death)
        # asks for its tables' healing runs, as in production (the test sessions turn it off).
        return {
            **super()._env(),
            "ZK_HOSTS": self.zk_hosts,
            "REDIS_URL": self.redis_url,
            "HEALING_TRIGGER_ON_LEADERSHIP": "true",
        }

    def start_producer(
        self, topic: str, count: int, rate: int, partitions: int = 4
    ) -> subprocess.Popen:
        schema = envdefaults.PINOT_FIXTURES / "githubEvents_schema.json"
        args = ["produce", "--topic", topic, "--partitions", str(partitions), "--rate", str(rate)]
        return self._spawn("producer", [*args, "--schema", str(schema), "--count", str(count)])

    def start_stores(self) -> None:
        """ZooKeeper and Redis (a subclass may start other stores: tests/e2e/ensemble_stack.py)."""
        self._services("start")

    def stop_stores(self) -> None:
        self._services("stop")

    def start(self) -> None:
        self.start_stores()
        self.start_spark_worker()
        self.start_worker("healer", "celery")  # the healing manager's runs, as in production
        self.start_controller()
        for index in range(3):
            self.start_server(index)

    def stop(self) -> dict[str, int]:
        for name in ("zookeeper", "redis"):  # a test that failed mid-outage leaves one stopped
            with contextlib.suppress(OSError, ValueError):
                os.kill(self.pid(name), signal.SIGCONT)
        for name in ("spark", "healer"):
            self.stop_worker(name, timeout=30)
        codes = super().stop()
        self.stop_stores()
        return codes
