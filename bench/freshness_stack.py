"""The processes and tables of `bench/freshness.py`.

`FreshnessStack` is `bench.chaos_stack.ChaosStack` (a private ZooKeeper and Redis from
scripts/services.sh on free ports, the spark-queue Celery worker that builds every segment, the
default-queue worker, one controller and three servers) without Celery beat, and with one producer
per topic (`producer-<topic>`, `manage.py produce` at the same rate until SIGINT). Every process
logs to `<run dir>/logs/freshness-<name>.log`. Django must be set up (with the private stores'
addresses) before this module is imported.

`create_table` makes a table `<name>_REALTIME` on its own topic: the githubEvents schema and
fixture config, replication 2, segments of `flush_rows` rows (time threshold 1 h, so only rows
end a segment), and for a pauseless table `pauselessConsumptionEnabled: true` with
`peerSegmentDownloadScheme: "http"` (Pinot's rule for replication > 1).

`ConsumedLog` reads the servers' logs as they grow: each consumer logs, when its thread ends, the
offsets it held and the stamps of its first and last fetch that returned rows
(`tables.server.consumer.CONSUMED_LINE`); it keeps one `Consumed` per server and segment.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.chaos_stack import SCHEMA, ChaosStack
from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.redisconn import get_redis
from tables.streams.redis_streams import RedisTopicAdmin
from tests.cluster_fixtures import load
from tests.ingest_cluster import table_config

__all__ = ["Consumed", "ConsumedLog", "FreshnessStack", "create_table"]


class FreshnessStack(ChaosStack):
    """One controller, three servers, the two Celery workers and one producer per topic."""

    def __init__(
        self, run_dir: Path, zk_port: int, redis_port: int, rate: float, partitions: int
    ) -> None:
        super().__init__(run_dir, zk_port, redis_port, "", rate)
        self.log_prefix = "freshness"
        self.partitions = partitions
        self.host = f"freshness-{os.getpid()}"
        self.worker_names = [f"worker@{self.host}", f"spark@{self.host}"]

    def start(self) -> None:
        """The stores must be up already (`_services("start")`)."""
        self.start_spark_worker()
        self.start_default_worker()
        self.start_controller()
        for index in range(3):
            self.start_server(index)

    def start_topic_producer(self, topic: str) -> subprocess.Popen:
        """`manage.py produce` on `topic` at the bench rate, until SIGINT."""
        args = ["produce", "--topic", topic, "--partitions", str(self.partitions)]
        args += ["--rate", str(self.rate), "--schema", str(SCHEMA)]
        return self._spawn(f"producer-{topic}", args)

    def stop_producers(self) -> None:
        for name, proc in self.procs.items():
            if name.startswith("producer") and proc.poll() is None:
                proc.send_signal(signal.SIGINT)

    def server_log(self, index: int) -> Path:
        return self.log_dir / f"{self.log_prefix}-server{index}.log"


def create_table(name: str, topic: str, partitions: int, flush_rows: int, pauseless: bool) -> str:
    """The topic and table `<name>_REALTIME` (see the module docstring); returns the table."""
    ctx = context.current()
    RedisTopicAdmin(get_redis(ctx.redis_url)).create_topic(topic, partitions)
    schema = load("githubEvents_schema.json")
    schema["schemaName"] = name
    stream = {
        "realtime.segment.flush.threshold.segment.rows": str(flush_rows),
        "realtime.segment.flush.threshold.time": "1h",
    }
    config = table_config(topic, **stream)
    config["tableName"] = name
    config["segmentsConfig"].pop("schemaName", None)
    if pauseless:
        config["segmentsConfig"]["peerSegmentDownloadScheme"] = "http"
        config["ingestionConfig"]["streamIngestionConfig"]["pauselessConsumptionEnabled"] = True
    manager = ResourceManager(ctx)
    manager.add_schema(schema)
    manager.add_table(config)
    return f"{name}_REALTIME"


# --- what the consumers logged ----------------------------------------------------------------

_CONSUMED = re.compile(
    r"tables\.server\.consumer: (\S+): consumed offsets \[(\d+), (\d+)\) \((\d+) rows\): "
    r"rows fetched from (\d+) to (\d+) ms"
)


@dataclass(frozen=True)
class Consumed:
    """One consumer's line: offsets [start, end) and its first and last fetch with rows."""

    server: int
    segment: str
    start: int
    end: int
    first_ms: int
    last_ms: int


class ConsumedLog:
    """The `Consumed` lines of the stack's servers, read incrementally (complete lines only)."""

    def __init__(self, stack: FreshnessStack) -> None:
        self.stack = stack
        self.found: dict[tuple[int, str], Consumed] = {}
        self._read = [0, 0, 0]  # bytes of each server's log read so far

    def update(self) -> None:
        for index in range(3):
            path = self.stack.server_log(index)
            if not path.exists():
                continue
            with path.open("rb") as handle:
                handle.seek(self._read[index])
                chunk = handle.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]
            self._read[index] += len(complete)
            for line in complete.decode(errors="replace").splitlines():
                match = _CONSUMED.search(line)
                if match:
                    segment, start, end, _, first, last = match.groups()
                    item = Consumed(index, segment, int(start), int(end), int(first), int(last))
                    self.found[(index, segment)] = item
