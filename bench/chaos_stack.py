"""The processes of `bench/chaos.py`, kept running like supervisord keeps `make demo` running, and
the health check that defines "repaired".

`ChaosStack` is `tests.e2e.outage_stack.OutageStack` (a private ZooKeeper and Redis from
scripts/services.sh, a controller and three servers as processes) plus what `make demo` runs
beside them: a default-queue Celery worker (2 processes: the healer task, the mirror sync), the
spark-queue worker (1 process: segment builds), Celery beat and a producer. Every process logs to
`<run dir>/logs/chaos-<name>.log`. Django must be set up (with the private stores' addresses)
before this module is imported.

Restart policy (`Supervisor`, a thread): a managed process that is not running is started again
after a delay: the one the bench chose when it killed it on purpose (`expect_exit`), else a
random 0.5-3 s. An exit nobody asked for is recorded in `unexpected` (a finding, reported at the
end). `hold(name)` keeps a process down (the producer at the end).

`health(...)` lists why the cluster is not healthy; an empty list is healthy (chaos.HEALTHY).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from console.celery import app
from tables.cluster import context
from tables.controller.llc import MAX_SEGMENT_COMPLETION_TIME_KEY
from tables.controller.resources import ResourceManager
from tables.domain.idealstate import InstanceState, segments_of_partition
from tables.domain.znrecord import ZNRecord
from tables.redisconn import get_redis
from tables.streams.redis_streams import FIRST_OFFSET, RedisTopicAdmin
from tables.zk.records import read_record, update_record
from tests import envdefaults
from tests.cluster_fixtures import load
from tests.e2e.outage_stack import OutageStack
from tests.ingest_cluster import admin_get, done_coverage, table_config

__all__ = [
    "ChaosStack",
    "Supervisor",
    "committed_up_to",
    "create_table",
    "health",
    "latest_offsets",
    "set_guard",
]

CELERY = [sys.executable, "-m", "celery", "-A", "console"]
WORKER_FLAGS = ["--loglevel", "INFO", "--without-mingle", "--without-gossip"]
SCHEMA = envdefaults.PINOT_FIXTURES / "githubEvents_schema.json"


class ChaosStack(OutageStack):
    """OutageStack on given ports and folders, with a default worker, beat and a producer."""

    def __init__(
        self, run_dir: Path, zk_port: int, redis_port: int, topic: str, rate: float
    ) -> None:
        super().__init__(run_dir)
        self.zk_port, self.redis_port = zk_port, redis_port
        self.zk_hosts = f"127.0.0.1:{zk_port}"
        self.redis_url = f"redis://127.0.0.1:{redis_port}/0"
        self.log_dir, self.log_prefix = run_dir / "logs", "chaos"
        self.topic, self.rate, self.partitions = topic, rate, 4
        self.host = f"chaos-{os.getpid()}"
        self.worker_names = [f"worker@{self.host}", f"spark@{self.host}"]
        self.celery_names = {"worker", "spark", "beat"}
        self.born: dict[str, float] = {}  # name -> time.time() of its latest start

    def _spawn(
        self, name: str, args: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        self.born[name] = time.time()
        return super()._spawn(name, args, env)

    # --- processes ----------------------------------------------------------------------------
    def _celery(self, name: str, args: list[str]) -> subprocess.Popen:
        """A Celery process in a session of its own (so its pool dies with it on killpg)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.born[name] = time.time()
        with (self.log_dir / f"{self.log_prefix}-{name}.log").open("ab") as log:
            proc = subprocess.Popen(
                [*CELERY, *args],
                cwd=envdefaults.ROOT,
                env=self._env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs[name] = proc
        return proc

    def start_spark_worker(self) -> None:
        args = ["worker", "-Q", "spark", "-c", "1", "-n", f"spark@{self.host}", *WORKER_FLAGS]
        self._celery("spark", args)

    def start_default_worker(self) -> None:
        args = ["worker", "-Q", "celery", "-c", "2", "-n", f"worker@{self.host}", *WORKER_FLAGS]
        self._celery("worker", args)

    def start_beat(self) -> None:
        schedule, pidfile = self.var_dir / "celerybeat-schedule", self.var_dir / "celerybeat.pid"
        pidfile.unlink(missing_ok=True)  # a killed beat leaves its pid file behind
        args = ["beat", "--loglevel", "INFO", "--schedule", str(schedule)]
        self._celery("beat", [*args, "--pidfile", str(pidfile)])

    def start_producer(self, topic: str = "", count: int = 0, rate: int = 0) -> subprocess.Popen:
        """`manage.py produce` over all current partitions at the bench rate, until SIGINT (the
        arguments of OutageStack.start_producer are ignored)."""
        args = ["produce", "--topic", self.topic, "--partitions", str(self.partitions)]
        args += ["--rate", str(self.rate), "--schema", str(SCHEMA)]
        return self._spawn("producer", args)

    def starters(self) -> dict[str, Callable[[], object]]:
        out: dict[str, Callable[[], object]] = {
            "controller": self.start_controller,
            "spark": self.start_spark_worker,
            "worker": self.start_default_worker,
            "beat": self.start_beat,
            "producer": self.start_producer,
        }
        for index in range(3):
            out[f"server{index}"] = lambda index=index: self.start_server(index)
        return out

    def start(self) -> None:
        self._services("start")
        self.start_spark_worker()
        self.start_default_worker()
        self.start_beat()
        self.start_controller()
        for index in range(3):
            self.start_server(index)

    def kill_hard(self, name: str) -> None:
        """kill -9: a Celery process with its whole session (pool, Spark JVM), others alone."""
        proc = self.procs[name]
        if proc.poll() is not None:
            return
        if name in self.celery_names:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        proc.wait(timeout=30)

    def pool_pids(self, name: str) -> list[int]:
        """The pool processes of Celery worker `name` (its main process's children)."""
        tasks = Path(f"/proc/{self.procs[name].pid}/task")
        try:
            return sorted(
                int(pid)
                for task in tasks.iterdir()
                for pid in (task / "children").read_text().split()
            )
        except OSError:
            return []

    def signal_server(self, index: int, signum: int) -> None:
        proc = self.procs[f"server{index}"]
        if proc.poll() is None:
            proc.send_signal(signum)

    def stop(self) -> dict[str, int]:
        for name, proc in self.procs.items():  # a frozen server would not hear SIGTERM
            if name.startswith("server") and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
        for name in ("beat", "worker"):
            proc = self.procs.pop(name, None)
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        return super().stop()


@dataclass
class Exit:
    name: str
    code: int | None
    at: float  # time.monotonic()


class Supervisor:
    """Restarts managed processes that stopped running (see the module docstring)."""

    def __init__(self, stack: ChaosStack, rng: random.Random, say: Callable[[str], None]) -> None:
        self.stack, self.rng, self.say = stack, rng, say
        self.starters = stack.starters()
        self.lock = threading.Lock()
        self.delays: dict[str, float] = {}  # expected exits: restart delay
        self.due: dict[str, float] = {}  # name -> monotonic time of its restart
        self.held: set[str] = set()
        self.unexpected: list[Exit] = []
        self.exits: list[Exit] = []
        self.restarts = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def expect_exit(self, name: str, delay: float) -> None:
        """`name` is about to die on purpose: start it again `delay` s after it exits."""
        with self.lock:
            self.delays[name] = delay

    def forget(self, name: str) -> None:
        """The exit `expect_exit` announced did not happen after all."""
        with self.lock:
            self.delays.pop(name, None)

    def hold(self, name: str) -> None:
        with self.lock:
            self.held.add(name)
            self.due.pop(name, None)

    def release(self, name: str) -> None:
        with self.lock:
            self.held.discard(name)

    def down(self) -> list[str]:
        return [
            n for n, p in self.stack.procs.items() if n in self.starters and p.poll() is not None
        ]

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            with self.lock:
                self._tick(time.monotonic())

    def _tick(self, now: float) -> None:
        for name, proc in list(self.stack.procs.items()):
            if name not in self.starters or name in self.held or proc.poll() is None:
                continue
            if name not in self.due:
                expected = name in self.delays
                delay = self.delays.pop(name) if expected else self.rng.uniform(0.5, 3.0)
                event = Exit(name, proc.returncode, now)
                self.exits.append(event)
                if not expected:
                    self.unexpected.append(event)
                    self.say(f"    ! {name} exited on its own (code {proc.returncode})")
                self.due[name] = now + delay
            elif now >= self.due[name]:
                del self.due[name]
                self.starters[name]()
                self.restarts += 1


# --- health ------------------------------------------------------------------------------------


def _record(ctx: context.ClusterContext, path: str) -> ZNRecord:
    found = read_record(ctx.client, path)
    return found.record if found is not None else ZNRecord(id=path.rsplit("/", 1)[-1])


def _server_items(stack: ChaosStack, table: str) -> dict[str, dict[str, dict]]:
    """instance id -> segment -> its debug item, for the servers that answer."""
    out: dict[str, dict[str, dict]] = {}
    for index in range(3):
        name = f"server{index}"
        if stack.procs[name].poll() is not None:
            continue
        try:
            items = admin_get(stack.server_ports[name], f"/debug/tables/{table}")
        except (OSError, ValueError):
            continue
        out[stack.server_id(index)] = {i["segmentName"]: i for i in items or []}
    return out


def _partition_problems(
    p: int, ideal: ZNRecord, view: dict, live: set[str], items: dict, target: int, replication: int
) -> list[str]:
    """Exactly one CONSUMING segment, `replication` replicas all CONSUMING in the IdealState, each
    live, CONSUMING in the ExternalView and consumed up to `target`."""
    consuming = [
        s
        for s in segments_of_partition(ideal, p)
        if InstanceState.CONSUMING in ideal.map_fields[s].values()
    ]
    if len(consuming) != 1:
        return [f"p{p}: {len(consuming)} CONSUMING segments in the IdealState"]
    segment = consuming[0]
    replicas = ideal.map_fields[segment]
    if sorted(set(replicas.values())) != [InstanceState.CONSUMING] or len(replicas) != replication:
        return [f"p{p}: {segment} IdealState replicas {replicas}"]
    out = []
    for instance in replicas:
        seen = view.get(segment, {}).get(instance)
        item = items.get(instance, {}).get(segment)
        if instance not in live:
            out.append(f"p{p}: {instance} of {segment} not live")
        elif seen != InstanceState.CONSUMING:
            out.append(f"p{p}: {segment} on {instance} is {seen} in the ExternalView")
        elif item is None or int(item.get("nextOffset") or 0) < target:
            at = None if item is None else item.get("nextOffset")
            out.append(f"p{p}: {segment} on {instance} at offset {at}, not yet {target}")
    return out


def _not_live(stack: ChaosStack, ctx: context.ClusterContext) -> list[str]:
    """The controller and servers whose live instance is missing or left by a process before the
    running one (an ephemeral node outlives a killed process by the session timeout)."""
    out = []
    ids = {f"server{i}": stack.server_id(i) for i in range(3)}
    ids["controller"] = stack.controller_id
    for name, instance in ids.items():
        stat = ctx.client.exists(ctx.paths.liveinstance(instance))
        if stat is None:
            out.append(f"{instance} not live in ZooKeeper")
        elif getattr(stat, "ctime", stat.mtime) < stack.born[name] * 1000:
            out.append(f"{instance}: its live instance is the killed process's, not yet its own")
    return out


def health(
    stack: ChaosStack,
    supervisor: Supervisor,
    table: str,
    targets: dict[int, int],
    replication: int = 2,
    ping: bool = True,
) -> list[str]:
    """Why the cluster is not healthy yet (empty: healthy). See chaos.HEALTHY for the words."""
    down = supervisor.down()
    if down:
        return [f"not running: {', '.join(sorted(down))}"]
    try:
        ctx = context.current()
        stale = _not_live(stack, ctx)
        if stale:
            return stale
        live = set(ctx.client.get_children(ctx.paths.liveinstances))
        partitions = RedisTopicAdmin(get_redis(stack.redis_url)).partition_count(stack.topic)
        ideal = _record(ctx, ctx.paths.idealstate(table))
        view = _record(ctx, ctx.paths.externalview(table)).map_fields
    except Exception as exc:  # a store still frozen or reconnecting
        return [f"cannot read the cluster: {type(exc).__name__}: {exc}"]
    problems = [
        f"{segment} on {instance}: ERROR in the ExternalView"
        for segment, replicas in view.items()
        for instance, state in replicas.items()
        if state == "ERROR"
    ]
    behind = [
        f"{segment} on {instance}: {view.get(segment, {}).get(instance)} in the ExternalView, "
        f"{state} in the IdealState"
        for segment, replicas in ideal.map_fields.items()
        for instance, state in replicas.items()
        if state in (InstanceState.ONLINE, InstanceState.CONSUMING)
        and view.get(segment, {}).get(instance) != state
    ]
    problems += behind[:3] + ([f"... {len(behind) - 3} more"] if len(behind) > 3 else [])
    items = _server_items(stack, table)
    for p in range(partitions):
        target = targets.get(p, 2)
        problems += _partition_problems(p, ideal, view, live, items, target, replication)
    if problems or not ping:
        return problems
    replies = app.control.ping(destination=stack.worker_names, timeout=1.0)
    answered = {name for reply in replies for name in reply}
    missing = set(stack.worker_names) - answered
    return [f"celery worker not answering: {', '.join(sorted(missing))}"] if missing else []


# --- the table and the stream -------------------------------------------------------------------


def set_guard(guard_ms: int) -> None:
    """The cluster config's `max.segment.completion.time.millis` (the healer's guard)."""
    ctx = context.current()

    def shorter(record: ZNRecord) -> ZNRecord:
        out = record.copy()
        out.simple_fields[MAX_SEGMENT_COMPLETION_TIME_KEY] = str(guard_ms)
        return out

    update_record(ctx.client, ctx.paths.cluster_config, shorter)


def create_table(stack: ChaosStack, flush_rows: int) -> None:
    """The topic (4 partitions) and table `<topic>_REALTIME`: the githubEvents schema, replication
    2, segments of `flush_rows` rows (or 60 s)."""
    RedisTopicAdmin(get_redis(stack.redis_url)).create_topic(stack.topic, stack.partitions)
    schema = load("githubEvents_schema.json")
    schema["schemaName"] = stack.topic
    stream = {
        "realtime.segment.flush.threshold.segment.rows": str(flush_rows),
        "realtime.segment.flush.threshold.time": "60s",
    }
    config = table_config(stack.topic, **stream)
    config["tableName"] = stack.topic
    config["segmentsConfig"].pop("schemaName", None)
    manager = ResourceManager(context.current())
    manager.add_schema(schema)
    manager.add_table(config)


def latest_offsets(stack: ChaosStack) -> dict[int, int]:
    """Each stream partition's latest offset (the next one to be produced)."""
    provider = RedisTopicAdmin(get_redis(stack.redis_url)).provider(stack.topic)
    return {p: provider.latest_offset(p) for p in range(provider.partition_count())}


def committed_up_to(table: str, latest: dict[int, int]) -> list[int]:
    """The partitions whose DONE segments do not reach `latest` yet."""
    coverage = done_coverage(table)
    return [p for p, end in latest.items() if coverage.get(p, (0, FIRST_OFFSET))[1] < end]
