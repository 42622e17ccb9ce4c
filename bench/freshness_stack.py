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
`peerSegmentDownloadScheme: "http"` (Pinot's rule for replication > 1). `StartOffsets` caches
each segment's `segment.realtime.startOffset` from ZooKeeper (it never changes once written).
`Sampler` keeps, per server, table and partition, the changing replies of the servers'
`consumingSegmentsInfo` (the method is in bench/freshness.py's docstring).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from bench.chaos_stack import SCHEMA, ChaosStack
from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.segment_metadata import START_OFFSET
from tables.redisconn import get_redis
from tables.streams.redis_streams import RedisTopicAdmin
from tables.zk.records import read_record
from tests.cluster_fixtures import load
from tests.ingest_cluster import HOST, table_config

__all__ = ["FreshnessStack", "Key", "Sample", "Sampler", "StartOffsets", "create_table"]


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

    def admin_port(self, index: int) -> int:
        return self.server_ports[f"server{index}"]


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


class StartOffsets:
    """(table, segment) -> the segment's start offset in ZooKeeper, read once (thread-safe)."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def get(self, table: str, segment: str) -> int | None:
        key = (table, segment)
        with self._lock:
            if key in self._known:
                return self._known[key]
        ctx = context.current()
        found = read_record(ctx.client, ctx.paths.segment(table, segment))
        raw = found.record.simple_fields.get(START_OFFSET) if found is not None else None
        if raw is None or not raw.isdigit():
            return None
        with self._lock:
            self._known[key] = int(raw)
        return int(raw)


# --- sampling the servers ---------------------------------------------------------------------


@dataclass
class Sample:
    sent_ms: float  # bench clock before the first request that saw this state
    seen_ms: float  # ... before the latest request that still saw it
    offsets: dict[str, int]  # segment -> its consumer's current offset
    consumed_ms: int  # the partition's lastConsumedTimestamp (server clock)


Key = tuple[int, str, int]  # (server index, table, partition)


class Sampler:
    """One thread per server polling consumingSegmentsInfo (see bench/freshness.py): every
    `fast_ms` while a partition of the table on that server is near a commit, else `slow_ms`."""

    def __init__(
        self,
        stack: FreshnessStack,
        tables: list[str],
        starts: StartOffsets,
        flush_rows: int,
        intervals_ms: tuple[float, float],
    ) -> None:
        self.stack, self.tables, self.starts = stack, tables, starts
        self.flush_rows, (self.fast_ms, self.slow_ms) = flush_rows, intervals_ms
        self.series: dict[Key, list[Sample]] = defaultdict(list)
        self.known: dict[tuple[int, str], set[int]] = defaultdict(set)
        self.lead_rows = stack.rate / stack.partitions * 0.5  # 0.5 s of a partition's rows
        self.requests = self.failures = 0
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._loop, args=(i,), name=f"sampler{i}", daemon=True)
            for i in range(3)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def _loop(self, index: int) -> None:
        due = dict.fromkeys(self.tables, 0.0)
        while not self._stop.is_set():
            for table in self.tables:
                if time.monotonic() >= due[table]:
                    fast = self._sample(index, table)
                    due[table] = time.monotonic() + (self.fast_ms if fast else self.slow_ms) / 1000
            self._stop.wait(max(min(due.values()) - time.monotonic(), 0.0))

    def _get(self, index: int, table: str) -> list[dict] | None:
        url = f"http://{HOST}:{self.stack.admin_port(index)}/tables/{table}/consumingSegmentsInfo"
        self.requests += 1
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                return json.loads(reply.read())
        except (OSError, ValueError):
            self.failures += 1
            return None

    def _sample(self, index: int, table: str) -> bool:
        """One request; True when a partition of `table` on this server is near a commit."""
        sent = time.time() * 1000
        items = self._get(index, table)
        if items is None:
            return False
        parts: dict[int, tuple[dict[str, int], int]] = {}
        for item in items:
            for partition, offset in item["partitionToOffsetMap"].items():
                offsets, consumed = parts.get(int(partition), ({}, 0))
                offsets[item["segmentName"]] = int(offset)
                parts[int(partition)] = (offsets, max(consumed, item["lastConsumedTimestamp"]))
        known = self.known[(index, table)]
        fast = bool(known - set(parts))
        for partition, (offsets, consumed) in parts.items():
            known.add(partition)
            self._record((index, table, partition), sent, offsets, consumed)
            fast = fast or any(self._near(table, s, o) for s, o in offsets.items())
        return fast

    def _near(self, table: str, segment: str, offset: int) -> bool:
        start = self.starts.get(table, segment)
        return (
            start is None or offset == start or offset - start >= self.flush_rows - self.lead_rows
        )

    def _record(self, key: Key, sent: float, offsets: dict[str, int], consumed: int) -> None:
        series = self.series[key]
        if series and series[-1].offsets == offsets and series[-1].consumed_ms == consumed:
            series[-1].seen_ms = sent
        else:
            series.append(Sample(sent, sent, offsets, consumed))
