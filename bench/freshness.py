"""Freshness at a commit: the consumption gap of a pauseless table against a standard (blocking)
one, same schema, same segment size, same production rate, in one run.

The gap at a commit, per partition and replica: the time from the last row consumed into segment N
to the first row consumed into segment N+1 (the partition's rows are unqueryable on that replica
meanwhile). Pauseless: N+1 starts consuming at N's commit start, while the Spark worker builds N;
standard: N+1 starts only after N's build and commit end.

The stack (`bench/freshness_stack.py`), all real processes on a private ZooKeeper and Redis
(scripts/services.sh on free ports, state under var/bench/freshness-<time>/): one controller,
three servers, the default-queue and spark-queue Celery workers (Spark on `local[2]`, as the
product runs it, unless BENCH_SPARK_MASTER says otherwise), and one producer per table:
table `freshPauseless` (pauseless, peer download scheme http) on topic `freshPauseless`, table
`freshStandard` on topic `freshStandard`, each `--partitions` partitions, replication 2,
`--flush-rows` rows per segment, `--rate` rows/s per topic. The standard table's producer starts
half a segment period later, so the two tables' segments do not fill (and queue for the one Spark
worker) at the same moments.

How the gap is measured: every consumer logs, when its thread ends, the offsets it held
`[start, end)` and the server's wall-clock stamps of its first and last fetch that returned rows
(`tables.server.consumer.CONSUMED_LINE`); the bench reads the servers' logs as they grow and
never asks the servers anything while they run. Per server and partition, with e = N+1's start
offset: gap = first fetch of N+1 - last fetch of N, both exact (a fetch returns all the rows
there are, so N+1's first fetch with rows is its first row's arrival). The servers and the bench
run on one host: one clock. A commit counts once the stack is warm (every partition of both tables
has committed a segment), when both replicas logged N and N+1, and when N ended caught up (its
last row was consumed within 1 s of its production; a segment that starts behind the stream fills
at once and measures the backlog, not the commit). A commit's gap is the larger of its replicas'
gaps. Also printed: the first row's wait (first(N+1) minus the production of row e: what the
commit added to that row's freshness), the Spark builds' durations, the rows' spacing (row e
is produced some ms after row e - 1: the floor of any gap), and the gap without the time no row
was there to consume (first(N+1) minus the later of N's last fetch and row e's production: a
producer that pauses between e - 1 and e lengthens the gap of both modes without the commit's
doing, which shows only in the pauseless one, the standard gap being longer than such pauses).

Prints, per mode: commits measured, median / p99 / max gap (ms), the ratio pauseless/standard of
the medians and of the p99s (goal: at most 5%). No assertions on timing; exit status 1 only when
the stack did not come up.

    .venv/bin/python bench/freshness.py [--commits 40] [--partitions 2] [--rate 200]
                                        [--flush-rows 750]

Needs no running services (its ZooKeeper and Redis are its own), only ../shared/fixtures/pinot.
Uses TEST_SLOT 15 for its settings unless TEST_SLOT is set.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TEST_SLOT", "15")
os.chdir(ROOT)


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=40, help="per table, across partitions")
    parser.add_argument("--partitions", type=int, default=2, help="stream partitions per topic")
    parser.add_argument("--rate", type=float, default=200.0, help="producer rows/s per topic")
    parser.add_argument("--flush-rows", type=int, default=750, help="rows per segment")
    parser.add_argument("--max-seconds", type=float, default=330.0, help="measuring time cap")
    parser.add_argument("--keep", action="store_true", help="keep the stores' data at the end")
    return parser.parse_args()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


ARGS = _args()
# The product's default priority of the spark worker (console.settings), not the test suite's 0.
os.environ.setdefault("SPARK_WORKER_NICENESS", "10")
import tests.envdefaults  # noqa: E402, F401 - test settings (before Django starts)

# Spark as the product runs it (console.settings' SPARK_MASTER default), not the suite's local[1].
os.environ["SPARK_MASTER"] = os.environ.get("BENCH_SPARK_MASTER", "local[2]")

RUN_DIR = ROOT / "var" / "bench" / f"freshness-{datetime.now():%Y%m%d-%H%M%S}"
RUN_DIR.mkdir(parents=True)
ZK_PORT, REDIS_PORT = _free_port(), _free_port()
DATABASE = RUN_DIR / "freshness.sqlite3"
os.environ.update(
    {
        "DATABASE_TEST_NAME": str(DATABASE),
        "DATABASE_URL": f"sqlite:///{DATABASE}",
        "DATABASE_TEST_URL": f"sqlite:///{DATABASE}",  # the processes' database
        "DEEP_STORE_URI": (RUN_DIR / "deepstore").as_uri(),
        "ZK_HOSTS": f"127.0.0.1:{ZK_PORT}",
        "REDIS_URL": f"redis://127.0.0.1:{REDIS_PORT}/0",
    }
)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

import django  # noqa: E402

django.setup()
logging.getLogger("kazoo").setLevel(logging.ERROR)  # the bench's client sees the stores stop

from django.core.management import call_command  # noqa: E402

from bench.freshness_stack import ConsumedLog, FreshnessStack, create_table  # noqa: E402
from tables.cluster import context  # noqa: E402
from tables.controller.resources import ResourceManager  # noqa: E402
from tables.domain.names import LLCSegmentName  # noqa: E402
from tables.models import Job  # noqa: E402
from tables.redisconn import get_redis  # noqa: E402
from tables.streams.redis_streams import RedisTopicAdmin  # noqa: E402
from tests.ingest_cluster import done_coverage  # noqa: E402

PAUSELESS, STANDARD = "freshPauseless", "freshStandard"  # raw table name = topic name
MODES = {PAUSELESS: "pauseless", STANDARD: "standard"}
STEADY_LAG_MS = 1000  # N's last row consumed within this of its production: N ended caught up
METHOD = (
    "method: per server and partition, from the consumers' own log lines (first and last fetch "
    "with rows, server stamps; no sampling): gap = first fetch of N+1 - last fetch of N; one "
    "clock (one host)"
)
REPLICATION = 2


def say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)


def poll(condition: Callable[[], object], what: str, timeout: float) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"not true after {timeout:g} s: {what}")
        time.sleep(0.2)


# --- the gaps -----------------------------------------------------------------------------------


@dataclass
class Gap:
    server: int
    table: str
    partition: int
    segment: str  # N
    last_ms: int  # N's last fetch with rows (server stamp)
    first_ms: int  # N+1's first fetch with rows
    produced_last: int  # production stamp of N's last row
    produced_first: int  # ... of N+1's first row (offset e)

    @property
    def gap_ms(self) -> int:
        return self.first_ms - self.last_ms

    @property
    def wait_ms(self) -> int:
        return self.first_ms - self.produced_first

    @property
    def net_ms(self) -> int:
        """The gap without the time no row was there to consume (row e not produced yet)."""
        return self.first_ms - max(self.last_ms, self.produced_first)

    @property
    def lag_ms(self) -> int:
        return self.last_ms - self.produced_last


class Produced:
    """(topic, partition, offset) -> the row's production stamp (ms), read once from Redis."""

    def __init__(self) -> None:
        self.admin = RedisTopicAdmin(get_redis(context.current().redis_url))
        self._known: dict[tuple[str, int, int], int] = {}

    def at(self, topic: str, partition: int, offset: int) -> int:
        key = (topic, partition, offset)
        if key not in self._known:
            batch = self.admin.provider(topic).fetch(partition, offset, 1, 0)
            self._known[key] = batch.messages[0].timestamp_ms
        return self._known[key]


class Gaps:
    """Every replica gap found so far in the servers' logs (a found one never changes)."""

    def __init__(self, consumed: ConsumedLog) -> None:
        self.consumed = consumed
        self.produced = Produced()
        self.found: dict[tuple[int, str], Gap] = {}  # (server, N) -> its gap

    def update(self) -> None:
        self.consumed.update()
        by_name = {}
        for (server, segment), item in self.consumed.found.items():
            name = LLCSegmentName.parse(segment)
            if name is not None:
                key = (server, name.table_name, name.partition_group_id, name.sequence_number)
                by_name[key] = item
        for (server, raw, partition, sequence), item in by_name.items():
            following = by_name.get((server, raw, partition, sequence + 1))
            if following is None or (server, item.segment) in self.found:
                continue
            e = following.start
            self.found[(server, item.segment)] = Gap(
                server,
                f"{raw}_REALTIME",
                partition,
                item.segment,
                item.last_ms,
                following.first_ms,
                self.produced.at(raw, partition, item.end - 1),
                self.produced.at(raw, partition, e),
            )

    def commits(self, table: str, since_ms: float) -> dict[tuple[int, str], list[Gap]]:
        """(partition, N) -> its replicas' gaps, for the steady commits of `table` since then."""
        out: dict[tuple[int, str], list[Gap]] = defaultdict(list)
        for gap in self.found.values():
            if gap.table == table:
                out[(gap.partition, gap.segment)].append(gap)
        return {
            k: v
            for k, v in out.items()
            if len(v) >= REPLICATION
            and min(g.last_ms for g in v) >= since_ms
            and max(g.lag_ms for g in v) <= STEADY_LAG_MS
        }


_COMMIT = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO tables\.server\.consumer: (\S+): COMMIT at"
)


def commit_answers(stack: FreshnessStack) -> dict[str, tuple[int, float]]:
    """Segment -> (server index, ms) of the COMMIT answer its committer logged (server logs; the
    log's local time, as the servers wrote it)."""
    out: dict[str, tuple[int, float]] = {}
    for index in range(3):
        path = stack.server_log(index)
        for line in path.read_text(errors="replace").splitlines():
            match = _COMMIT.match(line)
            if match:
                at = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                out[match.group(2)] = (index, at * 1000)
    return out


def split(commits: dict[tuple[int, str], list[Gap]], answers: dict[str, tuple[int, float]]) -> str:
    """The committer replica's gap in two: last row -> COMMIT answered -> N+1's first row."""
    before, after = [], []
    for (_, segment), replicas in commits.items():
        index, at = answers.get(segment, (-1, 0.0))
        for gap in replicas:
            if gap.server == index:
                before.append(at - gap.last_ms)
                after.append(gap.first_ms - at)
    spacing = [g.produced_first - g.produced_last for v in commits.values() for g in v]
    floor = (
        f"; rows e-1 and e produced {statistics.median(spacing):.0f} ms apart (median: the floor "
        "of any gap)"
        if spacing
        else ""
    )
    if not before:
        return "no COMMIT answer found in the server logs" + floor
    return (
        f"committer replica ({len(before)}): last row -> COMMIT answered median "
        f"{statistics.median(before):.0f} ms, -> N+1 first row median "
        f"{statistics.median(after):.0f} ms{floor}"
    )


# --- the report ---------------------------------------------------------------------------------


def p99(values: list[float]) -> float:
    """Nearest rank."""
    ordered = sorted(values)
    return ordered[max(math.ceil(0.99 * len(ordered)) - 1, 0)]


def _figures(commits: dict[tuple[int, str], list[Gap]]) -> dict[str, float] | None:
    if not commits:
        return None
    gaps = [float(max(g.gap_ms for g in replicas)) for replicas in commits.values()]
    waits = [float(max(g.wait_ms for g in replicas)) for replicas in commits.values()]
    nets = [float(max(g.net_ms for g in replicas)) for replicas in commits.values()]
    replicas = [g for v in commits.values() for g in v]
    return {
        "commits": len(gaps),
        "replicas": len(replicas),
        "median": statistics.median(gaps),
        "p99": p99(gaps),
        "max": max(gaps),
        "wait_median": statistics.median(waits),
        "wait_p99": p99(waits),
        "net_median": statistics.median(nets),
        "net_p99": p99(nets),
        "lag_median": statistics.median(g.lag_ms for g in replicas),
    }


def _builds(table: str, since: datetime) -> str:
    durations = [
        ms / 1000
        for ms in Job.objects.filter(
            kind=Job.Kind.BUILD,
            status=Job.Status.SUCCEEDED,
            table__in=[table, table.removesuffix("_REALTIME")],
            finished_at__gte=since,
        ).values_list("duration_ms", flat=True)
        if ms is not None
    ]
    if not durations:
        return "no builds"
    return f"{len(durations)} builds, median {statistics.median(durations):.2f} s"


def slowest(commits: dict[tuple[int, str], list[Gap]], count: int = 3) -> str:
    """The `count` longest replica gaps: server, N, gap, N's last and N+1's first fetch (epoch
    ms), how long after row e - 1 row e was produced, and the first row's wait."""
    worst = sorted((g for v in commits.values() for g in v), key=lambda g: -g.gap_ms)[:count]
    return "; ".join(
        f"server{g.server} {g.segment} {g.gap_ms} ms ({g.last_ms} -> {g.first_ms}; row e "
        f"produced {g.produced_first - g.produced_last} ms after e - 1, waited {g.wait_ms} ms)"
        for g in worst
    )


def _pair(low: float, high: float) -> str:
    return f"{low:.0f} / {high:.0f}"


def report(
    gaps: Gaps,
    tables: dict[str, str],
    since_ms: float,
    since: datetime,
    answers: dict[str, tuple[int, float]],
) -> None:
    print()
    print(METHOD)
    print(
        f"{'mode':<10} {'commits':>7} {'replicas':>8} {'median ms':>9} {'p99 ms':>7} "
        f"{'max ms':>7}  {'1st-row wait med/p99':>20}  builds"
    )
    figures: dict[str, dict[str, float] | None] = {}
    splits = []
    for raw, table in tables.items():
        mode = MODES[raw]
        commits = gaps.commits(table, since_ms)
        splits.append(f"  {mode}: {split(commits, answers)}")
        f = figures[mode] = _figures(commits)
        if f is None:
            print(f"{mode:<10} no commit measured")
            continue
        waits = _pair(f["wait_median"], f["wait_p99"])
        print(
            f"{mode:<10} {f['commits']:>7.0f} {f['replicas']:>8.0f} {f['median']:>9.0f} "
            f"{f['p99']:>7.0f} {f['max']:>7.0f}  {waits:>20}  {_builds(table, since)}"
        )
    pauseless, standard = figures.get("pauseless"), figures.get("standard")
    if pauseless and standard and standard["median"] and standard["p99"]:
        median = 100 * pauseless["median"] / standard["median"]
        high = 100 * pauseless["p99"] / standard["p99"]
        print(f"ratio pauseless/standard: median {median:.1f}%, p99 {high:.1f}% (goal: at most 5%)")
        print(
            "without the waits for row e to be produced (gap from max(N's last fetch, row e "
            f"produced)): pauseless {_pair(pauseless['net_median'], pauseless['net_p99'])} ms, "
            f"standard {_pair(standard['net_median'], standard['net_p99'])} ms (median / p99): "
            f"{100 * pauseless['net_median'] / max(standard['net_median'], 1):.1f}%, "
            f"{100 * pauseless['net_p99'] / max(standard['net_p99'], 1):.1f}%"
        )
    print("where the gap goes, from the committer's log line 'COMMIT at offset':")
    print("\n".join(splits))
    print("the 3 longest gaps per mode (to find them in the logs: server, segment N, stamps):")
    for raw, table in tables.items():
        print(f"  {MODES[raw]}: {slowest(gaps.commits(table, since_ms))}")
    print(
        "commits: steady commits (N ended caught up) per table; a commit's gap is the larger of "
        "its replicas';\n1st-row wait (ms): N+1's first fetch minus the production of its first "
        "row;\nbuilds: the Spark builds of the measured period."
    )


def main() -> int:
    started = time.monotonic()
    print(
        f"freshness run {RUN_DIR.name}: {ARGS.commits} commits per table, {ARGS.partitions} "
        f"partitions x {ARGS.flush_rows} rows per segment, {ARGS.rate:g} rows/s per topic"
    )
    print(f"command: {' '.join([sys.executable, *sys.argv])}")
    stack = FreshnessStack(RUN_DIR, ZK_PORT, REDIS_PORT, ARGS.rate, ARGS.partitions)
    ok = False
    try:
        call_command("migrate", verbosity=0)
        stack._services("start")
        call_command("init_cluster", verbosity=0)
        stack.start()
        manager = ResourceManager(context.current())
        poll(lambda: len(manager.tagged_instances("DefaultTenant_REALTIME")) == 3, "3 servers", 120)
        tables = {
            raw: create_table(raw, raw, ARGS.partitions, ARGS.flush_rows, raw == PAUSELESS)
            for raw in (PAUSELESS, STANDARD)
        }
        period = ARGS.flush_rows * ARGS.partitions / ARGS.rate
        stack.start_topic_producer(PAUSELESS)
        time.sleep(period / 2)  # staggers the two tables' commits (not a synchronisation)
        stack.start_topic_producer(STANDARD)
        say(f"stack up; producers on; a segment fills every {period:.1f} s per partition")

        def warm() -> bool:
            return all(len(done_coverage(t)) == ARGS.partitions for t in tables.values())

        poll(warm, "a committed segment on every partition (Spark's JVM starts)", 300)
        since_ms, since = time.time() * 1000, datetime.now(UTC)
        say("every partition committed once: measuring")
        gaps = Gaps(ConsumedLog(stack))
        deadline = time.monotonic() + ARGS.max_seconds
        while time.monotonic() < deadline:
            time.sleep(2)
            gaps.update()
            counts = [len(gaps.commits(t, since_ms)) for t in tables.values()]
            if min(counts) >= ARGS.commits:
                break
        else:
            say(f"measuring time cap ({ARGS.max_seconds:g} s) reached")
        say(f"measured commits: {dict(zip(MODES.values(), counts, strict=True))}")
        gaps.update()
        report(gaps, tables, since_ms, since, commit_answers(stack))
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        print(
            f"bench process CPU {cpu.ru_utime + cpu.ru_stime:.0f} s over "
            f"{time.monotonic() - started:.0f} s"
        )
        ok = True
    except TimeoutError as exc:
        print(f"FAILED: {exc}")
    finally:
        stack.stop_producers()
        codes = stack.stop()
        print(f"processes stopped: {codes}")
        print(f"total wall time {time.monotonic() - started:.0f} s; logs {RUN_DIR / 'logs'}")
        if ok and not ARGS.keep:
            for bulky in ("zookeeper", "redis", "deepstore", "servers"):
                shutil.rmtree(RUN_DIR / bulky, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    raise SystemExit(main())
