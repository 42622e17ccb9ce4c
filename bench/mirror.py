"""The ZooKeeper -> database mirror: a full sync against an unchanged re-sync.

A synthetic cluster (`bench/synthetic.py`: `--tables` tables x 16 partitions x 10 segments,
replication 2 over 6 fake servers) is written into a fresh chroot of a private ZooKeeper this
script starts and stops (`bench/zk_private.py`; the test ZooKeeper's small heap would not hold
1,000 tables), or of the one at `--zk-hosts`, and mirrored into a throwaway SQLite database
(`--db`, migrated first):

- full sync: the mirror emptied, then `tables.mirror.sync.sync_cluster` reads every table, every
  segment's metadata and writes every row (`--full-runs` times);
- re-sync: `sync_cluster` again with nothing changed in ZooKeeper: one version probe per table,
  no segment metadata read, `last_synced` confirmed with one UPDATE per model (`--runs` times).

    .venv/bin/python bench/mirror.py [--tables 1000] [--runs 5] [--full-runs 2]
                                     [--zk-hosts HOST:PORT] [--redis-url redis://...]

Prints the write time of the cluster, each run's duration with the SyncReport counters, the
medians and their ratio (full / re-sync). The chroot and the database are deleted at the end.
The fake servers publish no live state, so every partition reads as NOT_REPORTING; Redis is
still asked (one pipelined round trip), as in production.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _setup_django(db: Path, redis_url: str) -> None:
    db.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    os.environ["DATABASE_URL"] = f"sqlite:///{db}"
    os.environ["REDIS_URL"] = redis_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    os.environ.setdefault("DEBUG", "1")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _empty_mirror() -> None:
    from django.db import connection

    from tables.models import (
        ConsumptionSample,
        LeadControllerPartition,
        MirroredInstance,
        MirroredSegment,
        MirroredTable,
        MirrorState,
        PartitionStatus,
    )

    with connection.cursor() as cursor:
        for model in (
            ConsumptionSample,
            PartitionStatus,
            MirroredSegment,
            MirroredTable,
            MirroredInstance,
            LeadControllerPartition,
            MirrorState,
        ):
            cursor.execute(f"DELETE FROM {model._meta.db_table}")


def _run(ctx, label: str, now_ms: int) -> float:
    from tables.mirror.sync import sync_cluster

    started = time.perf_counter()
    report = sync_cluster(ctx, now_ms=now_ms)
    elapsed = time.perf_counter() - started
    if not report.ok:
        raise SystemExit(f"{label}: sync failed: {report.error}")
    print(
        f"  {label}: {elapsed:7.3f} s  tables changed {report.tables_changed:5d}/"
        f"{report.tables_seen}, segment metadata read {report.segments_read:6d}, "
        f"segments written {report.segments_written:6d}, zk {report.zk_requests} requests "
        f"in {report.zk_round_trips} round trips"
    )
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--segments", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5, help="unchanged re-syncs")
    parser.add_argument("--full-runs", type=int, default=2)
    parser.add_argument("--zk-hosts", help="an existing ZooKeeper (default: start a private one)")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:16380/1")
    parser.add_argument("--db", type=Path, default=ROOT / "var" / "bench" / "mirror.sqlite3")
    args = parser.parse_args()
    if args.zk_hosts:
        _bench(args, args.zk_hosts)
        return
    from bench.zk_private import PrivateZooKeeper

    with PrivateZooKeeper() as zk:
        print(f"private ZooKeeper on {zk.hosts}")
        _bench(args, zk.hosts, private=True)


def _bench(args: argparse.Namespace, zk_hosts: str, private: bool = False) -> None:
    _setup_django(args.db, args.redis_url)
    from bench.synthetic import delete_tree, write_cluster
    from tables.cluster.context import ClusterContext
    from tables.zk.client import new_client
    from tables.zk.paths import ClusterPaths

    chroot = f"/bench-mirror-{uuid.uuid4().hex[:10]}"
    root = new_client(zk_hosts)
    root.ensure_path(chroot)
    client = new_client(zk_hosts + chroot, timeout=30)
    now_ms = int(time.time() * 1000)
    try:
        started = time.perf_counter()
        cluster = write_cluster(
            client,
            ClusterPaths("PinotCluster"),
            tables=args.tables,
            partitions=args.partitions,
            segments=args.segments,
            now_ms=now_ms,
        )
        print(
            f"synthetic cluster: {len(cluster.tables)} tables x {args.partitions} partitions x "
            f"{args.segments} segments, {cluster.znodes} znodes written in "
            f"{time.perf_counter() - started:.1f} s ({zk_hosts}{chroot})"
        )
        ctx = ClusterContext(client, ClusterPaths("PinotCluster"), args.redis_url)
        full = []
        for run in range(args.full_runs):
            _empty_mirror()
            full.append(_run(ctx, f"full sync {run + 1}", now_ms + run * 1000))
        resync = [
            _run(ctx, f"re-sync {run + 1}", now_ms + (args.full_runs + run) * 1000)
            for run in range(args.runs)
        ]
        full_median, resync_median = statistics.median(full), statistics.median(resync)
        print(f"full sync median: {full_median:.3f} s")
        print(f"re-sync median:   {resync_median:.3f} s")
        print(f"ratio full / re-sync: {full_median / resync_median:.1f}x")
    finally:
        client.stop()
        client.close()
        if not private:  # a private ZooKeeper's data goes with it
            started = time.perf_counter()
            deleted = delete_tree(root, chroot, keep_root=False)
            print(f"chroot deleted ({deleted} znodes, {time.perf_counter() - started:.1f} s)")
        root.stop()
        root.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{args.db}{suffix}").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
