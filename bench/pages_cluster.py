"""The synthetic cluster behind `bench/pages.py`: written into ZooKeeper, live state published to
Redis as servers would (a seeded mix of lagging, stalled, erroring, committing, idle, silent and
offset-losing partitions), mirrored by two real syncs; and an hour of consumption samples for the
detail table. Django must be set up by the caller (`bench/pages.py` does).
"""

from __future__ import annotations

import argparse
import math
import random
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.zk_private import PrivateZooKeeper

CLUSTER = "PinotCluster"
LIVE_TTL_S = 3600.0
ROUND_GAP_MS = 120_000  # between the full sync and the re-sync: long enough to call a stall
# The share of partitions in each condition; the rest consume normally.
MIX: list[tuple[str, float]] = [
    ("lagging", 0.08),
    ("idle", 0.03),
    ("stalled", 0.02),
    ("error", 0.01),
    ("committing", 0.01),
    ("lost", 0.005),
    ("silent", 0.005),
]
# The detail table shows one of each, whatever the seed.
DETAIL_KINDS = {1: "lagging", 4: "lagging", 6: "stalled", 9: "error", 12: "committing"}


# --- live state --------------------------------------------------------------------------------


@dataclass
class PartitionPlan:
    """What the replicas of one consuming segment report, in both publishing rounds."""

    table: str
    segment: str
    partition: int
    replicas: list[str]
    kind: str
    start: int  # the segment's start offset
    consumed: int  # rows consumed at round 0
    rate: float
    lag: int
    time_lag_ms: int
    idle_ms: int = 0
    lost: int = 0

    def items(self, elapsed_ms: int, now_ms: int) -> dict[str, Any]:
        """server -> PartitionLive, `elapsed_ms` after the first round (empty: no replica
        publishes)."""
        from tables.live_state import PartitionLive

        if self.kind == "silent":
            return {}
        moving = self.kind not in ("stalled", "idle", "committing")
        consumed = self.consumed + (int(self.rate * elapsed_ms / 1000) if moving else 0)
        out = {}
        for index, server in enumerate(self.replicas):
            behind = 0 if index == 0 else (index * 37) % 250  # the second replica trails a bit
            current = self.start + max(0, consumed - behind)
            lag = self.lag + (behind if self.lag else 0)
            state, phase = "CONSUMING", "CONSUMING"
            if self.kind == "error" and index == 0:
                state, phase = "NOT_CONSUMING", "ERROR"
            elif self.kind == "committing":
                phase = "HOLDING" if index else "COMMITTING"
                state = "NOT_CONSUMING"
            time_lag = self.time_lag_ms
            if self.kind == "stalled":
                time_lag += elapsed_ms
            last = now_ms - (self.idle_ms if self.kind == "idle" else min(time_lag, 2_000))
            if self.kind == "stalled":
                last = now_ms - time_lag
            out[server] = PartitionLive(
                table=self.table,
                segmentName=self.segment,
                partition=self.partition,
                consumerState=state,
                phase=phase,
                currentOffset=current,
                upstreamOffset=current + lag,
                recordsLag=lag,
                availabilityLagMs=time_lag,
                lastConsumedMs=last,
                rowsConsumed=consumed * 3,
                rowsPerSecond=0.0 if not moving else round(self.rate, 1),
                lostOffsets=self.lost if index == 0 else 0,
                updatedMs=now_ms,
            )
        return out


def _kind(rng: random.Random) -> str:
    draw = rng.random()
    for kind, share in MIX:
        if draw < share:
            return kind
        draw -= share
    return "ok"


def plan_live_state(client: Any, paths: Any, tables: list[str], detail: str) -> list[PartitionPlan]:
    """One plan per consuming segment, read from the IdealStates (one pipelined read)."""
    from tables.domain.names import LLCSegmentName
    from tables.zk import codec

    rng = random.Random(20240501)
    pending = [(t, client.get_async(paths.idealstate(t))) for t in tables]
    plans = []
    for table, result in pending:
        data, _stat = result.get()
        ideal = codec.decode(data)
        for segment, replicas in sorted(ideal.map_fields.items()):
            if "CONSUMING" not in replicas.values():
                continue
            name = LLCSegmentName.parse(segment)
            if name is None:
                continue
            kind = _kind(rng)
            if table == detail:
                kind = DETAIL_KINDS.get(name.partition_group_id, "ok")
            lag, time_lag, rate = rng.randint(0, 800), rng.randint(0, 3_000), rng.uniform(20, 300)
            if kind == "lagging":
                lag, time_lag = rng.randint(15_000, 400_000), rng.randint(70_000, 1_200_000)
                rate = rng.uniform(500, 2_500)
            elif kind == "stalled":
                lag, time_lag, rate = rng.randint(2_000, 60_000), rng.randint(5_000, 60_000), 0.0
            elif kind == "idle":
                lag, time_lag, rate = 0, 0, 0.0
            plans.append(
                PartitionPlan(
                    table=table,
                    segment=segment,
                    partition=name.partition_group_id,
                    replicas=sorted(s for s, st in replicas.items() if st == "CONSUMING"),
                    kind=kind,
                    start=name.sequence_number * 100_000,
                    consumed=rng.randint(1_000, 60_000),
                    rate=rate,
                    lag=lag,
                    time_lag_ms=time_lag,
                    idle_ms=rng.randint(300_000, 1_800_000),
                    lost=rng.randint(100, 5_000) if kind == "lost" else 0,
                )
            )
    return plans


def publish_round(
    redis_client: Any, plans: list[PartitionPlan], servers: list[str], elapsed_ms: int, now_ms: int
) -> None:
    from tables.live_state import publish

    by_server: dict[str, list[Any]] = {s: [] for s in servers}
    for plan in plans:
        for server, item in plan.items(elapsed_ms, now_ms).items():
            by_server.setdefault(server, []).append(item)
    for server, items in by_server.items():
        publish(redis_client, CLUSTER, server, items, LIVE_TTL_S)


# --- setup -------------------------------------------------------------------------------------


@dataclass
class Setup:
    steps: list[tuple[str, float]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    def step(self, label: str, started: float) -> None:
        self.steps.append((label, time.perf_counter() - started))
        print(f"  {label}: {self.steps[-1][1]:.1f} s", flush=True)


def build_mirror(args: argparse.Namespace) -> Setup:
    from django.core.management import call_command

    from bench.synthetic import delete_tree, write_cluster
    from tables import live_state
    from tables.cluster.context import ClusterContext
    from tables.mirror.sync import sync_cluster
    from tables.redisconn import get_redis
    from tables.zk.client import new_client
    from tables.zk.paths import ClusterPaths

    setup = Setup()
    print(f"building the mirror in {args.db}", flush=True)
    started = time.perf_counter()
    call_command("migrate", verbosity=0)
    setup.step("migrate", started)

    zk = None if args.zk_hosts else PrivateZooKeeper(heap=args.zk_heap)
    chroot = "" if zk else f"/bench-pages-{uuid.uuid4().hex[:10]}"
    root = None
    client = None
    redis_client = get_redis(args.redis_url)
    servers: list[str] = []
    try:
        started = time.perf_counter()
        if zk is not None:
            zk.start()
            hosts = zk.hosts
            setup.step(f"private ZooKeeper on {hosts} (-Xmx{args.zk_heap})", started)
        else:
            root = new_client(args.zk_hosts)
            root.ensure_path(chroot)
            hosts = args.zk_hosts + chroot
        client = new_client(hosts, timeout=30)
        paths = ClusterPaths(CLUSTER)

        started = time.perf_counter()
        now_ms = int(time.time() * 1000)
        cluster = write_cluster(
            client,
            paths,
            tables=args.tables,
            partitions=args.partitions,
            segments=args.segments,
            now_ms=now_ms - ROUND_GAP_MS,
        )
        servers = cluster.servers
        setup.step(
            f"synthetic cluster written: {len(cluster.tables)} tables x {args.partitions} "
            f"partitions x {args.segments} segments, {cluster.znodes} znodes",
            started,
        )

        started = time.perf_counter()
        plans = plan_live_state(client, paths, cluster.tables, args.detail_table)
        kinds: dict[str, int] = {}
        for plan in plans:
            kinds[plan.kind] = kinds.get(plan.kind, 0) + 1
        mix = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
        first_ms = int(time.time() * 1000) - ROUND_GAP_MS
        publish_round(redis_client, plans, servers, 0, first_ms)
        setup.step(f"live state of {len(plans)} consuming segments published ({mix})", started)

        ctx = ClusterContext(client, paths, args.redis_url)
        started = time.perf_counter()
        report = sync_cluster(ctx, now_ms=first_ms)
        if not report.ok:
            raise SystemExit(f"full sync failed: {report.error}")
        setup.step(
            f"full sync (stamped {ROUND_GAP_MS // 1000} s ago): {report.segments_written} "
            f"segments, {report.partitions_written} partitions, {report.samples_written} samples",
            started,
        )

        started = time.perf_counter()
        # Stamped now, and at least ROUND_GAP_MS after the first (a full sync may be quicker).
        second_ms = max(first_ms + ROUND_GAP_MS, int(time.time() * 1000))
        publish_round(redis_client, plans, servers, second_ms - first_ms, second_ms)
        report = sync_cluster(ctx, now_ms=second_ms)
        if not report.ok:
            raise SystemExit(f"re-sync failed: {report.error}")
        setup.step(
            f"second publish + re-sync (stamped now): {report.tables_changed} tables changed, "
            f"{report.partitions_written} partitions written, {report.samples_written} samples",
            started,
        )
    finally:
        keys = [live_state.key_for(CLUSTER, s) for s in servers]
        if keys:
            redis_client.delete(*keys)
        if client is not None:
            client.stop()
            client.close()
        started = time.perf_counter()
        if zk is not None:
            zk.stop()
            setup.step("private ZooKeeper stopped, its data deleted", started)
        elif root is not None:
            deleted = delete_tree(root, chroot, keep_root=False)
            setup.step(f"chroot {chroot} deleted ({deleted} znodes)", started)
            root.stop()
            root.close()
    return setup


# --- every run: samples ------------------------------------------------------------------


def write_samples(table_name: str) -> tuple[int, int]:
    """One hour of samples for every partition of `table_name` with live figures, ending now,
    shaped after its PartitionStatus; returns (rows written, partitions)."""
    from django.conf import settings
    from django.db import transaction

    from tables.models import ConsumptionSample, MirroredTable, PartitionStatus

    table = MirroredTable.objects.get(name=table_name)
    every = float(settings.MIRROR_SAMPLE_SECONDS)
    count = int(3600 // every)
    now = datetime.now(UTC)
    rng = random.Random(table_name)
    rows = []
    statuses = PartitionStatus.objects.filter(table=table, current_offset__isnull=False)
    for status in statuses:
        offset = status.current_offset or 0
        for i in range(count):
            back = (count - 1 - i) * every  # seconds before now
            wave = 1 + 0.25 * math.sin(i / 17 + status.partition)
            rate = max(0.0, status.rows_per_s * wave * rng.uniform(0.9, 1.1))
            if status.verdict == "STALLED" and back < status.stalled_s:
                rate = 0.0
            ramp = i / max(1, count - 1)  # lag grows towards its present value
            rows.append(
                ConsumptionSample(
                    table=table,
                    partition=status.partition,
                    sampled_at=now - timedelta(seconds=back),
                    current_offset=max(0, int(offset - status.rows_per_s * back)),
                    records_lag=int(status.records_lag * ramp * rng.uniform(0.8, 1.0)),
                    time_lag_ms=int(status.time_lag_ms * ramp * rng.uniform(0.8, 1.0)),
                    rows_per_s=round(rate, 1),
                )
            )
    with transaction.atomic():
        ConsumptionSample.objects.filter(table=table).delete()
        ConsumptionSample.objects.bulk_create(rows, batch_size=500)
    return len(rows), statuses.count()
