"""Pause latency: from the pause request to `pauseStatus` = `consumingSegments: []`, against one
ordinary segment commit, measured in the same run on the same processes.

The stack is real and started here: the Celery workers (default queue, and the spark queue whose
one local-mode Spark process, `local[2]` as the product runs it unless BENCH_SPARK_MASTER says
otherwise, builds every segment), a controller and three servers, on the test
services' ZooKeeper and Redis (`make test-services-up` first), in a ZooKeeper chroot and a Redis
database of their own (TEST_SLOT 14). For each table size of `--partitions` (16 and 64), a table
of that many partitions (replication 2, its own topic and schema), and each of `--runs` rounds:
1. produce `--rows-per-partition` rows into every partition and wait until both replicas of every
   partition have consumed them;
2. one ordinary commit: `forceCommit?partitions=0`, timed until that segment is DONE and its next
   segment is CONSUMING (the completion protocol, a Spark build, the three ZooKeeper steps);
3. the pause: `pauseConsumption`, timed until `pauseStatus` says `pauseFlag: true,
   consumingSegments: []` (every partition through the same protocol at once, 2 replicas each);
4. resume (lastConsumed) for the next round.
`--warmup` (1) rounds come first for each size and are not counted: the first build starts
Spark's JVM. Each invocation starts from an empty deep-store folder per table (a commit end lists
its table's folder for other uploads of the segment: segments kept from earlier invocations made
later ones slower).

    make test-services-up
    .venv/bin/python bench/pause.py [--partitions 16 64] [--rows-per-partition 100] [--runs 3]

Prints each run's two times (with the pause's Spark builds: how many, in how many batches of
which sizes, and each batch's wall time; the spark worker's one slot builds the pending builds of
a pause together, `tables.builds`), the CPU seconds each part of the stack spent during each
(`bench/proc_cpu.py`: the controller, the three servers, the spark worker's Python and its Spark
JVM, the other Celery processes, ZooKeeper, Redis and this bench's own polling; on two cores a
pause is CPU-bound, so these say where it goes), then for each size the medians, the ratio
pause / one commit and the goal (issue 18: 16 partitions at most 2x, 64 at most 3x).
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TEST_SLOT", "14")
# The product's default priority of the spark worker (console.settings), not the test suite's 0.
os.environ.setdefault("SPARK_WORKER_NICENESS", "10")
os.chdir(ROOT)

import tests.envdefaults  # noqa: E402 - the test services, slot 14 (before Django starts)

# Spark as the product runs it (console.settings' SPARK_MASTER default), not the suite's local[1].
os.environ["SPARK_MASTER"] = os.environ.get("BENCH_SPARK_MASTER", "local[2]")

os.environ["DATABASE_TEST_NAME"] = str(Path(os.environ["VAR_DIR"]) / "bench_pause.sqlite3")
os.environ["DATABASE_URL"] = f"sqlite:///{os.environ['DATABASE_TEST_NAME']}"
os.environ["DATABASE_TEST_URL"] = os.environ["DATABASE_URL"]  # the workers' database: this one
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402

from tables.builds import deep_store  # noqa: E402
from tables.cluster import context  # noqa: E402
from tables.controller.force_commit import ForceCommitManager  # noqa: E402
from tables.controller.pause import PauseManager  # noqa: E402
from tables.controller.resources import ResourceManager  # noqa: E402
from tables.domain.idealstate import consuming_segments  # noqa: E402
from tables.domain.names import LLCSegmentName  # noqa: E402
from tables.redisconn import get_redis  # noqa: E402
from tables.streams.redis_streams import RedisStreamProvider, RedisTopicAdmin  # noqa: E402
from tables.zk.records import read_record  # noqa: E402
from tests.cluster_fixtures import load  # noqa: E402
from tests.ingest_cluster import IngestCluster, replicas_by_server, table_config  # noqa: E402
from tests.poll import wait_until  # noqa: E402
from tests.procs import CeleryProcesses  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from proc_cpu import CpuGroups, format_used  # noqa: E402

#: The order the CPU of each process group is printed in.
CPU_ORDER = ("controller", "servers", "spark worker", "spark JVM", "workers", "zk", "redis")


def cpu_groups(cluster: IngestCluster, workers: CeleryProcesses) -> CpuGroups:
    """The stack's processes by role (each with its children; the spark worker's JVM apart)."""
    servers = [proc.pid for name, proc in cluster.procs.items() if name.startswith("server")]
    return CpuGroups(
        {
            "controller": [cluster.procs["controller"].pid],
            "servers": servers,
            "spark worker": [workers.procs["spark"].pid],
            "workers": [workers.procs["worker"].pid, workers.procs["beat"].pid],
            "bench": [os.getpid()],
        },
        by_command={"zk": "zookeeper", "redis": "redis-server"},
        split={"spark JVM": ("spark worker", "java")},
    )


def produce(topic: str, partitions: int, rows: int) -> None:
    schema = tests.envdefaults.PINOT_FIXTURES / "githubEvents_schema.json"
    call_command(
        "produce",
        topic=topic,
        partitions=partitions,
        rate=0,
        schema=str(schema),
        count=rows,
        stdout=io.StringIO(),
    )


def consuming(table: str) -> dict[int, str]:
    ctx = context.current()
    ideal = read_record(ctx.client, ctx.paths.idealstate(table))
    out = {}
    for segment in consuming_segments(ideal.record) if ideal else []:
        name = LLCSegmentName.parse(segment)
        if name is not None:
            out[name.partition_group_id] = segment
    return out


def caught_up(cluster: IngestCluster, table: str, latest: dict[int, int]) -> bool:
    """Both replicas of every partition CONSUMING and read up to `latest`."""
    seen: dict[int, list[dict]] = {}
    for items in replicas_by_server(cluster, table).values():
        for item in items:
            name = LLCSegmentName.parse(item["segmentName"])
            if name is not None and item.get("phase") == "CONSUMING":
                seen.setdefault(name.partition_group_id, []).append(item)
    return all(
        len(seen.get(p, [])) == 2 and all(i.get("nextOffset") == str(latest[p]) for i in seen[p])
        for p in latest
    )


def timed_cpu(groups: CpuGroups, step: Callable[[], float]) -> tuple[float, dict[str, float]]:
    """`step`'s time and the CPU seconds each process group spent meanwhile."""
    before = groups.snapshot()
    seconds = step()
    return seconds, groups.used(before, groups.snapshot())


def one_commit(table: str, manager: ResourceManager, commits: ForceCommitManager) -> float:
    segment = consuming(table)[0]
    started = time.monotonic()
    commits.force_commit(table, partitions="0")

    def done() -> bool:
        meta = manager.segment_metadata(table, segment)
        now = consuming(table)
        return meta.status == "DONE" and 0 in now and now[0] != segment

    wait_until(done, timeout=300, interval=0.05, what=f"{segment} committed")
    return time.monotonic() - started


def builds_since(moment: datetime) -> str:
    """The Spark builds that finished since `moment`: how many, in how many batches (by batch
    leader) of which sizes, and each batch's wall time (its builds share it)."""
    from tables.models import Job

    jobs = Job.objects.filter(
        kind=Job.Kind.BUILD, status=Job.Status.SUCCEEDED, finished_at__gte=moment
    ).values_list("task_id", "duration_ms", "details")
    batches: dict[str, tuple[int, float]] = {}
    count = 0
    for task_id, ms, details in jobs:
        count += 1
        batch = (details or {}).get("batch") or {}
        leader = batch.get("leader") or task_id
        batches[leader] = (int(batch.get("size", 1)), (ms or 0) / 1000)
    if not count:
        return "no build recorded"
    shown = sorted(batches.values(), key=lambda item: -item[0])
    return f"{count} builds in {len(batches)} batches: " + ", ".join(
        f"{size} in {seconds:.2f} s" for size, seconds in shown
    )


def pause(table: str, pauses: PauseManager) -> float:
    started = time.monotonic()
    pauses.pause(table, comment="bench")

    def done() -> bool:
        status = pauses.status(table)
        return status["pauseFlag"] is True and status["consumingSegments"] == []

    wait_until(done, timeout=900, interval=0.05, what="pauseStatus consumingSegments: []")
    return time.monotonic() - started


def add_table(manager: ResourceManager, raw: str, topic: str) -> str:
    """A githubEvents table named `raw` (with a copy of the schema under that name) on `topic`."""
    schema = load("githubEvents_schema.json")
    schema["schemaName"] = raw
    manager.add_schema(schema)
    config = table_config(
        topic,
        **{
            "realtime.segment.flush.threshold.segment.rows": "1000000",
            "realtime.segment.flush.threshold.time": "6h",
        },
    )
    config["tableName"] = raw
    config["segmentsConfig"]["schemaName"] = raw
    manager.add_table(config)
    return f"{raw}_REALTIME"


def measure(
    cluster: IngestCluster,
    groups: CpuGroups,
    partitions: int,
    args: argparse.Namespace,
    topics: list[str],
) -> tuple[float, float]:
    """Median one-commit and pause times for a table of `partitions` partitions."""
    manager = ResourceManager(context.current())
    topic = f"bench-pause-{partitions}-{uuid.uuid4().hex[:8]}"
    RedisTopicAdmin(get_redis(settings.REDIS_URL)).create_topic(topic, partitions)
    topics.append(topic)
    table = add_table(manager, f"pause{partitions}", topic)
    commits = ForceCommitManager(context.current(), source="bench")
    pauses = PauseManager(context.current(), commits)
    stream = RedisStreamProvider(get_redis(settings.REDIS_URL), topic)
    commit_times, pause_times = [], []
    for run in range(1 - args.warmup, args.runs + 1):
        produce(topic, partitions, args.rows_per_partition * partitions)
        latest = {p: stream.latest_offset(p) for p in range(partitions)}
        wait_until(
            lambda latest=latest: caught_up(cluster, table, latest),
            timeout=600,
            what="rows consumed",
        )
        one, one_cpu = timed_cpu(groups, lambda: one_commit(table, manager, commits))
        paused_at = datetime.now(UTC)
        whole, pause_cpu = timed_cpu(groups, lambda: pause(table, pauses))
        label = f"run {run}" if run > 0 else "warm-up"
        print(
            f"  {partitions:>3} partitions {label:>7}: one segment commit {one:6.2f} s   "
            f"pause x 2 replicas {whole:6.2f} s ({builds_since(paused_at)})\n"
            f"      CPU s, one commit: {format_used(one_cpu, CPU_ORDER)}\n"
            f"      CPU s, pause:      {format_used(pause_cpu, CPU_ORDER)}",
            flush=True,
        )
        if run > 0:
            commit_times.append(one)
            pause_times.append(whole)
        pauses.resume(table)
    return statistics.median(commit_times), statistics.median(pause_times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--rows-per-partition", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="uncounted rounds per table size")
    args = parser.parse_args()
    Path(os.environ["DATABASE_TEST_NAME"]).unlink(missing_ok=True)
    for partitions in args.partitions:  # earlier runs' segments: every commit end lists the folder
        shutil.rmtree(Path(deep_store().root) / f"pause{partitions}", ignore_errors=True)
    call_command("migrate", verbosity=0)
    workers = CeleryProcesses(tests.envdefaults.VAR_DIR / "logs", os.environ["ZK_HOSTS"])
    workers.start()
    settings.ZK_HOSTS = workers.zk_hosts
    cluster = IngestCluster(workers.zk_hosts, tests.envdefaults.VAR_DIR / "bench-servers", "bench")
    admin = RedisTopicAdmin(get_redis(settings.REDIS_URL))
    topics: list[str] = []
    results: dict[int, tuple[float, float]] = {}
    try:
        call_command("init_cluster", verbosity=0)
        cluster.start_controller()
        for index in range(3):
            cluster.start_server(index)
        wait_until(
            lambda: (
                len(ResourceManager(context.current()).tagged_instances("DefaultTenant_REALTIME"))
                == 3
            ),
            timeout=90,
            what="3 servers",
        )
        for partitions in args.partitions:
            groups = cpu_groups(cluster, workers)
            results[partitions] = measure(cluster, groups, partitions, args, topics)
        goals = {16: 2.0, 64: 3.0}
        for partitions, (one, whole) in results.items():
            goal = goals.get(partitions)
            wanted = f" (goal: at most {goal:.0f}x)" if goal else ""
            print(
                f"{partitions:>3} partitions: one segment commit, median {one:.2f} s; pause to "
                f"consumingSegments [], median {whole:.2f} s; ratio pause / one commit "
                f"{whole / one:.1f}x{wanted}"
            )
    finally:
        cluster.stop()
        workers.stop()
        for topic in topics:
            admin.delete_topic(topic)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
