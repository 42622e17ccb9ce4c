"""Ingestion on a 3-member ZooKeeper ensemble under a chroot, with the leader killed mid-commit.

One stack (`EnsembleStack`: scripts/zk_ensemble.sh's 3 members on loopback ports, a private Redis,
a Spark Celery worker, a controller and three servers, all with `ZK_HOSTS=<3 members>/pinot`) and
one table fed by a producer:

- the chroot: nobody creates `/pinot` beforehand (tables/zk/client.py does), and the cluster lives
  under it, nothing else beside ZooKeeper's own node at the ensemble's root;
- a commit is held mid-protocol: once a first commit is DONE (the Spark JVM warm), the Spark
  worker's pool is SIGSTOPped while a committer waits for its build (the controller answered
  COMMIT; commit start and commit end, with their ZooKeeper writes, are still to come). The leader
  is SIGKILLed and the build let go: the surviving members elect a new leader, every process
  (controller, 3 servers, the Spark worker's pool, this test) opens a new connection to a
  surviving member, the held segment and the ones after it commit, no process exits, and
  `verify_ledger --rows` is exact.

Two partitions keep the builds few (they run one at a time on the Spark worker).
The time from the leader's death to the first commit that started after it is printed and kept in
var/test/artifacts/ensemble-failover.txt (a figure for the notes; nothing asserts on it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterator

import pytest

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.segment_metadata import SegmentStatus
from tables.redisconn import get_redis
from tables.streams.redis_streams import RedisStreamProvider, RedisTopicAdmin
from tables.zk.client import close_all, new_client
from tests import envdefaults
from tests.cluster_fixtures import load
from tests.e2e.ensemble_stack import EnsembleStack, process_tree, zk_connections
from tests.ingest_cluster import (
    done_coverage,
    find_phase,
    replicas_by_server,
    table_config,
    verify_rows,
)
from tests.poll import wait_until

pytestmark = [
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.spark,
    pytest.mark.services,
    pytest.mark.django_db(transaction=True),
]
CHROOT = "/pinot"
NAME = "ensemble"
TABLE = f"{NAME}_REALTIME"
PARTITIONS, ROWS, RATE = 2, 1_000, 125  # 8 s of production; segments end on time (5 s): 2 each
# Rows produced after the kill, so that the consuming segments then get rows and a commit begins
# after it: without them every segment with rows may already be in the held commit round (builds
# pending together are built together, and a loaded machine ends production before the kill).
LATE_ROWS = 250
PROCESSES = ("controller", "server0", "server1", "server2", "spark")
FIGURES = envdefaults.VAR_DIR / "artifacts" / "ensemble-failover.txt"


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[EnsembleStack]:
    cluster = EnsembleStack(tmp_path_factory.mktemp("ensemble"), chroot=CHROOT)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def ready(stack, settings) -> Iterator[EnsembleStack]:
    """This process on the stack's ensemble and Redis; the controller and 3 servers are live."""
    settings.ZK_HOSTS, settings.REDIS_URL = stack.zk_hosts, stack.redis_url
    close_all()
    wait_until(lambda: len(_live(stack)) >= 4, timeout=120, what="controller and 3 servers live")
    yield stack
    close_all()


def _sessions() -> dict[str, int]:
    """Each live instance's session (its znode's ephemeral owner)."""
    ctx = context.current()
    return {
        name: ctx.client.get(f"{ctx.paths.liveinstances}/{name}")[1].ephemeralOwner
        for name in ctx.client.get_children(ctx.paths.liveinstances)
    }


def _live(stack: EnsembleStack) -> list[str]:
    try:
        ctx = context.current()
        return ctx.client.get_children(ctx.paths.liveinstances)
    except Exception:
        return []


def _create_table() -> None:
    RedisTopicAdmin(get_redis(context.current().redis_url)).create_topic(NAME, PARTITIONS)
    schema = load("githubEvents_schema.json")
    schema["schemaName"] = NAME
    config = table_config(
        NAME,
        **{
            "realtime.segment.flush.threshold.segment.rows": "100000",
            "realtime.segment.flush.threshold.time": "5s",
        },
    )
    config["tableName"] = NAME
    config["segmentsConfig"].pop("schemaName", None)
    manager = ResourceManager(context.current())
    manager.add_schema(schema)
    manager.add_table(config)


def _statuses() -> dict[str, SegmentStatus]:
    """Each segment's status; empty while ZooKeeper does not answer (an election)."""
    try:
        manager = ResourceManager(context.current())
        return {s: manager.segment_metadata(TABLE, s).status for s in manager.segment_names(TABLE)}
    except Exception:
        return {}


def _all_committed() -> bool:
    """Every partition's last DONE segment ends at the stream's latest offset."""
    provider = RedisStreamProvider(get_redis(context.current().redis_url), NAME)
    try:
        coverage = done_coverage(TABLE)
        return all(
            coverage.get(p, (0, 0))[1] == provider.latest_offset(p) for p in range(PARTITIONS)
        )
    finally:
        provider.close()


def _connections(stack: EnsembleStack) -> dict[str, set[tuple[int, int, int]]]:
    pids = {name: stack.procs[name].pid for name in PROCESSES} | {"test": os.getpid()}
    ports = set(stack.ensemble.client_ports())
    return {name: zk_connections(pid, ports) for name, pid in pids.items()}


def _moved(stack: EnsembleStack, before: dict, dead_port: int) -> dict | None:
    """Every process's connections once each has a new one, none to the dead member or old."""
    now = _connections(stack)
    for name, links in now.items():
        old = {(pid, local) for pid, local, _ in before[name]}
        if not links or any((pid, local) in old or port == dead_port for pid, local, port in links):
            return None
    return now


def _a_build_running(stack: EnsembleStack) -> tuple[int, dict] | None:
    """A committer waiting for its build, once the Spark pool talks to ZooKeeper (its build task
    reads the table config): every process then has a connection to lose."""
    found = find_phase(stack, TABLE, "COMMITTING")
    ports = set(stack.ensemble.client_ports())
    return found if found and zk_connections(stack.procs["spark"].pid, ports) else None


def _stopped_while_building(stack: EnsembleStack) -> tuple[str, dict] | None:
    """Once the pool is stopped: the held segment and every process's connections, if a commit is
    still waiting for its build and every process is connected; None otherwise."""
    found = _a_build_running(stack)
    before = _connections(stack)
    return (found[1]["segmentName"], before) if found and all(before.values()) else None


def _hold_a_build(stack: EnsembleStack, attempts: int = 5) -> tuple[list[int], str, dict]:
    """The Spark worker's pool SIGSTOPped while a committer waits for its build, every process
    connected to the ensemble: (the stopped pids, the held segment, each process's connections).
    A pool stopped in between (its build just ended, or its client between two connections on a
    loaded machine) is let go and caught again."""
    spark = stack.procs["spark"].pid
    for _ in range(attempts):
        wait_until(
            lambda: _a_build_running(stack) and all(_connections(stack).values()),
            timeout=120,
            what="a commit building, every process connected",
        )
        pool = [pid for pid in process_tree(spark) if pid != spark]
        for pid in pool:  # the build cannot finish: the commit stays between COMMIT and its end
            os.kill(pid, signal.SIGSTOP)
        try:
            held = wait_until(lambda: _stopped_while_building(stack), timeout=10)
        except TimeoutError:
            held = None
        if held is not None:
            return pool, *held
        for pid in pool:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    raise AssertionError(f"no build held with every process connected in {attempts} attempts")


def _watch_recovery(
    stack: EnsembleStack, leader: int, before: dict, held: str, begun: set[str], killed_at: float
) -> dict:
    """Seconds from the kill to: a new leader, every process reconnected, the held commit DONE,
    the first commit begun after the kill DONE (`segment`: which one)."""
    events: dict = {}
    dead_port = stack.ensemble.client_port(leader)

    def seen(event: str, happened: object) -> None:
        if happened and event not in events:
            events[event] = time.monotonic() - killed_at

    def all_seen() -> bool:
        others = [m for m in (1, 2, 3) if m != leader]
        seen(
            "elected",
            "elected" in events or any(stack.ensemble.mode(m) == "leader" for m in others),
        )
        seen("reconnected", "reconnected" in events or _moved(stack, before, dead_port))
        statuses = _statuses()
        seen("held", statuses.get(held) is SegmentStatus.DONE)
        after = sorted(
            s for s, st in statuses.items() if st is SegmentStatus.DONE and s not in begun
        )
        if after and "next" not in events:
            seen("next", True)
            events["segment"] = after[0]
        return len(events) == 5

    try:
        wait_until(all_seen, timeout=240, interval=0.1, what="recovery from the kill")
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}; seen by then: {events}") from None
    return events


def test_leader_killed_mid_commit_under_a_chroot(ready, request, capsys):
    stack = ready
    root = new_client(stack.ensemble.hosts)
    try:
        assert sorted(root.get_children("/")) == ["pinot", "zookeeper"]
        assert root.exists(CHROOT + context.current().paths.liveinstances)
    finally:
        root.stop()
        root.close()

    _create_table()
    producer = stack.start_producer(NAME, ROWS, RATE, PARTITIONS)
    # After a first commit (the Spark JVM is warm), the next committer in the build queue.
    wait_until(lambda: SegmentStatus.DONE in _statuses().values(), timeout=180, what="a commit")
    pool, held, before = _hold_a_build(stack)
    try:
        leader = stack.ensemble.leader()
        assert leader is not None
        replicas = [i for items in replicas_by_server(stack, TABLE).values() for i in items]
        begun = {i["segmentName"] for i in replicas if i.get("phase") != "CONSUMING"}
        begun |= {s for s, status in _statuses().items() if status is SegmentStatus.DONE}
        sessions = _sessions()
        stack.ensemble.kill(leader)
        killed_at = time.monotonic()
    finally:
        for pid in pool:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    late = stack.start_producer(NAME, LATE_ROWS, RATE, PARTITIONS)
    dead_port = stack.ensemble.client_port(leader)
    on_leader = sorted(n for n, links in before.items() if any(p == dead_port for *_, p in links))

    events = _watch_recovery(stack, leader, before, held, begun, killed_at)

    assert producer.wait(timeout=300) == 0, stack.log("producer")[-3000:]
    assert late.wait(timeout=300) == 0, stack.log("producer")[-3000:]
    wait_until(_all_committed, timeout=300, interval=0.5, what="every produced row committed")
    report = verify_rows(TABLE)
    assert "PROBLEM" not in report, report
    now = _sessions()
    kept = sum(now.get(name) == session for name, session in sessions.items())
    for name in PROCESSES:
        assert stack.procs[name].poll() is None, f"{name} exited: {stack.log(name)[-2000:]}"

    figure = (
        f"ZooKeeper leader zk{leader} SIGKILLed while {held} was mid-commit (clients on it: "
        f"{', '.join(on_leader) or 'none'}): a new leader after {events['elected']:.1f} s, "
        f"every process on a new connection to a surviving member after "
        f"{events['reconnected']:.1f} s, the held commit DONE after {events['held']:.1f} s, "
        f"the next commit begun after the kill ({events['segment']}) DONE after "
        f"{events['next']:.1f} s; {kept} of {len(sessions)} live instances kept their session"
    )
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    with FIGURES.open("a") as out:
        out.write(figure + "\n")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    with capsys.disabled():  # shown in the run's output, -q or not
        reporter.write_line(f"\n{figure}")


def test_a_missing_chroot_is_created_on_connect():
    hosts = f"127.0.0.1:{envdefaults.ZK_PORT}"
    top = f"/chroot-{uuid.uuid4().hex[:10]}"
    client = new_client(f"{hosts}{top}/pinot")
    try:
        client.create("/made", b"x")
    finally:
        client.stop()
        client.close()
    root = new_client(hosts)
    try:
        assert root.get(f"{top}/pinot/made")[0] == b"x"
    finally:
        root.delete(top, recursive=True)
        root.stop()
        root.close()
