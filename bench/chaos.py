"""Chaos: random faults, one at a time, on a real ingestion cluster; each fault's time to repair,
then the exactly-once ledger over every produced row.

The stack (`bench/chaos_stack.py`), all real processes on a private ZooKeeper and Redis (free
ports, state under the run's folder var/bench/chaos-<time>/, its output in chaos.log there): a
controller, three servers, a default-queue Celery worker (the healer task, the mirror sync and its
healer triggers), the spark-queue worker (segment builds), Celery beat and a producer at `--rate`
rows/s. Killed processes are started again by the bench after a short random delay, as
supervisord would. One table of 4 partitions (partitions may be added), replication 2, segments of
`--flush-rows` rows; cluster config `max.segment.completion.time.millis` = `--guard-ms`, the
healer on beat every `--heal-period`, FAULT_INJECTION_DIR set for every process.

Faults (each kind once, the rest shared out by weight, in a random order; `--seed` makes the
plan reproducible): kill -9 of a server, of the controller, of the controller at the commit points
after step 1 and after step 2 (fault injection: it exits with 86 there), of the Spark worker's pool
process (during a build when one starts within 60 s), of the default Celery worker; SIGSTOP of
ZooKeeper or Redis for 10-20 s; a retention trim (the servers holding one partition's consuming
replicas stopped or killed, the partition XTRIMmed to its latest offset, past theirs, then they
come back); a partition added (the producer restarted over all partitions); a consumer failing
permanently (fault injection).

After the faults (and once `--rows` rows were produced) the producer stops, the bench waits until
every produced row is in a DONE segment, runs `verify_ledger --rows` and prints rows produced,
committed and lost (declared by the product, each range inside a trim the bench made), duplicated
rows, and per fault kind the count, median and max time to repair. Exit status 1 on any ledger
problem, an unrepaired fault or a loss the bench did not cause.

    .venv/bin/python bench/chaos.py --quick                 # one fault of each kind, 20,000 rows
    .venv/bin/python bench/chaos.py [--faults 50] [--rows 200000] [--seed N] [--rate 400]

Needs no running services (its ZooKeeper and Redis are its own), only ../shared/fixtures/pinot.
Uses TEST_SLOT 13 for its settings unless TEST_SLOT is set.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import random
import shutil
import signal
import socket
import statistics
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TEST_SLOT", "13")
os.chdir(ROOT)

HEALTHY = (
    "repaired = every managed process running (restarted by the bench where it was killed); the "
    "controller and the 3 servers live in ZooKeeper; every stream partition has exactly one "
    "CONSUMING segment in the IdealState, with 2 replicas, both CONSUMING in the ExternalView on "
    "live servers; every other IdealState replica ONLINE in the ExternalView too, none ERROR; both "
    "replicas of every partition report consuming past the partition's latest offset at the "
    "injection (one row produced after it, consumed); both Celery workers answer a ping. Time to "
    "repair runs from the injection (the kill, the SIGSTOP, the trim, the controller's exit at "
    "its commit point, the consumer's failure) to the first poll (every 0.5 s) that sees all this."
)
KINDS = {  # kind -> weight of the random draws after the first round
    "server_kill": 3,
    "controller_kill": 2,
    "controller_after_step1": 2,
    "controller_after_step2": 2,
    "spark_pool_kill": 2,
    "worker_kill": 2,
    "zookeeper_stop": 1,
    "redis_stop": 1,
    "retention_trim": 2,
    "partition_added": 1,
    "consumer_fails": 2,
}


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=50)
    parser.add_argument("--rows", type=int, default=200_000, help="produce at least this many")
    parser.add_argument("--quick", action="store_true", help="one fault per kind, 20,000 rows")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--rate", type=float, default=400.0, help="producer rows/s")
    parser.add_argument("--flush-rows", type=int, default=4000, help="rows per segment")
    parser.add_argument("--guard-ms", type=int, default=10_000, help="max.segment.completion...")
    parser.add_argument("--heal-period", default="15s", help="healer period on beat")
    parser.add_argument("--deadline", type=float, default=300.0, help="repair deadline, s")
    parser.add_argument("--max-partitions", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the stores' data at the end")
    args = parser.parse_args()
    if args.quick:
        args.faults, args.rows = len(KINDS), 20_000
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1_000_000)
    return args


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


ARGS = _args()
import tests.envdefaults  # noqa: E402, F401 - test settings, slot 13 (before Django starts)

RUN_DIR = ROOT / "var" / "bench" / f"chaos-{datetime.now():%Y%m%d-%H%M%S}"
(RUN_DIR / "faults").mkdir(parents=True)
ZK_PORT, REDIS_PORT = _free_port(), _free_port()
os.environ.update(
    {
        "DATABASE_TEST_NAME": str(RUN_DIR / "chaos.sqlite3"),
        "DATABASE_URL": f"sqlite:///{RUN_DIR / 'chaos.sqlite3'}",
        "DEEP_STORE_URI": (RUN_DIR / "deepstore").as_uri(),
        "ZK_HOSTS": f"127.0.0.1:{ZK_PORT}",
        "REDIS_URL": f"redis://127.0.0.1:{REDIS_PORT}/0",
        "FAULT_INJECTION_DIR": str(RUN_DIR / "faults"),
        "MIRROR_SYNC_ON_BEAT": "true",  # tests/envdefaults turns these two off
        "HEALING_TRIGGER_FROM_MIRROR": "true",
        "REALTIME_SEGMENT_VALIDATION_FREQUENCY_PERIOD": ARGS.heal_period,
        "REALTIME_SEGMENT_VALIDATION_INITIAL_DELAY_SECONDS": "5",
        "STATUS_CHECKER_FREQUENCY_PERIOD": "30s",
    }
)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

import django  # noqa: E402

django.setup()
logging.getLogger("kazoo").setLevel(logging.ERROR)  # the bench's own client rides the outages

from django.core.management import call_command  # noqa: E402
from django.core.management.base import CommandError  # noqa: E402

from bench.chaos_stack import (  # noqa: E402
    ChaosStack,
    Supervisor,
    committed_up_to,
    create_table,
    health,
    latest_offsets,
    set_guard,
)
from tables.cluster import context  # noqa: E402
from tables.cluster.reads import ClusterReader  # noqa: E402
from tables.controller.resources import ResourceManager  # noqa: E402
from tables.domain.idealstate import InstanceState, segments_of_partition  # noqa: E402
from tables.domain.segment_metadata import SegmentStatus  # noqa: E402
from tables.ledger import declared_losses, declared_skips, segment_ranges  # noqa: E402
from tables.models import DurableCounter, HealingRun, Job  # noqa: E402
from tables.redisconn import get_redis  # noqa: E402
from tables.streams.redis_streams import RedisTopicAdmin  # noqa: E402
from tables.zk.records import read_record  # noqa: E402
from tests.ingest_cluster import admin_get  # noqa: E402

TOPIC = "chaos"
TABLE = "chaos_REALTIME"
Health = Callable[[dict[int, int]], list[str]]


@dataclass
class Fault:
    number: int
    kind: str
    detail: str = ""
    injected: float | None = None  # time.monotonic() of the injection
    wall: float = 0.0  # time.time() of the injection
    ttr: float | None = None
    targets: dict[int, int] = field(default_factory=dict)  # partition -> offset to consume to
    reasons: list[str] = field(default_factory=list)


class FaultRun:
    """The run: set-up, the faults one at a time, the end (see the module docstring)."""

    def __init__(self, stack: ChaosStack, supervisor: Supervisor, rng: random.Random) -> None:
        self.stack, self.supervisor, self.rng = stack, supervisor, rng
        self.admin = RedisTopicAdmin(get_redis(stack.redis_url))
        self.started = time.monotonic()
        self.faults: list[Fault] = []
        self.trims: dict[int, int] = {}  # partition -> the highest offset the bench trimmed to
        self.fault_dir = Path(os.environ["FAULT_INJECTION_DIR"])

    def say(self, text: str) -> None:
        print(f"{time.monotonic() - self.started:8.1f}s {text}", flush=True)

    # --- set-up -------------------------------------------------------------------------------
    def set_up(self, check: Health) -> None:
        call_command("migrate", verbosity=0)
        self.stack._services("start")
        call_command("init_cluster", verbosity=0)
        set_guard(ARGS.guard_ms)
        self.stack.start()
        self.supervisor.start()
        _wait(lambda: len(_tagged()) == 3, 120, "3 servers tagged")
        create_table(self.stack, ARGS.flush_rows)
        self.stack.start_producer()
        self.say(f"stack up; producing {ARGS.rate:g} rows/s over 4 partitions")
        _wait(lambda: _done_segments() > 0, 300, "a first DONE segment (Spark's JVM starts)")
        targets = self.targets()
        _wait(lambda: not check(targets), 300, "a healthy cluster before the first fault")
        self.say(f"healthy; first segments committed ({_done_segments()} DONE)")

    def targets(self) -> dict[int, int]:
        return {p: offset + 1 for p, offset in latest_offsets(self.stack).items()}

    # --- the faults ---------------------------------------------------------------------------
    def plan(self) -> list[str]:
        """Each kind once (while faults last), the rest shared out by KINDS' weights (largest
        remainders; at most `--max-partitions` partitions in all), in a shuffled order."""
        kinds = list(KINDS)
        self.rng.shuffle(kinds)
        counts = dict.fromkeys(kinds[: ARGS.faults], 1)
        rest = ARGS.faults - len(counts)
        cap = {"partition_added": max(0, ARGS.max_partitions - 4)}
        weights = {k: KINDS[k] for k in kinds if counts.get(k, 0) < cap.get(k, ARGS.faults)}
        shares = {k: rest * w / sum(weights.values()) for k, w in weights.items()} if rest else {}
        for kind, share in shares.items():
            counts[kind] = counts.get(kind, 0) + int(share)
        by_remainder = sorted(shares, key=lambda k: shares[k] - int(shares[k]), reverse=True)
        for kind in by_remainder[: ARGS.faults - sum(counts.values())]:
            counts[kind] += 1
        for kind, most in cap.items():  # over its cap: the excess goes to server kills
            extra = max(0, counts.get(kind, 0) - most)
            counts[kind] = counts.get(kind, 0) - extra
            counts["server_kill"] = counts.get("server_kill", 0) + extra
        plan = [kind for kind, count in counts.items() for _ in range(count)]
        self.rng.shuffle(plan)
        return plan

    def inject_all(self, check: Health) -> bool:
        plan = self.plan()
        self.say(f"plan: {', '.join(plan)}")
        for number, kind in enumerate(plan, 1):
            fault = Fault(number, kind)
            self.faults.append(fault)
            getattr(self, f"_{kind}")(fault)
            if fault.injected is None:
                self.say(f"#{number:02d} {kind}: NOT INJECTED ({fault.detail})")
                continue
            if not self._await_repair(fault, fault.targets, check):
                self.say(f"#{number:02d} {kind}: NOT REPAIRED within {ARGS.deadline:g} s:")
                for reason in fault.reasons[:12]:
                    print(f"          {reason}")
                return False
            self.say(f"#{number:02d} {kind}: {fault.detail}; repaired in {fault.ttr:.1f} s")
            for line in _healer_actions(fault.wall):
                print(f"          healer {line}")
            time.sleep(self.rng.uniform(1.0, 4.0))  # the cluster runs unharmed for a moment
        return True

    def _await_repair(self, fault: Fault, targets: dict[int, int], check: Health) -> bool:
        deadline = fault.injected + ARGS.deadline
        report_at = fault.injected + 30
        while time.monotonic() < deadline:
            reasons = check(targets)
            if not reasons:
                fault.ttr = time.monotonic() - fault.injected
                return True
            fault.reasons = reasons
            if time.monotonic() >= report_at:  # what the repair still waits for
                report_at += 30
                self.say(f"    #{fault.number:02d} waiting: {'; '.join(reasons[:2])}")
            time.sleep(0.5)
        return False

    def _inject(self, fault: Fault, detail: str, targets: dict[int, int] | None = None) -> None:
        """The fault happened now; repaired means consumed past the offsets produced by now
        (`targets`: read just before a store is frozen, when it cannot be read after)."""
        fault.targets = targets or self.targets()
        fault.injected, fault.wall, fault.detail = time.monotonic(), time.time(), detail

    def _kill(self, fault: Fault, name: str) -> None:
        delay = self.rng.uniform(1.0, 5.0)
        self.supervisor.expect_exit(name, delay)
        self.stack.kill_hard(name)
        self._inject(fault, f"{name} killed -9, restarted after {delay:.1f} s")

    def _server_kill(self, fault: Fault) -> None:
        self._kill(fault, f"server{self.rng.randrange(3)}")

    def _controller_kill(self, fault: Fault) -> None:
        self._kill(fault, "controller")

    def _worker_kill(self, fault: Fault) -> None:
        self._kill(fault, "worker")

    def _controller_after_step1(self, fault: Fault) -> None:
        self._commit_point(fault, "controller.commit.after_step1")

    def _controller_after_step2(self, fault: Fault) -> None:
        self._commit_point(fault, "controller.commit.after_step2")

    def _commit_point(self, fault: Fault, point: str) -> None:
        delay = self.rng.uniform(1.0, 5.0)
        self.supervisor.expect_exit("controller", delay)
        armed = self.fault_dir / point
        armed.write_text("chaos")
        proc = self.stack.procs["controller"]
        if not _poll(lambda: proc.poll() is not None, 120):
            armed.unlink(missing_ok=True)
            self.supervisor.forget("controller")
            fault.detail = f"{point} armed, no commit reached it in 120 s"
            return
        self._inject(
            fault, f"controller exited {proc.returncode} at {point}; restarted after {delay:.1f} s"
        )

    def _spark_pool_kill(self, fault: Fault) -> None:
        building = _poll(_running_build, 60)  # commits come in bursts: wait for one
        pids = self.stack.pool_pids("spark")
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        during = f"during the build of {building}" if building else "while idle"
        self._inject(fault, f"spark pool process {pids} killed -9 {during}")

    def _freeze(self, fault: Fault, service: str) -> None:
        hold = self.rng.uniform(10.0, 20.0)
        targets = self.targets()
        self.stack.freeze(service)
        self._inject(fault, f"{service} SIGSTOPped for {hold:.1f} s", targets)
        try:
            time.sleep(hold)  # the outage's length
        finally:
            self.stack.thaw(service)

    def _zookeeper_stop(self, fault: Fault) -> None:
        self._freeze(fault, "zookeeper")

    def _redis_stop(self, fault: Fault) -> None:
        self._freeze(fault, "redis")

    def _consumer_fails(self, fault: Fault) -> None:
        index = self.rng.randrange(3)
        point = self.fault_dir / f"server.{self.stack.server_id(index)}.consumer_fails"
        point.write_text("chaos")
        if not _poll(lambda: not point.exists(), 60):
            point.unlink(missing_ok=True)
            fault.detail = f"server{index}: no consumer fetched in 60 s"
            return
        self._inject(fault, f"a consumer of server{index} failed (fault injection)")

    def _partition_added(self, fault: Fault) -> None:
        count = self.stack.partitions + 1
        self.admin.add_partitions(TOPIC, count)
        self._inject(fault, f"partition {count - 1} added; producer restarted over {count}")
        fault.targets[count - 1] = 2  # its first row consumed
        self.stack.partitions = count
        self.supervisor.expect_exit("producer", 0.2)
        self.stack.procs["producer"].send_signal(signal.SIGINT)

    def _retention_trim(self, fault: Fault) -> None:
        p = self.rng.randrange(self.stack.partitions)
        replicas = _consuming_replicas(p)
        indexes = [i for i in range(3) if self.stack.server_id(i) in replicas]
        kill = self.rng.random() < 0.5
        hold = self.rng.uniform(2.0, 6.0)
        names = [f"server{i}" for i in indexes]
        positions = [
            _next_offset(self.stack, i, replicas[self.stack.server_id(i)]) for i in indexes
        ]
        for name in names:
            if kill:
                self.supervisor.expect_exit(name, 0.5)
                self.supervisor.hold(name)
                self.stack.kill_hard(name)
            else:
                self.stack.procs[name].send_signal(signal.SIGSTOP)
        self._inject(fault, "")
        try:
            known = max([x for x in positions if x is not None], default=0)
            _poll(lambda: latest_offsets(self.stack)[p] > known + 100, 20)
            trim_to = latest_offsets(self.stack)[p]
            self.admin.trim_before(TOPIC, p, trim_to)
            self.trims[p] = max(self.trims.get(p, 0), trim_to)
            time.sleep(hold)  # the replicas stay away a little longer
        finally:
            for name in names:
                if kill:
                    self.supervisor.release(name)
                else:
                    self.stack.procs[name].send_signal(signal.SIGCONT)
        how = "killed, restarted" if kill else "SIGSTOPped, resumed"
        fault.detail = (
            f"p{p} trimmed to {trim_to} past {', '.join(names)} at {positions} ({how} "
            f"after {hold:.1f} s)"
        )

    # --- the end ------------------------------------------------------------------------------
    def finish(self) -> bool:
        produced = _poll(lambda: _produced(self.stack) >= ARGS.rows, 2 * ARGS.rows / ARGS.rate)
        self.supervisor.hold("producer")
        self.stack.procs["producer"].send_signal(signal.SIGINT)
        self.stack.procs["producer"].wait(timeout=60)
        latest = latest_offsets(self.stack)
        self.say(f"producer stopped: {_produced(self.stack)} rows over {len(latest)} partitions")
        if not produced:
            self.say(f"fewer than --rows {ARGS.rows} rows were produced")
        if not _poll(lambda: not committed_up_to(TABLE, latest), 600, interval=2.0):
            self.say(f"NOT COMMITTED in 600 s: partitions {committed_up_to(TABLE, latest)}")
            return False
        self.say("every produced row is in a DONE segment; verify_ledger --rows:")
        out = io.StringIO()
        try:
            call_command("verify_ledger", TABLE, "--rows", stdout=out)
            ledger_ok, failure = True, ""
        except CommandError as exc:
            ledger_ok, failure = False, str(exc)
        lines = out.getvalue().splitlines()
        for line in lines[:60]:
            print(f"  {line}")
        if failure:
            print(f"  verify_ledger FAILED: {failure}")
        return self.report(latest, lines) and ledger_ok and bool(produced)

    def report(self, latest: dict[int, int], ledger_lines: list[str]) -> bool:
        ranges, metadata, _ = segment_ranges(ClusterReader(context.current()), TABLE)
        losses = declared_losses(ranges, metadata)[0] + declared_skips(ranges, metadata)
        produced = sum(offset - 1 for offset in latest.values())
        done = [r for r in ranges if r.status == SegmentStatus.DONE]
        committed = sum(metadata[r.segment].total_docs or 0 for r in done)
        lost = sum(r.end - r.start for r in losses)
        duplicated = sum("duplicat" in line for line in ledger_lines if line.startswith("PROBLEM"))
        stray = [r for r in losses if r.end > self.trims.get(r.partition, 0)]
        counters = {c.table: c.value for c in DurableCounter.objects.filter(name=LOSS_COUNTER)}
        print(f"rows produced:   {produced}")
        print(f"rows committed:  {committed} in {len(done)} DONE segments")
        print(f"rows lost:       {lost} (declared by the product; {LOSS_COUNTER} {counters})")
        for r in sorted(losses, key=lambda r: (r.partition, r.start)):
            inside = "inside" if r.end <= self.trims.get(r.partition, 0) else "NOT inside"
            print(f"    p{r.partition} [{r.start}, {r.end}): {r.why}; {inside} a bench trim")
        print(f"    bench trims (partition: every offset below was dropped): {self.trims}")
        print(f"rows duplicated: {duplicated}")
        balanced = produced == committed + lost
        print(f"produced == committed + lost: {balanced}")
        self.fault_table()
        print(f"healer repairs (kind: by trigger): {_healer_summary()}")
        unexpected = self.supervisor.unexpected
        for event in unexpected:
            at = event.at - self.started
            print(f"unexpected exit: {event.name} (code {event.code}) at {at:.1f}s")
        return balanced and not stray and duplicated == 0

    def fault_table(self) -> None:
        repaired = [f for f in self.faults if f.ttr is not None]
        print(f"faults: {len(self.faults)} planned and run, {len(repaired)} repaired")
        print(f"  {'kind':<24}{'count':>6}{'median s':>10}{'max s':>8}  not injected/repaired")
        for kind in KINDS:
            of_kind = [f for f in self.faults if f.kind == kind]
            if not of_kind:
                continue
            times = [f.ttr for f in of_kind if f.ttr is not None]
            median = f"{statistics.median(times):10.1f}" if times else f"{'-':>10}"
            longest = f"{max(times):8.1f}" if times else f"{'-':>8}"
            missing = len(of_kind) - len(times)
            print(f"  {kind:<24}{len(of_kind):>6}{median}{longest}  {missing or ''}")


LOSS_COUNTER = "llcStreamDataLoss"


def _poll(condition: Callable[[], object], timeout: float, interval: float = 0.25) -> object:
    """`condition()`'s first truthy value within `timeout` s, else None."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() >= deadline:
            return value or None
        time.sleep(interval)


def _wait(condition: Callable[[], object], timeout: float, what: str) -> object:
    value = _poll(condition, timeout, 0.5)
    if value is None:
        raise TimeoutError(f"not true after {timeout:g} s: {what}")
    return value


def _tagged() -> list[str]:
    return ResourceManager(context.current()).tagged_instances("DefaultTenant_REALTIME")


def _done_segments() -> int:
    manager = ResourceManager(context.current())
    return sum(
        manager.segment_metadata(TABLE, s).status is SegmentStatus.DONE
        for s in manager.segment_names(TABLE)
    )


def _produced(stack: ChaosStack) -> int:
    return sum(offset - 1 for offset in latest_offsets(stack).values())


def _consuming_replicas(partition: int) -> dict[str, str]:
    """Instance -> segment, for the CONSUMING replicas of `partition` in the IdealState."""
    ctx = context.current()
    found = read_record(ctx.client, ctx.paths.idealstate(TABLE))
    out = {}
    for segment in segments_of_partition(found.record, partition) if found else []:
        for instance, state in found.record.map_fields[segment].items():
            if state == InstanceState.CONSUMING:
                out[instance] = segment
    return out


def _next_offset(stack: ChaosStack, index: int, segment: str) -> int | None:
    try:
        items = admin_get(stack.server_ports[f"server{index}"], f"/debug/tables/{TABLE}")
    except (OSError, ValueError):
        return None
    for item in items or []:
        if item["segmentName"] == segment and item.get("nextOffset"):
            return int(item["nextOffset"])
    return None


def _running_build() -> str | None:
    job = Job.objects.filter(kind=Job.Kind.BUILD, status=Job.Status.RUNNING).first()
    recent = job is not None and time.time() - job.started_at.timestamp() < 60
    return job.segment if recent else None


def _healer_actions(since: float) -> list[str]:
    """The repairs healing runs made since `since` (epoch s)."""
    moment = datetime.fromtimestamp(since - 1, UTC)
    runs = HealingRun.objects.filter(table=TABLE, started_at__gte=moment, action_count__gt=0)
    return [
        f"[{run.trigger} {run.run_id}] {action.get('kind')}: {action.get('detail')}"
        for run in runs.order_by("started_at")
        for action in run.actions
    ]


def _healer_summary() -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for run in HealingRun.objects.filter(table=TABLE, action_count__gt=0):
        for action in run.actions:
            by_trigger = out.setdefault(str(action.get("kind")), {})
            by_trigger[run.trigger] = by_trigger.get(run.trigger, 0) + 1
    return out


class Tee(io.TextIOBase):
    def __init__(self, *streams: io.TextIOBase) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
            stream.flush()
        return len(text)


def main() -> int:
    log = (RUN_DIR / "chaos.log").open("w", encoding="utf-8")
    sys.stdout = Tee(sys.__stdout__, log)
    started = time.monotonic()
    print(f"chaos run {RUN_DIR.name}: seed {ARGS.seed}, {ARGS.faults} faults, >= {ARGS.rows} rows")
    print(f"command: {' '.join([sys.executable, *sys.argv])}")
    print(textwrap.fill(HEALTHY, 100))
    stack = ChaosStack(RUN_DIR, ZK_PORT, REDIS_PORT, TOPIC, ARGS.rate)
    supervisor = Supervisor(stack, random.Random(ARGS.seed + 1), print)
    run = FaultRun(stack, supervisor, random.Random(ARGS.seed))
    ok = False

    def check(targets: dict[int, int]) -> list[str]:
        return health(stack, supervisor, TABLE, targets)

    try:
        run.set_up(check)
        ok = run.inject_all(check)
        ok = run.finish() and ok
    finally:
        supervisor.stop()
        codes = stack.stop()
        print(f"processes stopped: {codes}")
        print(f"total wall time {time.monotonic() - started:.0f} s; log {RUN_DIR / 'chaos.log'}")
        if ok and not ARGS.keep:
            for bulky in ("zookeeper", "redis", "deepstore", "servers"):
                shutil.rmtree(RUN_DIR / bulky, ignore_errors=True)
    print("RESULT:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    raise SystemExit(main())
