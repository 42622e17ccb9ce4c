"""Pause latency: from the pause request to `pauseStatus` = `consumingSegments: []`, against one
ordinary segment commit, measured in the same run on the same processes.

The stack is real and started here: the Celery workers (default queue, and the spark queue whose
one local-mode Spark process builds every segment), a controller and three servers, on the test
services' ZooKeeper and Redis (`make test-services-up` first), in a ZooKeeper chroot and a Redis
database of their own (TEST_SLOT 14). One table of `--partitions` (16) partitions, replication 2.
Each of `--runs` rounds:
1. produce `--rows` rows over the partitions and wait until both replicas of every partition have
   consumed them;
2. one ordinary commit: `forceCommit?partitions=0`, timed until that segment is DONE and its next
   segment is CONSUMING (the completion protocol, a Spark build, the three ZooKeeper steps);
3. the pause: `pauseConsumption`, timed until `pauseStatus` says `pauseFlag: true,
   consumingSegments: []` (every partition through the same protocol at once, 2 replicas each);
4. resume (lastConsumed) for the next round.
`--warmup` (1) rounds come first and are not counted: the first build starts Spark's JVM.

    make test-services-up
    .venv/bin/python bench/pause.py [--partitions 16] [--rows 1600] [--runs 3] [--warmup 1]

Prints each run's two times (with the pause's Spark builds: count, median and summed duration;
one spark worker slot builds them one after the other), the medians and the ratio pause / one
commit.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TEST_SLOT", "14")
os.chdir(ROOT)

import tests.envdefaults  # noqa: E402 - the test services, slot 14 (before Django starts)

os.environ["DATABASE_TEST_NAME"] = str(Path(os.environ["VAR_DIR"]) / "bench_pause.sqlite3")
os.environ["DATABASE_URL"] = f"sqlite:///{os.environ['DATABASE_TEST_NAME']}"
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402

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

TABLE = "githubEvents_REALTIME"


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


def consuming() -> dict[int, str]:
    ctx = context.current()
    ideal = read_record(ctx.client, ctx.paths.idealstate(TABLE))
    out = {}
    for segment in consuming_segments(ideal.record) if ideal else []:
        name = LLCSegmentName.parse(segment)
        if name is not None:
            out[name.partition_group_id] = segment
    return out


def caught_up(cluster: IngestCluster, latest: dict[int, int]) -> bool:
    """Both replicas of every partition CONSUMING and read up to `latest`."""
    seen: dict[int, list[dict]] = {}
    for items in replicas_by_server(cluster, TABLE).values():
        for item in items:
            name = LLCSegmentName.parse(item["segmentName"])
            if name is not None and item.get("phase") == "CONSUMING":
                seen.setdefault(name.partition_group_id, []).append(item)
    return all(
        len(seen.get(p, [])) == 2 and all(i.get("nextOffset") == str(latest[p]) for i in seen[p])
        for p in latest
    )


def one_commit(manager: ResourceManager, commits: ForceCommitManager) -> float:
    segment = consuming()[0]
    started = time.monotonic()
    commits.force_commit(TABLE, partitions="0")

    def done() -> bool:
        meta = manager.segment_metadata(TABLE, segment)
        return meta.status == "DONE" and 0 in consuming() and consuming()[0] != segment

    wait_until(done, timeout=300, interval=0.05, what=f"{segment} committed")
    return time.monotonic() - started


def builds_since(moment: datetime) -> str:
    """The Spark builds that finished since `moment`: how many, their median and summed time (a
    sum close to the pause's wall time means they ran one after the other)."""
    from tables.models import Job

    durations = [
        ms / 1000
        for ms in Job.objects.filter(
            kind=Job.Kind.BUILD, status=Job.Status.SUCCEEDED, finished_at__gte=moment
        ).values_list("duration_ms", flat=True)
        if ms is not None
    ]
    if not durations:
        return "no build recorded"
    return (
        f"{len(durations)} builds, median {statistics.median(durations):.2f} s, "
        f"sum {sum(durations):.2f} s"
    )


def pause(pauses: PauseManager) -> float:
    started = time.monotonic()
    pauses.pause(TABLE, comment="bench")

    def done() -> bool:
        status = pauses.status(TABLE)
        return status["pauseFlag"] is True and status["consumingSegments"] == []

    wait_until(done, timeout=600, interval=0.05, what="pauseStatus consumingSegments: []")
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--rows", type=int, default=1600)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="uncounted rounds (Spark's JVM)")
    args = parser.parse_args()
    Path(os.environ["DATABASE_TEST_NAME"]).unlink(missing_ok=True)
    call_command("migrate", verbosity=0)
    workers = CeleryProcesses(tests.envdefaults.VAR_DIR / "logs", os.environ["ZK_HOSTS"])
    workers.start()
    settings.ZK_HOSTS = workers.zk_hosts
    cluster = IngestCluster(workers.zk_hosts, tests.envdefaults.VAR_DIR / "bench-servers", "bench")
    topic = f"bench-pause-{uuid.uuid4().hex[:8]}"
    admin = RedisTopicAdmin(get_redis(settings.REDIS_URL))
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
        admin.create_topic(topic, args.partitions)
        manager = ResourceManager(context.current())
        manager.add_schema(load("githubEvents_schema.json"))
        manager.add_table(
            table_config(
                topic,
                **{
                    "realtime.segment.flush.threshold.segment.rows": "1000000",
                    "realtime.segment.flush.threshold.time": "6h",
                },
            )
        )
        commits = ForceCommitManager(context.current(), source="bench")
        pauses = PauseManager(context.current(), commits)
        stream = RedisStreamProvider(get_redis(settings.REDIS_URL), topic)
        commit_times, pause_times = [], []
        for run in range(1 - args.warmup, args.runs + 1):
            produce(topic, args.partitions, args.rows)
            latest = {p: stream.latest_offset(p) for p in range(args.partitions)}
            wait_until(
                lambda latest=latest: caught_up(cluster, latest), timeout=300, what="rows consumed"
            )
            one = one_commit(manager, commits)
            paused_at = datetime.now(UTC)
            whole = pause(pauses)
            label = f"run {run}" if run > 0 else "warm-up"
            print(
                f"  {label:>7}: one segment commit {one:7.2f} s   "
                f"pause of {args.partitions} partitions x 2 replicas {whole:7.2f} s "
                f"({builds_since(paused_at)})",
                flush=True,
            )
            if run > 0:
                commit_times.append(one)
                pause_times.append(whole)
            pauses.resume(TABLE)
        one, whole = statistics.median(commit_times), statistics.median(pause_times)
        print(f"one segment commit, median:   {one:.2f} s")
        print(f"pause to consumingSegments [], median: {whole:.2f} s")
        print(f"ratio pause / one commit: {whole / one:.1f}x")
    finally:
        cluster.stop()
        workers.stop()
        admin.delete_topic(topic)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
