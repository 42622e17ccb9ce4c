"""Failover: from `kill -9` of a controller that leads tables to (1) all of its
leadControllerResource partitions having a new MASTER and (2) the first commit of a table that
moved, in seconds and in multiples of the ZooKeeper session timeout measured in the same run.

The stack (`bench/failover_stack.py`), all real processes on a private ZooKeeper and Redis
(scripts/services.sh on free ports, state under var/bench/failover-<time>/): three controllers
with LEAD_CONTROLLER_REBALANCE_DELAY_MS=0 (a dead controller's partitions move as soon as its
session ends), three servers, the spark-queue Celery worker that builds every segment, the
default-queue worker (the healing run a new leader asks for) and a producer at `--rate` rows/s
over one topic of `--partitions` partitions. `--tables` githubEvents tables (the fixture's schema
and config, replication 2) all read that topic; once the 24 partitions are 8/8/8, their raw names
(`githubEvents`, `githubEvents_<k>`) are picked so that each controller leads one of them (round
robin), so a killed controller leads some tables and not others (later runs move tables around:
a returning controller gets other partitions back).
Segments are small (`realtime.segment.flush.threshold.segment.rows`: `--flush-rows` for the first
table, 19 more for each next one, so that the tables' segments do not fill at the same offsets and
queue together for the one Spark worker).

Each of `--runs` runs: wait until the 24 partitions are 8/8/8 over the three live controllers;
measure the session timeout T (a new client asks for ZK_TIMEOUT_SECONDS, as every process does;
T is what ZooKeeper grants it); pick a controller that leads at least one table (the one killed
least so far); wait until a segment of a table it leads, consuming for `--lead` s at least,
lacks only `--lead` s of rows (so that a commit is due during the failover rather than after a
wait for rows); `kill -9` it; poll (every 50 ms, with a deadline) until
  (1) each partition it was MASTER of has another MASTER in /EXTERNALVIEW/leadControllerResource
      (time: that view's mtime in ZooKeeper minus the kill), and
  (2) a segment of a table it led, not DONE at the kill, is DONE in ZooKeeper (its metadata's
      mtime minus the kill; it includes the segment's Spark build);
then start it again and wait for 8/8/8. ZooKeeper's own log gives the killed session's expiry
(time and negotiated timeout), printed beside the figures. Prints per-run figures, min / median /
max, the ratios to T and the Spark builds' durations; no assertions on timing. Exit status 1
only when the stack did not come up or a deadline passed.

    .venv/bin/python bench/failover.py [--runs 3] [--tables 3] [--rate 4] [--flush-rows 60]

Needs no running services (its ZooKeeper and Redis are its own), only ../shared/fixtures/pinot.
Uses TEST_SLOT 12 for its settings unless TEST_SLOT is set.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import socket
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TEST_SLOT", "12")
os.chdir(ROOT)


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tables", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=1, help="stream partitions")
    parser.add_argument("--rate", type=float, default=4.0, help="producer rows/s in all")
    parser.add_argument("--flush-rows", type=int, default=60, help="rows per segment (table 1)")
    parser.add_argument(
        "--lead", type=float, default=1.0, help="kill when a segment lacks this many s of rows"
    )
    parser.add_argument("--deadline", type=float, default=120.0, help="each wait's deadline, s")
    parser.add_argument("--keep", action="store_true", help="keep the stores' data at the end")
    return parser.parse_args()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


ARGS = _args()
import tests.envdefaults  # noqa: E402, F401 - test settings (before Django starts)

RUN_DIR = ROOT / "var" / "bench" / f"failover-{datetime.now():%Y%m%d-%H%M%S}"
RUN_DIR.mkdir(parents=True)
ZK_PORT, REDIS_PORT = _free_port(), _free_port()
DATABASE = RUN_DIR / "failover.sqlite3"
os.environ.update(
    {
        "DATABASE_TEST_NAME": str(DATABASE),
        "DATABASE_URL": f"sqlite:///{DATABASE}",
        "DATABASE_TEST_URL": f"sqlite:///{DATABASE}",  # the processes' database
        "DEEP_STORE_URI": (RUN_DIR / "deepstore").as_uri(),
        "ZK_HOSTS": f"127.0.0.1:{ZK_PORT}",
        "REDIS_URL": f"redis://127.0.0.1:{REDIS_PORT}/0",
        "LEAD_CONTROLLER_REBALANCE_DELAY_MS": "0",
        "CONTROLLER_STOP_COMMIT_WAIT_SECONDS": "5",
    }
)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

import django  # noqa: E402

django.setup()
logging.getLogger("kazoo").setLevel(logging.ERROR)  # the bench's client sees the stores stop

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402

from bench.failover_stack import (  # noqa: E402
    FailoverStack,
    done,
    done_after,
    lead_masters,
    negotiated_timeout_ms,
    segment_states,
    session_expiry,
    zookeeper_conf,
)
from tables.cluster import context  # noqa: E402
from tables.controller.resources import ResourceManager  # noqa: E402
from tables.domain.leadership import lead_partition  # noqa: E402
from tables.domain.names import LLCSegmentName  # noqa: E402
from tables.domain.segment_metadata import SegmentStatus  # noqa: E402
from tables.models import Job  # noqa: E402
from tables.redisconn import get_redis  # noqa: E402
from tables.streams.redis_streams import RedisTopicAdmin  # noqa: E402
from tables.zk.election import cluster_leader_id  # noqa: E402
from tables.zk.records import read_record  # noqa: E402
from tests.cluster_fixtures import load  # noqa: E402
from tests.ingest_cluster import table_config  # noqa: E402

TOPIC = "failover"
POLL_S = 0.05


@dataclass
class Figures:
    run: int
    victim: str
    cluster_leader: bool  # the victim was also the cluster leader (/CONTROLLER/LEADER)
    moved: list[str]  # tables it led
    stayed: int  # tables it did not lead
    timeout_ms: int  # negotiated by a new client in this run
    masters_s: float  # (1)
    commit_s: float  # (2)
    committed: str  # the segment of (2)
    expiry_s: float | None = None  # kill -> ZooKeeper expired the victim's session
    victim_timeout_ms: int | None = None  # what the victim's session had negotiated
    rebalanced_s: float | None = None  # restart -> 8/8/8 again


def say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)


def poll(condition: Callable[[], object], what: str, timeout: float | None = None) -> object:
    """`condition()`'s first truthy value, polled every POLL_S; TimeoutError after the deadline."""
    limit = ARGS.deadline if timeout is None else timeout
    deadline = time.monotonic() + limit
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"not true after {limit:g} s: {what}")
        time.sleep(POLL_S)


def table_names(count: int, masters: dict[int, str | None], controllers: list[str]) -> list[str]:
    """Names for `count` tables spread over the controllers as they lead now: round robin, each
    the first of `githubEvents`, `githubEvents_2`, ... whose leadControllerResource partition is
    led by that controller and by no other table (the first controller is githubEvents's)."""
    first = masters[lead_partition("githubEvents", len(masters))]
    order = sorted(controllers, key=lambda c: c != first)
    names: list[str] = []
    used: set[int] = set()
    for i in range(count):
        k = 1
        while True:
            name = "githubEvents" if k == 1 else f"githubEvents_{k}"
            partition = lead_partition(name, len(masters))
            if partition not in used and masters[partition] == order[i % len(order)]:
                break
            k += 1
        names.append(name)
        used.add(partition)
    return [f"{name}_REALTIME" for name in names]


def raw(table: str) -> str:
    return table.removesuffix("_REALTIME")


class Bench:
    def __init__(self, stack: FailoverStack) -> None:
        self.stack = stack
        self.ids = [stack.controller(i) for i in range(3)]
        self.kills: Counter[int] = Counter()
        self.tables: list[str] = []
        self.rows: dict[str, int] = {}
        self.provider = RedisTopicAdmin(get_redis(stack.redis_url)).provider(TOPIC)

    # --- set-up -------------------------------------------------------------------------------
    def set_up(self) -> None:
        call_command("migrate", verbosity=0)
        self.stack._services("start")
        call_command("init_cluster", verbosity=0)
        self.stack.start()
        manager = ResourceManager(context.current())
        poll(lambda: len(manager.tagged_instances("DefaultTenant_REALTIME")) == 3, "3 servers")
        RedisTopicAdmin(get_redis(self.stack.redis_url)).create_topic(TOPIC, ARGS.partitions)
        poll(self.balanced, "8/8/8 over the three controllers")
        self.tables = table_names(ARGS.tables, lead_masters(context.current())[1], self.ids)
        # The tables read the same rows: sizes without a small common multiple keep their
        # segments from filling at the same offset (and queueing together for the Spark worker).
        self.rows = {t: ARGS.flush_rows + 19 * k for k, t in enumerate(self.tables)}
        for table in self.tables:
            schema = load("githubEvents_schema.json")
            schema["schemaName"] = raw(table)
            stream = {
                "realtime.segment.flush.threshold.segment.rows": str(self.rows[table]),
                "realtime.segment.flush.threshold.time": "1h",
            }
            config = table_config(TOPIC, **stream)
            config["tableName"] = raw(table)
            config["segmentsConfig"].pop("schemaName", None)
            manager.add_schema(schema)
            manager.add_table(config)
        self.stack.start_producer()
        sizes = ", ".join(f"{raw(t)} ({self.rows[t]} rows)" for t in self.tables)
        say(f"stack up: 3 controllers, 3 servers; tables {sizes}")
        ctx = context.current()
        poll(
            lambda: all(done(segment_states(ctx, t)) for t in self.tables),
            "a first commit of every table (Spark's JVM starts)",
            timeout=300,
        )
        say("every table committed a first segment")

    def balanced(self) -> bool:
        """Every partition has one MASTER and the three controllers hold an even share each."""
        _, masters, _ = lead_masters(context.current())
        held = Counter(masters.values())
        if None in held or set(held) != set(self.ids):
            return False
        return max(held.values()) - min(held.values()) <= 1

    def about_to_fill(self, tables: list[str]) -> str | None:
        """A table among `tables` whose consuming segment lacks at most `--lead` seconds of rows
        (of the producer's rate), None if none does. The segment must be older than that too: a
        segment created behind the stream (its predecessor's commit took long) is full at once."""
        ctx = context.current()
        lead_rows = ARGS.rate / ARGS.partitions * ARGS.lead
        latest = {p: self.provider.latest_offset(p) for p in range(ARGS.partitions)}
        young = time.time() * 1000 - ARGS.lead * 1000
        for table in tables:
            for segment, state in segment_states(ctx, table).items():
                name = LLCSegmentName.parse(segment)
                if state.status != SegmentStatus.IN_PROGRESS or state.start_offset is None:
                    continue
                if state.mtime_ms > young:
                    continue
                rows = latest[name.partition_group_id] - state.start_offset
                if self.rows[table] - lead_rows <= rows < self.rows[table]:
                    return table
        return None

    # --- one run ------------------------------------------------------------------------------
    def leaders(self) -> tuple[dict[int, str | None], dict[str, str | None]]:
        count, masters, _ = lead_masters(context.current())
        return masters, {t: masters[lead_partition(raw(t), count)] for t in self.tables}

    def victim(self, leaders: dict[str, str | None]) -> int:
        led = Counter(leaders.values())
        candidates = [i for i in range(3) if led[self.ids[i]]]
        return min(candidates, key=lambda i: (self.kills[i], -led[self.ids[i]], i))

    def run(self, number: int) -> Figures:
        poll(self.balanced, f"8/8/8 over the three controllers before run {number}")
        timeout_ms = negotiated_timeout_ms(settings.ZK_HOSTS, settings.ZK_TIMEOUT_SECONDS)
        ctx = context.current()
        masters, leaders = self.leaders()
        index = self.victim(leaders)
        victim = self.ids[index]
        owned = {p for p, m in masters.items() if m == victim}
        moved = [t for t in self.tables if leaders[t] == victim]
        filling = poll(lambda: self.about_to_fill(moved), "a moved table's segment about to fill")
        was_leader = cluster_leader_id(ctx.client, ctx.paths) == victim.removeprefix("Controller_")
        live = read_record(ctx.client, ctx.paths.liveinstance(victim))
        session = live.record.simple_fields.get("SESSION_ID", "") if live else ""
        before = {t: done(segment_states(ctx, t)) for t in moved}
        kill_ms = time.time() * 1000
        self.stack.kill_controller(index)
        self.kills[index] += 1
        say(
            f"run {number}: killed -9 {victim} (MASTER of {len(owned)} partitions, leader of "
            f"{', '.join(map(raw, moved))}{'; the cluster leader' if was_leader else ''}) "
            f"as a segment of {raw(filling)} was {ARGS.lead:g} s of rows from full"
        )
        masters_s, (segment, commit_s) = self._measure(owned, victim, moved, before, kill_ms)
        figures = Figures(
            number,
            victim,
            was_leader,
            moved,
            len(self.tables) - len(moved),
            timeout_ms,
            masters_s,
            commit_s,
            segment,
        )
        expiry = poll(
            lambda: session_expiry(self.stack.zookeeper_log, session), "expiry in ZooKeeper's log"
        )
        figures.expiry_s = expiry[0] - kill_ms / 1000
        figures.victim_timeout_ms = expiry[1]
        restarted = time.monotonic()
        self.stack.start_controller_at(index)
        poll(self.balanced, f"8/8/8 after {victim} restarted")
        figures.rebalanced_s = time.monotonic() - restarted
        say(
            f"run {number}: (1) {masters_s:.2f} s, (2) {commit_s:.2f} s ({segment}); restarted, "
            f"8/8/8 again {figures.rebalanced_s:.1f} s later"
        )
        return figures

    def _measure(
        self,
        owned: set[int],
        victim: str,
        moved: list[str],
        before: dict[str, set[str]],
        kill_ms: float,
    ) -> tuple[float, tuple[str, float]]:
        """(1) and (2), polled together."""
        ctx = context.current()
        found: dict[str, object] = {}

        def check() -> bool:
            if "masters" not in found:
                _, masters, mtime = lead_masters(ctx)
                if all(masters[p] not in (None, victim) for p in owned):
                    found["masters"] = (mtime - kill_ms) / 1000
            if "commit" not in found:
                committed = {
                    s: at
                    for t in moved
                    for s, at in done_after(segment_states(ctx, t), kill_ms, before[t]).items()
                }
                if committed:
                    first = min(committed, key=committed.__getitem__)
                    found["commit"] = (first, (committed[first] - kill_ms) / 1000)
            return len(found) == 2

        poll(check, "(1) new MASTERs and (2) a commit of a moved table")
        return found["masters"], found["commit"]


# --- the report ---------------------------------------------------------------------------------


def _spread(values: list[float], unit: str) -> str:
    if not values:
        return "-"
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{low:.2f} / {mid:.2f} / {high:.2f}{unit}"


def _ratio(seconds: float, figures: Figures) -> float:
    return seconds * 1000 / figures.timeout_ms


def report(runs: list[Figures], builds_since: datetime) -> None:
    print()
    print(
        f"{'run':>3} {'killed controller':<27} {'CL':<3} {'moved/kept':>10} {'T s':>5} "
        f"{'expiry s':>8} {'(1) s':>6} {'(1)/T':>6} {'(2) s':>6} {'(2)/T':>6}  first commit"
    )
    for f in runs:
        t = f.timeout_ms / 1000
        expiry = f"{f.expiry_s:8.2f}" if f.expiry_s is not None else f"{'-':>8}"
        print(
            f"{f.run:>3} {f.victim:<27} {'yes' if f.cluster_leader else 'no':<3} "
            f"{f'{len(f.moved)}/{f.stayed}':>10} {t:5.1f} {expiry} {f.masters_s:6.2f} "
            f"{f.masters_s / t:6.2f} {f.commit_s:6.2f} {f.commit_s / t:6.2f}  {f.committed}"
        )
    print(
        "CL: the killed controller was also the cluster leader; moved/kept: tables it led / did "
        "not lead;\nT: the session timeout a new client negotiated in that run; expiry: kill -> "
        "ZooKeeper expired the\nkilled session (its log; ZooKeeper checks expiries once a "
        "tickTime, so up to T + tickTime)."
    )
    print()
    print("min / median / max over the runs:")
    print(f"  session timeout T (negotiated) {_spread([f.timeout_ms / 1000 for f in runs], ' s')}")
    victim_t = [f.victim_timeout_ms / 1000 for f in runs if f.victim_timeout_ms is not None]
    print(f"  killed session's timeout (ZooKeeper's expiry log) {_spread(victim_t, ' s')}")
    print(f"  kill -> session expired {_spread([f.expiry_s for f in runs if f.expiry_s], ' s')}")
    ones = [f.masters_s for f in runs]
    twos = [f.commit_s for f in runs]
    print(f"  (1) kill -> new MASTERs  {_spread(ones, ' s')}")
    print(f"      as multiples of T    {_spread([_ratio(f.masters_s, f) for f in runs], 'x')}")
    print(f"  (2) kill -> first commit {_spread(twos, ' s')}")
    print(f"      as multiples of T    {_spread([_ratio(f.commit_s, f) for f in runs], 'x')}")
    print(f"  (2) - (1)                {_spread([f.commit_s - f.masters_s for f in runs], ' s')}")
    back = [f.rebalanced_s for f in runs if f.rebalanced_s is not None]
    print(f"  restart -> 8/8/8 again   {_spread(back, ' s')}")
    durations = [
        ms / 1000
        for ms in Job.objects.filter(
            kind=Job.Kind.BUILD, status=Job.Status.SUCCEEDED, finished_at__gte=builds_since
        ).values_list("duration_ms", flat=True)
        if ms is not None
    ]
    print(f"  Spark builds during the runs: {len(durations)}, {_spread(durations, ' s')} each")


def main() -> int:
    started = time.monotonic()
    print(f"failover run {RUN_DIR.name}: {ARGS.runs} runs, {ARGS.tables} tables")
    print(f"command: {' '.join([sys.executable, *sys.argv])}")
    stack = FailoverStack(RUN_DIR, ZK_PORT, REDIS_PORT, TOPIC, ARGS.rate, ARGS.partitions)
    bench = Bench(stack)
    runs: list[Figures] = []
    ok = False
    try:
        bench.set_up()
        conf = zookeeper_conf(ZK_PORT)
        print(
            f"ZooKeeper tickTime {conf.get('tickTime')} ms: session timeouts within "
            f"[{conf.get('minSessionTimeout')}, {conf.get('maxSessionTimeout')}] ms; every "
            f"process asks for ZK_TIMEOUT_SECONDS={settings.ZK_TIMEOUT_SECONDS:g} s; producer "
            f"{ARGS.rate:g} rows/s over {ARGS.partitions} partition(s); "
            f"LEAD_CONTROLLER_REBALANCE_DELAY_MS=0"
        )
        measured_since = datetime.now(UTC)
        for number in range(1, ARGS.runs + 1):
            runs.append(bench.run(number))
        report(runs, measured_since)
        ok = True
    except TimeoutError as exc:
        print(f"FAILED: {exc}")
        if runs:
            report(runs, datetime.now(UTC))
    finally:
        producer = stack.procs.get("producer")
        if producer is not None and producer.poll() is None:
            producer.send_signal(signal.SIGINT)
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
