"""Freshness at a commit: the consumption gap of a pauseless table against a standard (blocking)
one, same schema, same segment size, same production rate, in one run.

The gap at a commit, per partition and replica: the time from the last row consumed into segment N
to the first row consumed into segment N+1 (the partition's rows are unqueryable on that replica
meanwhile). Pauseless: N+1 starts consuming at N's commit start, while the Spark worker builds N;
standard: N+1 starts only after N's build and commit end.

The stack (`bench/freshness_stack.py`), all real processes on a private ZooKeeper and Redis
(scripts/services.sh on free ports, state under var/bench/freshness-<time>/): one controller,
three servers, the default-queue and spark-queue Celery workers, and one producer per table:
table `freshPauseless` (pauseless, peer download scheme http) on topic `freshPauseless`, table
`freshStandard` on topic `freshStandard`, each `--partitions` partitions, replication 2,
`--flush-rows` rows per segment, `--rate` rows/s per topic. The standard table's producer starts
half a segment period later, so the two tables' segments do not fill (and queue for the one Spark
worker) at the same moments.

How the gap is measured (the consumers' first and last consumed moments are not in ZooKeeper):
a sampler thread per server polls `GET /tables/<t>/consumingSegmentsInfo` on the server's admin
port, every `--poll-ms` while a partition of that table on that server is near a commit (a
consumer within 0.5 s of rows of its threshold or at it, a consumer without rows yet, or no
consumer listed), every `--slow-ms` otherwise. Each reply gives, per consuming segment, its
current offset and the partition's `lastConsumedTimestamp`: the server's own wall-clock stamp of
its latest fetch that returned rows (one per table and partition on a server, shared by N and
N+1). The samples are kept per server, table and partition whenever they change. With e = N+1's
start offset (ZooKeeper):
- last(N) = the stamp in a sample where N is at offset e, or N+1 is listed at e, without rows:
  no fetch has happened since N's last one (the smallest such stamp; it stays in place for the
  whole gap, so any sample inside the gap sees it exactly);
- first(N+1) = the stamp in the first sample where N+1 is past e. It is N+1's first fetch, exact,
  when N+1 holds one row, or when every row it holds was produced (the rows' production stamps,
  read from the stream, with a 5 ms margin) before the latest sample that still showed last(N):
  a fetch returns all rows there are. Otherwise it may be a later fetch: the gap is then an
  upper bound, the true first fetch lying after max(that sample, the production of row e), and
  that bracket's width is printed as the resolution.
The servers and the bench run on one host: one clock. A commit counts once the stack is warm
(every partition of both tables has committed a segment) and when N ended caught up (its last row
was consumed within 1 s of its production; a segment that starts behind the stream fills at once
and measures the backlog, not the commit). A commit's gap is the larger of its replicas' gaps.
Also printed: the first row's wait (first(N+1) minus the production of row e: what the commit
added to that row's freshness), the Spark builds' durations, and the sampler's load.

Prints, per mode: commits measured, median / p99 / max gap (ms), the ratio pauseless/standard of
the medians and of the p99s (goal: at most 5%). No assertions on timing; exit status 1 only when
the stack did not come up.

    .venv/bin/python bench/freshness.py [--commits 40] [--partitions 2] [--rate 40]
                                        [--flush-rows 150] [--poll-ms 10]

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
    parser.add_argument("--rate", type=float, default=40.0, help="producer rows/s per topic")
    parser.add_argument("--flush-rows", type=int, default=150, help="rows per segment")
    parser.add_argument("--poll-ms", type=float, default=10.0, help="sampling near a commit")
    parser.add_argument("--slow-ms", type=float, default=100.0, help="sampling otherwise")
    parser.add_argument("--max-seconds", type=float, default=330.0, help="measuring time cap")
    parser.add_argument("--keep", action="store_true", help="keep the stores' data at the end")
    return parser.parse_args()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


ARGS = _args()
import tests.envdefaults  # noqa: E402, F401 - test settings (before Django starts)

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

from bench.freshness_stack import (  # noqa: E402
    FreshnessStack,
    Key,
    Sample,
    Sampler,
    StartOffsets,
    create_table,
)
from tables.cluster import context  # noqa: E402
from tables.controller.resources import ResourceManager  # noqa: E402
from tables.domain.names import LLCSegmentName  # noqa: E402
from tables.models import Job  # noqa: E402
from tables.redisconn import get_redis  # noqa: E402
from tables.streams.redis_streams import RedisTopicAdmin  # noqa: E402
from tests.ingest_cluster import done_coverage  # noqa: E402

PAUSELESS, STANDARD = "freshPauseless", "freshStandard"  # raw table name = topic name
MODES = {PAUSELESS: "pauseless", STANDARD: "standard"}
XADD_MARGIN_MS = 5  # a row's production stamp is taken just before its XADD
STEADY_LAG_MS = 1000  # N's last row consumed within this of its production: N ended caught up
METHOD = (
    "method: per server, table and partition, samples of consumingSegmentsInfo (current offsets, "
    "lastConsumedTimestamp = the server's stamp of its latest fetch with rows), every {fast:g} ms "
    "near a commit, {slow:g} ms otherwise; gap = first fetch of N+1 - last fetch of N, both "
    "server stamps; one clock (one host)"
)


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
    last_ms: int  # N's last fetch (server stamp)
    first_ms: int  # N+1's first fetch, or an upper bound of it
    low_ms: float  # the true first fetch is at or after this
    exact: bool
    produced_last: int  # production stamp of N's last row (offset e - 1)
    produced_first: int  # ... of N+1's first row (offset e)

    @property
    def gap_ms(self) -> int:
        return self.first_ms - self.last_ms

    @property
    def wait_ms(self) -> int:
        return self.first_ms - self.produced_first

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


def _pairs(series: list[Sample]) -> list[tuple[str, str]]:
    names: dict[int, str] = {}
    for sample in series:
        for segment in sample.offsets:
            name = LLCSegmentName.parse(segment)
            if name is not None:
                names[name.sequence_number] = segment
    return [(names[n], names[n + 1]) for n in sorted(names) if n + 1 in names]


def one_gap(
    key: Key, series: list[Sample], pair: tuple[str, str], e: int, produced: Produced
) -> Gap | None:
    """The gap of `pair` (N, N+1) on one replica, None while (or when) it cannot be told.
    `series` starts at the first sample that lists N."""
    segment, following = pair
    last: int | None = None
    first: Sample | None = None
    quiet: list[Sample] = []  # samples without a fetch since N's last one (candidates)
    for sample in series:
        if segment not in sample.offsets and following not in sample.offsets:
            continue
        at = sample.offsets.get(following)
        if at is not None and at > e:
            first = sample
            break
        if at == e or (at is None and sample.offsets.get(segment) == e):
            quiet.append(sample)
            last = sample.consumed_ms if last is None else min(last, sample.consumed_ms)
    if first is None or last is None or first.consumed_ms <= last:
        return None
    _, table, partition = key
    topic = table.removesuffix("_REALTIME")
    held = first.offsets[following]
    before = max(s.seen_ms for s in quiet if s.consumed_ms == last)
    produced_first = produced.at(topic, partition, e)
    exact = held == e + 1 or produced.at(topic, partition, held - 1) + XADD_MARGIN_MS <= before
    low = first.consumed_ms if exact else max(before, produced_first, last)
    return Gap(
        key[0],
        table,
        partition,
        segment,
        last,
        first.consumed_ms,
        min(low, first.consumed_ms),
        exact,
        produced.at(topic, partition, e - 1),
        produced_first,
    )


class Gaps:
    """Every replica gap found so far (a found one never changes)."""

    def __init__(self, sampler: Sampler, starts: StartOffsets) -> None:
        self.sampler, self.starts = sampler, starts
        self.produced = Produced()
        self.found: dict[tuple[int, str, int, str], Gap] = {}

    def update(self) -> None:
        for key, series in list(self.sampler.series.items()):
            snapshot = list(series)
            listed: dict[str, int] = {}  # segment -> index of the first sample listing it
            for index, sample in enumerate(snapshot):
                for segment in sample.offsets:
                    listed.setdefault(segment, index)
            for pair in _pairs(snapshot):
                if (*key, pair[0]) in self.found:
                    continue
                e = self.starts.get(key[1], pair[1])
                since = snapshot[listed[pair[0]] :]
                gap = None if e is None else one_gap(key, since, pair, e, self.produced)
                if gap is not None:
                    self.found[(*key, pair[0])] = gap

    def commits(self, table: str, since_ms: float) -> dict[tuple[int, str], list[Gap]]:
        """(partition, N) -> its replicas' gaps, for the steady commits of `table` since then."""
        out: dict[tuple[int, str], list[Gap]] = defaultdict(list)
        for gap in self.found.values():
            if gap.table == table:
                out[(gap.partition, gap.segment)].append(gap)
        return {
            k: v
            for k, v in out.items()
            if min(g.last_ms for g in v) >= since_ms and max(g.lag_ms for g in v) <= STEADY_LAG_MS
        }


_COMMIT = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO tables\.server\.consumer: (\S+): COMMIT at"
)


def commit_answers(stack: FreshnessStack) -> dict[str, tuple[int, float]]:
    """Segment -> (server index, ms) of the COMMIT answer its committer logged (server logs; the
    log's local time, as the servers wrote it)."""
    out: dict[str, tuple[int, float]] = {}
    for index in range(3):
        path = stack.log_dir / f"{stack.log_prefix}-server{index}.log"
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
    replicas = [g for v in commits.values() for g in v]
    widths = [g.first_ms - g.low_ms for g in replicas if not g.exact]
    return {
        "commits": len(gaps),
        "replicas": len(replicas),
        "exact": sum(g.exact for g in replicas),
        "median": statistics.median(gaps),
        "p99": p99(gaps),
        "max": max(gaps),
        "wait_median": statistics.median(waits),
        "wait_p99": p99(waits),
        "width_median": statistics.median(widths) if widths else 0.0,
        "width_max": max(widths) if widths else 0.0,
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
    ms), whether exact."""
    worst = sorted((g for v in commits.values() for g in v), key=lambda g: -g.gap_ms)[:count]
    return "; ".join(
        f"server{g.server} {g.segment} {g.gap_ms} ms ({g.last_ms} -> {g.first_ms}"
        f"{'' if g.exact else ', upper bound'})"
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
    print(METHOD.format(fast=ARGS.poll_ms, slow=ARGS.slow_ms))
    print(
        f"{'mode':<10} {'commits':>7} {'replicas':>8} {'exact':>5} {'median ms':>9} "
        f"{'p99 ms':>7} {'max ms':>7}  {'1st-row wait med/p99':>20}  "
        f"{'resolution med/max':>18}  builds"
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
        widths = _pair(f["width_median"], f["width_max"])
        print(
            f"{mode:<10} {f['commits']:>7.0f} {f['replicas']:>8.0f} {f['exact']:>5.0f} "
            f"{f['median']:>9.0f} {f['p99']:>7.0f} {f['max']:>7.0f}  {waits:>20}  "
            f"{widths:>18}  {_builds(table, since)}"
        )
    pauseless, standard = figures.get("pauseless"), figures.get("standard")
    if pauseless and standard and standard["median"] and standard["p99"]:
        median = 100 * pauseless["median"] / standard["median"]
        high = 100 * pauseless["p99"] / standard["p99"]
        print(f"ratio pauseless/standard: median {median:.1f}%, p99 {high:.1f}% (goal: at most 5%)")
    print("where the gap goes, from the committer's log line 'COMMIT at offset':")
    print("\n".join(splits))
    print("the 3 longest gaps per mode (to find them in the logs: server, segment N, stamps):")
    for raw, table in tables.items():
        print(f"  {MODES[raw]}: {slowest(gaps.commits(table, since_ms))}")
    print(
        "commits: steady commits (N ended caught up) per table; a commit's gap is the larger of "
        "its replicas';\nexact: replica gaps whose N+1 first fetch was seen exactly (the others "
        "are upper bounds;\nresolution: their bracket width, ms); 1st-row wait (ms): N+1's first "
        "fetch minus the production\nof its first row; builds: the Spark builds of the measured "
        "period."
    )


def main() -> int:
    started = time.monotonic()
    print(
        f"freshness run {RUN_DIR.name}: {ARGS.commits} commits per table, {ARGS.partitions} "
        f"partitions x {ARGS.flush_rows} rows per segment, {ARGS.rate:g} rows/s per topic"
    )
    print(f"command: {' '.join([sys.executable, *sys.argv])}")
    stack = FreshnessStack(RUN_DIR, ZK_PORT, REDIS_PORT, ARGS.rate, ARGS.partitions)
    sampler: Sampler | None = None
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
        starts = StartOffsets()
        intervals = (ARGS.poll_ms, ARGS.slow_ms)
        sampler = Sampler(stack, list(tables.values()), starts, ARGS.flush_rows, intervals)
        sampler.start()
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
        gaps = Gaps(sampler, starts)
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
        sampler.stop()
        gaps.update()
        report(gaps, tables, since_ms, since, commit_answers(stack))
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        print(
            f"sampler: {sampler.requests} requests ({sampler.failures} failed); bench process CPU "
            f"{cpu.ru_utime + cpu.ru_stime:.0f} s over {time.monotonic() - started:.0f} s"
        )
        ok = True
    except TimeoutError as exc:
        print(f"FAILED: {exc}")
    finally:
        if sampler is not None:
            sampler.stop()
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
