"""The console's pages and /metrics at 1,000 tables x 16 partitions x 10 segments, served for real.

Setup (skipped with `--reuse-db` when the database already holds a mirror):

1. a private ZooKeeper (`bench/zk_private.py`: a free port, 1.5 GB heap, data under var/bench/zk,
   stopped and deleted at the end), or a fresh chroot of `--zk-hosts` (deleted at the end);
2. the synthetic cluster of `bench/synthetic.py` written into it (`--tables` x `--partitions` x
   `--segments`, replication 2 over 6 fake servers);
3. live state published to Redis (`tables.live_state.publish`, `--redis-url`, db 9 by default)
   for every consuming segment the IdealStates assign to each fake server: plausible offsets, lags
   and rates, with a seeded mix of lagging, stalled, erroring, offset-losing, committing, idle and
   silent partitions;
4. `tables.sync.sync_cluster` into a migrated SQLite database (`--db`, var/bench/pages.sqlite3):
   a full sync stamped two minutes ago, then the servers publish again (stalled partitions did not
   move) and an unchanged re-sync stamped now, so the verdicts include STALLED; the live-state
   keys written are deleted afterwards.

Every run then:

- replaces the ConsumptionSample rows of the detail table with one hour of samples ending now
  (one per partition every MIRROR_SAMPLE_SECONDS), bulk-inserted: syncing for an hour is not an
  option; samples of the other tables are only those the two syncs wrote;
- counts the SQL queries of each URL in-process (Django's test client, the same database);
- starts gunicorn (`console.wsgi`, 2 workers, a free port) with DEBUG off, a throwaway
  SECRET_KEY, DATABASE_URL = the bench database and ZK_HOSTS = 127.0.0.1:1, where nothing
  listens: a page that touched ZooKeeper would take seconds or fail;
- logs in through /login/ (CSRF token and session cookie, as a browser does) as the operator
  `bench`, then requests each URL `--warmup` times untimed and `--requests` times timed, one at
  a time: the overview, the tables list (default sort), the tables list sorted by lag on page 10,
  the detail page of `--detail-table` (charts included) and /metrics (no login); baselines
  `/healthz?check=database` (the whole middleware stack and one SQL round trip) and a static file
  (WhiteNoise);
- prints status, response size, query count, p50, p95 and max per URL and each URL's p50 as a
  multiple of the /healthz baseline's; gunicorn is stopped on exit, Ctrl-C or an error.

    .venv/bin/python bench/pages.py [--tables 1000] [--partitions 16] [--segments 10]
        [--reuse-db] [--db var/bench/pages.sqlite3] [--requests 50] [--warmup 3]
        [--detail-table synth0000_REALTIME] [--zk-hosts HOST:PORT] [--zk-heap 1536m]
        [--redis-url redis://127.0.0.1:16380/9] [--workers 2]

The database is kept for `--reuse-db` (delete it by hand, or run without the flag to rebuild it).
"""

from __future__ import annotations

import argparse
import http.client
import http.cookiejar
import math
import os
import random
import re
import secrets
import signal
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.zk_private import PrivateZooKeeper, free_port  # noqa: E402

CLUSTER = "PinotCluster"
USERNAME = "bench"
UNREACHABLE_ZK = "127.0.0.1:1"
LIVE_TTL_S = 3600.0
ROUND_GAP_MS = 120_000  # between the full sync and the re-sync: long enough to call a stall
DEFAULT_DB = ROOT / "var" / "bench" / "pages.sqlite3"
GUNICORN_LOG = ROOT / "var" / "bench" / "pages-gunicorn.log"
BASELINE = "/healthz?check=database"
STATIC = "/static/console/console.css"

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


# --- settings shared by this process and gunicorn --------------------------------------------


def bench_env(db: Path, redis_url: str) -> dict[str, str]:
    return {
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "DATABASE_URL": f"sqlite:///{db}",
        "SECRET_KEY": secrets.token_urlsafe(40),
        "DEBUG": "false",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "ZK_HOSTS": UNREACHABLE_ZK,
        "CLUSTER_NAME": CLUSTER,
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": redis_url,
        "CELERY_RESULT_BACKEND": redis_url,
        "MIRROR_SYNC_ON_BEAT": "false",
        "LOG_LEVEL": "WARNING",
    }


def setup_django(env: dict[str, str]) -> None:
    os.environ.update(env)
    import django

    django.setup()


def remove_db(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


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
    from tables.controller.context import ClusterContext
    from tables.redisconn import get_redis
    from tables.sync import sync_cluster
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


# --- every run: samples, user, query counts --------------------------------------------------


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


def ensure_user() -> str:
    """The operator account `bench` with a new random password; returns the password."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from console import roles

    user, _ = get_user_model().objects.get_or_create(username=USERNAME)
    password = secrets.token_urlsafe(18)
    user.set_password(password)
    user.save()
    group = Group.objects.filter(name=roles.OPERATOR).first()
    if group is not None:
        user.groups.set([group])
    return password


def count_queries(urls: list[str]) -> dict[str, int]:
    """SQL queries per URL, rendered in-process with Django's test client (logged in)."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(get_user_model().objects.get(username=USERNAME))
    counts = {}
    for url in urls:
        client.get(url)  # first render: caches, lazy imports
        with CaptureQueriesContext(connection) as captured:
            response = client.get(url)
        if response.status_code != 200:
            raise SystemExit(f"{url}: status {response.status_code} in-process")
        counts[url] = len(captured.captured_queries)
    return counts


# --- serving and timing --------------------------------------------------------------------------


class Gunicorn:
    """`gunicorn console.wsgi` on a free loopback port, in its own session; `stop` ends it."""

    def __init__(self, env: dict[str, str], workers: int) -> None:
        self.port = free_port()
        self.env = {**os.environ, **env}
        self.workers = workers
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> None:
        GUNICORN_LOG.parent.mkdir(parents=True, exist_ok=True)
        command = [
            str(ROOT / ".venv" / "bin" / "gunicorn"),
            "console.wsgi",
            "-b",
            f"127.0.0.1:{self.port}",
            "-w",
            str(self.workers),
            "--no-control-socket",  # the default path is shared by every gunicorn of the user
        ]
        with GUNICORN_LOG.open("wb") as out:
            self.process = subprocess.Popen(
                command,
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited; see {GUNICORN_LOG}")
            try:
                if get(self.port, BASELINE, accept="application/json").status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"gunicorn not answering after {timeout_s:g} s; see {GUNICORN_LOG}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)  # the arbiter stops its workers
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # its own session: only what we started
            process.wait(timeout=10)


@dataclass
class Response:
    status: int
    size: int
    seconds: float
    location: str = ""


GZIP = " (gzip)"  # a URL ending so marked is asked for with Accept-Encoding: gzip


def get(port: int, url: str, cookie: str = "", accept: str = "text/html") -> Response:
    """One GET on a fresh connection, timed from connect to the last byte of the body (as sent:
    compressed when asked for gzip, as Prometheus asks for /metrics)."""
    headers = {"Accept": accept}
    if url.endswith(GZIP):
        url = url.removesuffix(GZIP)
        headers["Accept-Encoding"] = "gzip"
    if cookie:
        headers["Cookie"] = cookie
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request("GET", url, headers=headers)
        response = connection.getresponse()
        body = response.read()
        elapsed = time.perf_counter() - started
        return Response(response.status, len(body), elapsed, response.getheader("Location") or "")
    finally:
        connection.close()


def login(base: str, password: str) -> str:
    """Log in through the form; returns the Cookie header of the session."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    html = opener.open(f"{base}/login/", timeout=60).read().decode()
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    if found is None:
        raise SystemExit("no CSRF token in /login/")
    form = urllib.parse.urlencode(
        {
            "username": USERNAME,
            "password": password,
            "csrfmiddlewaretoken": found.group(1),
            "next": "/ui/tables/",
        }
    ).encode()
    request = urllib.request.Request(
        f"{base}/login/", data=form, headers={"Referer": f"{base}/login/"}
    )
    opener.open(request, timeout=120).read()
    names = {c.name for c in jar}
    if "sessionid" not in names:
        raise SystemExit(f"login failed (cookies: {sorted(names)})")
    return "; ".join(f"{c.name}={c.value}" for c in jar)


@dataclass
class Timing:
    url: str
    label: str
    status: int
    size: int
    seconds: list[float]

    @property
    def p50(self) -> float:
        return statistics.median(self.seconds)

    @property
    def p95(self) -> float:
        ordered = sorted(self.seconds)
        return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def time_url(
    port: int, url: str, label: str, cookie: str, accept: str, warmup: int, requests: int
) -> Timing:
    for _ in range(warmup):
        get(port, url, cookie, accept)
    seconds, sizes, statuses = [], set(), set()
    for _ in range(requests):
        response = get(port, url, cookie, accept)
        if response.status != 200:
            raise SystemExit(f"{url}: status {response.status} {response.location}".strip())
        seconds.append(response.seconds)
        sizes.add(response.size)
        statuses.add(response.status)
    return Timing(url, label, statuses.pop(), max(sizes), seconds)


# --- main --------------------------------------------------------------------------------------


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def mirror_summary() -> tuple[int, int, int, int, str, dict[str, int]]:
    from django.db.models import Count
    from django.utils import timezone

    from tables.models import (
        ConsumptionSample,
        MirroredSegment,
        MirroredTable,
        MirrorState,
        PartitionStatus,
    )

    state = MirrorState.objects.filter(name="zk").first()
    age = "never synced"
    if state is not None and state.last_synced is not None:
        age = f"last synced {(timezone.now() - state.last_synced).total_seconds():.0f} s ago"
    verdicts = dict(
        PartitionStatus.objects.values_list("verdict").annotate(n=Count("id")).order_by("-n")
    )
    return (
        MirroredTable.objects.count(),
        PartitionStatus.objects.count(),
        MirroredSegment.objects.count(),
        ConsumptionSample.objects.count(),
        age,
        verdicts,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--segments", type=int, default=10)
    parser.add_argument("--db", type=Path, default=DEFAULT_DB)
    parser.add_argument("--reuse-db", action="store_true", help="skip the setup if --db has one")
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--detail-table", default="synth0000_REALTIME")
    parser.add_argument("--zk-hosts", default="", help="an existing ZooKeeper (fresh chroot)")
    parser.add_argument("--zk-heap", default="1536m")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:16380/9")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _terminate)

    args.db = args.db.resolve()
    args.db.parent.mkdir(parents=True, exist_ok=True)
    reuse = args.reuse_db and args.db.exists()
    if not reuse:
        remove_db(args.db)
    env = bench_env(args.db, args.redis_url)
    setup_django(env)

    if reuse:
        print(f"reusing the mirror in {args.db} (setup skipped)")
    else:
        started = time.perf_counter()
        try:
            build_mirror(args)
        except BaseException:
            remove_db(args.db)  # half a mirror must not be reused
            raise
        print(f"setup total: {time.perf_counter() - started:.1f} s", flush=True)

    tables, partitions, segments, samples, age, verdicts = mirror_summary()
    print(
        f"mirror: {tables} tables, {partitions} partitions, {segments} segments, "
        f"{samples} samples; {age}"
    )
    print("verdicts: " + ", ".join(f"{v} {n}" for v, n in verdicts.items()))
    if tables == 0:
        raise SystemExit("the mirror is empty: run without --reuse-db")

    started = time.perf_counter()
    written, sampled = write_samples(args.detail_table)
    print(
        f"{args.detail_table}: {written} ConsumptionSample rows bulk-inserted for {sampled} "
        f"partitions (one hour, one per partition every MIRROR_SAMPLE_SECONDS; not from syncs) "
        f"in {time.perf_counter() - started:.1f} s"
    )
    password = ensure_user()

    detail = f"/ui/tables/{args.detail_table}/"
    pages = [
        ("/", "overview", True),
        ("/ui/tables/", "tables (default sort)", True),
        ("/ui/tables/?sort=-lag&page=10", "tables sorted by lag, page 10", True),
        (detail, "table detail", True),
        ("/metrics", "/metrics (no login)", False),
        ("/metrics" + GZIP, "/metrics gzipped, as Prometheus asks", False),
    ]
    baselines = [(BASELINE, "baseline: healthz database", False), (STATIC, "static file", False)]
    queries = count_queries([url for url, _, _ in pages if not url.endswith(GZIP)])

    from django.db import connections

    connections.close_all()
    server = Gunicorn(env, args.workers)
    results: list[Timing] = []
    try:
        started = time.perf_counter()
        server.start()
        print(
            f"gunicorn up on {server.base} with {args.workers} workers in "
            f"{time.perf_counter() - started:.1f} s (ZK_HOSTS={UNREACHABLE_ZK}, DEBUG off)"
        )
        started = time.perf_counter()
        cookie = login(server.base, password)
        print(f"logged in as {USERNAME} through /login/ in {time.perf_counter() - started:.1f} s")
        print(f"{args.warmup} warm-up + {args.requests} timed requests per URL, one at a time")
        for url, label, needs_login in baselines[:1] + pages + baselines[1:]:
            accept = "application/json" if url == BASELINE else "text/html"
            timing = time_url(
                server.port,
                url,
                label,
                cookie if needs_login else "",
                accept,
                args.warmup,
                args.requests,
            )
            results.append(timing)
            print(f"  {label}: p50 {timing.p50 * 1000:.1f} ms", flush=True)
    finally:
        server.stop()

    base = next(t for t in results if t.url == BASELINE).p50
    print()
    header = f"{'url':<38} {'bytes':>9} {'queries':>7} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}"
    print(header + f" {'p50/baseline':>12}")
    for t in results:
        count = str(queries[t.url]) if t.url in queries else "-"
        print(
            f"{t.url:<38} {t.size:>9} {count:>7} {t.p50 * 1000:>8.1f} {t.p95 * 1000:>8.1f} "
            f"{max(t.seconds) * 1000:>8.1f} {t.p50 / base:>11.1f}x"
        )
    print(f"baseline: {BASELINE} p50 {base * 1000:.1f} ms")


if __name__ == "__main__":
    main()
