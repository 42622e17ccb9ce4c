"""The ZooKeeper -> database mirror: a full sync against ZooKeeper's raw async read rate of the
same znodes, and against an unchanged re-sync.

A synthetic cluster (`bench/synthetic.py`: `--tables` tables x 16 partitions x 10 segments,
replication 2 over 6 fake servers) is written into a fresh chroot of a private ZooKeeper this
script starts and stops (`bench/zk_private.py`; the test ZooKeeper's small heap would not hold
1,000 tables), or of the one at `--zk-hosts`, and mirrored into a throwaway database on each
`--database-url` (repeatable; default a SQLite file under var/bench; for postgres://… a database
`bench_mirror_<id>` created on that server and dropped after), migrated first, each in a process of
its own:

- raw read: every znode a full sync reads (the listings with `get_children_async`, every other
  znode with `get_async`: tables' IdealState, ExternalView, config, every segment's metadata,
  instances, lead controller, cluster config), all requests issued before the first answer is
  collected, no decoding, on the sync's own kazoo client (the same settings); before each full
  sync. For reference it also reads the same znodes as the sync reads segment metadata
  (`tables.zk.batch_reads`, multiRead requests of MULTI_READ_OPS znodes; the others as above);
- full sync: the mirror emptied, then `tables.mirror.sync.sync_cluster` reads every table, every
  segment's metadata and writes every row (`--full-runs` times);
- re-sync: `sync_cluster` again with nothing changed in ZooKeeper: one version probe per table,
  no segment metadata read, `last_synced` confirmed on tables, instances and lead controller
  partitions (segment and partition rows are not rewritten) (`--runs` times).

    .venv/bin/python bench/mirror.py [--tables 1000] [--runs 5] [--full-runs 3]
                                     [--zk-hosts HOST:PORT] [--redis-url redis://...]
                                     [--database-url sqlite:///path|postgres://... ...]
    # both databases (scripts/services.sh start postgres, PG_PORT=15432):
    .venv/bin/python bench/mirror.py --database-url sqlite:///var/bench/mirror.sqlite3 \
        --database-url postgres://postgres@127.0.0.1:15432/postgres

Prints the write time of the cluster, each run's duration with the SyncReport counters, the
medians, the full sync's rate against the raw async read rate of the same znodes (goal: at least
0.8x) and the full sync against the re-sync (goal: the re-sync at least 10x faster) per database,
then, with several databases, each one's medians against the first's. The chroot and the
databases are deleted at the end.
The fake servers publish no live state, so every partition reads as NOT_REPORTING; Redis is
still asked (one pipelined round trip), as in production.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kazoo.exceptions import NoNodeError  # noqa: E402


def _setup_django(database_url: str, redis_url: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ["REDIS_URL"] = redis_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    os.environ.setdefault("DEBUG", "1")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


@contextlib.contextmanager
def _throwaway_database(url: str) -> Iterator[str]:
    """The URL of a fresh, empty database for `url`: the SQLite file itself (deleted before and
    after), or a database created on `url`'s PostgreSQL server (dropped after)."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        db = Path(parts.path)
        db.parent.mkdir(parents=True, exist_ok=True)
        _delete_sqlite(db)
        try:
            yield url
        finally:
            _delete_sqlite(db)
        return
    import psycopg

    name = f"bench_mirror_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_libpq_url(url), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(_libpq_url(url), autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name}")


def _libpq_url(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(scheme="postgresql"))


def _delete_sqlite(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


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
    parser.add_argument("--full-runs", type=int, default=3)
    parser.add_argument("--zk-hosts", help="an existing ZooKeeper (default: start a private one)")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:16380/1")
    parser.add_argument(
        "--database-url",
        action="append",
        dest="database_urls",
        help=f"repeatable; default {DEFAULT_DB}",
    )
    # A child run: the cluster is already in this chroot; sync into one database, report as JSON.
    parser.add_argument("--chroot", help=argparse.SUPPRESS)
    parser.add_argument("--now-ms", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--json-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.database_urls = args.database_urls or [DEFAULT_DB]
    if args.chroot:
        _child(args)
        return
    if args.zk_hosts:
        _bench(args, args.zk_hosts)
        return
    from bench.zk_private import PrivateZooKeeper

    with PrivateZooKeeper() as zk:
        print(f"private ZooKeeper on {zk.hosts}")
        _bench(args, zk.hosts, private=True)


DEFAULT_DB = f"sqlite:///{ROOT / 'var' / 'bench' / 'mirror.sqlite3'}"


def _bench(args: argparse.Namespace, zk_hosts: str, private: bool = False) -> None:
    """Write the cluster once, then run the syncs for each database in a child process (Django
    binds one database per process), while this one's session keeps the live instances."""
    from bench.synthetic import delete_tree, write_cluster
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
        results = [_spawn_child(args, zk_hosts, chroot, now_ms, url) for url in args.database_urls]
        _compare(results)
    finally:
        client.stop()
        client.close()
        if not private:  # a private ZooKeeper's data goes with it
            started = time.perf_counter()
            deleted = delete_tree(root, chroot, keep_root=False)
            print(f"chroot deleted ({deleted} znodes, {time.perf_counter() - started:.1f} s)")
        root.stop()
        root.close()


def _spawn_child(
    args: argparse.Namespace, zk_hosts: str, chroot: str, now_ms: int, url: str
) -> dict[str, float | str]:
    print(f"database {_vendor(url)} ({url})", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            *("--zk-hosts", zk_hosts, "--chroot", chroot, "--now-ms", str(now_ms)),
            *("--redis-url", args.redis_url, "--database-url", url, "--json-out", str(out)),
            *("--runs", str(args.runs), "--full-runs", str(args.full_runs)),
        ]
        subprocess.run(cmd, check=True)
        return json.loads(out.read_text())


def _vendor(url: str) -> str:
    return "SQLite" if urlsplit(url).scheme == "sqlite" else "PostgreSQL"


def _child(args: argparse.Namespace) -> None:
    (url,) = args.database_urls
    with _throwaway_database(url) as database:
        _setup_django(database, args.redis_url)
        from tables.cluster.context import ClusterContext
        from tables.zk.client import new_client
        from tables.zk.paths import ClusterPaths

        client = new_client(args.zk_hosts + args.chroot, timeout=30)
        try:
            ctx = ClusterContext(client, ClusterPaths("PinotCluster"), args.redis_url)
            now_ms = args.now_ms
            plan = _read_plan(client, ctx.paths)
            full, raw, multi = [], [], []
            for run in range(args.full_runs):
                raw.append(_raw_read(client, plan, f"raw async read {run + 1}"))
                multi.append(_raw_read(client, plan, f"raw multiRead {run + 1}", many=True))
                _empty_mirror()
                full.append(_run(ctx, f"full sync {run + 1}", now_ms + run * 1000))
            resync = [
                _run(ctx, f"re-sync {run + 1}", now_ms + (args.full_runs + run) * 1000)
                for run in range(args.runs)
            ]
        finally:
            client.stop()
            client.close()
    full_median, resync_median = statistics.median(full), statistics.median(resync)
    raw_median, multi_median = statistics.median(raw), statistics.median(multi)
    count = plan.count
    print(f"  raw async read median: {raw_median:.3f} s ({count / raw_median:,.0f} znodes/s)")
    print(f"  raw multiRead median:  {multi_median:.3f} s ({count / multi_median:,.0f} znodes/s)")
    print(f"  full sync median:      {full_median:.3f} s ({count / full_median:,.0f} znodes/s)")
    print(f"  re-sync median:        {resync_median:.3f} s")
    print(
        f"  full sync rate / raw async read rate: {raw_median / full_median:.2f}x (goal >= 0.8x); "
        f"/ raw multiRead rate: {multi_median / full_median:.2f}x"
    )
    print(f"  ratio full / re-sync: {full_median / resync_median:.1f}x (goal >= 10x)", flush=True)
    result = {
        "database": _vendor(url),
        "full": full_median,
        "resync": resync_median,
        "raw": raw_median,
    }
    args.json_out.write_text(json.dumps(result))


@dataclass(frozen=True)
class ReadPlan:
    """Every znode a full sync of the synthetic cluster reads: the listings and the gets (segment
    metadata apart, as the sync reads them with multiRead)."""

    listings: list[str]
    gets: list[str]
    segments: list[str]

    @property
    def count(self) -> int:
        return len(self.listings) + len(self.gets) + len(self.segments)


def _read_plan(client, paths) -> ReadPlan:
    """What `sync_cluster` reads on an empty mirror (listed here, untimed)."""
    from tables.domain.leadership import LEAD_CONTROLLER_RESOURCE

    tables = sorted(client.get_children(paths.idealstates))
    participants = client.get_children(paths.participant_configs)
    lives = client.get_children(paths.liveinstances)
    listings = [paths.idealstates, paths.table_configs, paths.participant_configs]
    listings += [paths.liveinstances, *(paths.segments(t) for t in tables)]
    gets = [paths.participant_config(n) for n in participants]
    gets += [paths.liveinstance(n) for n in lives]
    lead = LEAD_CONTROLLER_RESOURCE
    gets += [paths.idealstate(lead), paths.externalview(lead), paths.controller_leader]
    gets += [paths.resource_config(lead), paths.cluster_config]
    segments = []
    for table in tables:
        gets += [paths.idealstate(table), paths.externalview(table), paths.table_config(table)]
        try:
            names = client.get_children(paths.segments(table))
        except NoNodeError:
            continue
        segments += [paths.segment(table, name) for name in names]
    return ReadPlan(listings, gets, segments)


def _raw_read(client, plan: ReadPlan, label: str, many: bool = False) -> float:
    """Read every znode of `plan` (see the module docstring); missing ones count as read."""
    from tables.zk.batch_reads import get_many_async

    started = time.perf_counter()
    pending = [client.get_children_async(path) for path in plan.listings]
    pending += [client.get_async(path) for path in plan.gets]
    if many:
        handle = get_many_async(client, plan.segments)
    else:
        pending += [client.get_async(path) for path in plan.segments]
    for result in pending:
        try:  # noqa: SIM105 (cheaper than contextlib.suppress: the raw side stays raw)
            result.get()
        except NoNodeError:
            pass
    if many:
        handle.get()
    elapsed = time.perf_counter() - started
    print(f"  {label}: {elapsed:7.3f} s  {plan.count} znodes")
    return elapsed


def _compare(results: list[dict[str, float | str]]) -> None:
    if len(results) < 2:
        return
    base = results[0]
    print(
        f"{'database':<12} {'raw read':>10} {'full sync':>10} {'re-sync':>10}   "
        f"vs {base['database']}"
    )
    for res in results:
        full = float(res["full"]) / float(base["full"])
        resync = float(res["resync"]) / float(base["resync"])
        print(
            f"{res['database']:<12} {res['raw']:>9.3f}s {res['full']:>9.3f}s "
            f"{res['resync']:>9.3f}s   full {full:.2f}x, re-sync {resync:.2f}x"
        )


if __name__ == "__main__":
    main()
