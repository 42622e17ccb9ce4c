"""Ingestion rides out store outages with no person acting (issue 13), on a stack of its own
(`OutageStack`: private ZooKeeper and Redis, a Spark worker, a controller, three servers, a
producer), each test on a table of its own and ending with `verify_ledger --rows` exact:

- ZooKeeper SIGSTOPped for less than the session timeout, and for longer (sessions expire: every
  process re-registers on the same client and re-arms its watches);
- Redis SIGSTOPped for 20 s (consumers and the producer back off; nothing goes to ERROR);
- Redis SIGKILLed and restarted (its append-only file keeps every acknowledged row).

Each test records the time from the end of the outage to the first commit after it in
var/test/artifacts/outage-recovery.txt (a figure for the notes; nothing asserts on it).
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.segment_metadata import SegmentStatus
from tables.redisconn import get_redis
from tables.security import cluster_token
from tables.streams.redis_streams import RedisTopicAdmin
from tables.zk.client import close_all
from tests import envdefaults
from tests.cluster_fixtures import load
from tests.e2e.outage_stack import OutageStack
from tests.ingest_cluster import HOST, all_committed, table_config, verify_rows
from tests.poll import wait_until

pytestmark = [
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.spark,
    pytest.mark.services,
    pytest.mark.django_db(transaction=True),
]
ROWS, RATE = 6_000, 300  # 20 s of production: the outage falls in the middle of it
RECOVERY_LOG = envdefaults.VAR_DIR / "artifacts" / "outage-recovery.txt"


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[OutageStack]:
    cluster = OutageStack(tmp_path_factory.mktemp("outage"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def private(stack, settings) -> Iterator[OutageStack]:
    """The test process talks to the stack's stores; the stack is up and ready."""
    settings.ZK_HOSTS, settings.REDIS_URL = stack.zk_hosts, stack.redis_url
    close_all()
    wait_until(lambda: _live_servers(stack) >= 3, timeout=120, what="controller and 3 servers")
    yield stack
    close_all()


def _live_servers(stack: OutageStack) -> int:
    try:
        ctx = context.current()
        return len([i for i in ctx.client.get_children(ctx.paths.liveinstances) if "Server" in i])
    except Exception:
        return 0


def _create_table(name: str) -> None:
    admin = RedisTopicAdmin(get_redis(context.current().redis_url))
    admin.create_topic(name, 4)
    schema = load("githubEvents_schema.json")
    schema["schemaName"] = name
    config = table_config(
        name,
        **{
            "realtime.segment.flush.threshold.segment.rows": "1500",
            "realtime.segment.flush.threshold.time": "6s",
        },
    )
    config["tableName"] = name
    config["segmentsConfig"].pop("schemaName", None)
    manager = ResourceManager(context.current())
    manager.add_schema(schema)
    manager.add_table(config)


def _done_count(table: str) -> int:
    """DONE segments of `table`; -1 while ZooKeeper does not answer."""
    try:
        manager = ResourceManager(context.current())
        return sum(
            manager.segment_metadata(table, s).status is SegmentStatus.DONE
            for s in manager.segment_names(table)
        )
    except Exception:
        return -1


def _hold(service: str, stack: OutageStack, seconds: float, during=None) -> None:
    """The outage itself: `service` stays SIGSTOPped for `seconds` (the fault's length, not a
    wait for anything); `during` runs once while it is stopped."""
    stack.freeze(service)
    try:
        until = time.monotonic() + seconds
        if during is not None:
            during()
        wait_until(lambda: time.monotonic() >= until, timeout=seconds + 60, interval=0.2)
    finally:
        stack.thaw(service)


def _finish(stack: OutageStack, name: str, producer, outage_end: float, done_before: int) -> None:
    table = f"{name}_REALTIME"
    first_commit = wait_until(
        lambda: _done_count(table) > done_before and time.monotonic(),
        timeout=180,
        interval=0.2,
        what=f"a commit of {table} after the outage",
    )
    assert producer.wait(timeout=300) == 0, stack.log("producer")[-3000:]
    try:
        wait_until(lambda: all_committed(name, table), 300, 1, "all committed")
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}: {_not_committed(table)}") from None
    report = verify_rows(table)
    assert "PROBLEM" not in report, report
    RECOVERY_LOG.parent.mkdir(parents=True, exist_ok=True)
    with RECOVERY_LOG.open("a") as out:
        out.write(f"{name}: first commit {first_commit - outage_end:.1f} s after the outage\n")


def _not_committed(table: str) -> str:
    """What a failure message needs: each segment not DONE, its status and IdealState states."""
    manager = ResourceManager(context.current())
    ideal = manager.idealstate(table)
    out = []
    for segment in manager.segment_names(table):
        status = manager.segment_metadata(table, segment).status
        if status is not SegmentStatus.DONE:
            out.append(f"{segment} {status} {sorted(ideal.get(segment, {}).values())}")
    return "; ".join(out) or "every segment DONE"


def _landed(table: str) -> bool:
    """A first commit is done, and no commit is between its steps: every DONE segment is out of
    CONSUMING in the IdealState. An outage that starts between a commit end's step 1 (DONE) and
    its step 3 (the IdealState) fails that commit end after the metadata changed, and then only
    the healer repairs the partition, after MAX_SEGMENT_COMPLETION_TIME (5 min): longer than
    these tests wait, and not what they test (the first commits of a stack, slow while its Spark
    starts, land together)."""
    try:
        manager = ResourceManager(context.current())
        ideal = manager.idealstate(table)
        done = [
            s
            for s in manager.segment_names(table)
            if manager.segment_metadata(table, s).status is SegmentStatus.DONE
        ]
    except Exception:
        return False
    return bool(done) and all("CONSUMING" not in ideal.get(s, {}).values() for s in done)


def _started(stack: OutageStack, name: str) -> tuple[object, int]:
    _create_table(name)
    producer = stack.start_producer(name, ROWS, RATE)
    table = f"{name}_REALTIME"
    wait_until(lambda: _landed(table), timeout=180, interval=0.2, what="a first commit landed")
    return producer, _done_count(table)


def _api_status(stack: OutageStack, path: str) -> int:
    request = urllib.request.Request(
        f"http://{HOST}:{stack.controller_port}{path}",
        headers={"Authorization": f"Bearer {cluster_token()}", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.parametrize("seconds", [3, 15], ids=["shorter-than-session", "session-expires"])
def test_zookeeper_stall(private, seconds):
    name = f"zkstall{seconds}"
    producer, _ = _started(private, name)
    answers: list[int] = []
    _hold(
        "zookeeper",
        private,
        seconds,
        during=lambda: answers.append(_api_status(private, f"/tables/{name}/idealstate")),
    )
    outage_end = time.monotonic()
    assert answers and answers[0] in (200, 503), answers  # never a 500 while ZooKeeper is away
    done = (
        wait_until(lambda: _done_count(f"{name}_REALTIME") + 1, timeout=60, what="ZK answers") - 1
    )
    _finish(private, name, producer, outage_end, done)


def test_redis_stall_of_20_seconds(private):
    name = "redisstall"
    producer, _ = _started(private, name)
    _hold("redis", private, 20)
    outage_end = time.monotonic()
    _finish(private, name, producer, outage_end, _done_count(f"{name}_REALTIME"))
    for index in range(3):
        assert "consumerError" not in private.log(f"server{index}")


def test_redis_killed_and_restarted_keeps_every_acknowledged_row(private):
    name = "rediskill"
    producer, _ = _started(private, name)
    private.kill_redis()
    outage_end = time.monotonic()
    _finish(private, name, producer, outage_end, _done_count(f"{name}_REALTIME"))
