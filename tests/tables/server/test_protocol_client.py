"""The server's completion client (`CompletionClient` + `LeaderLocator`) against real
`manage.py run_controller` processes: it finds the lead controller from the leadControllerResource
EXTERNALVIEW, gets Pinot's answers, relocates on NOT_LEADER (from a second, real controller that
does not lead the table), and turns every call that cannot be made or answered into NOT_SENT. It
sends the cluster token; a call the controller refuses (a wrong token, an instance that holds no
replica) comes back FAILED, the leader kept. Views that are stale or name a leader that does not
exist are staged in a second cluster ("GhostCluster") inside the test's own ZooKeeper chroot.

Tests run outside a transaction (`transaction=True`): controllers record leadership changes in
the test database, and SQLite's IMMEDIATE transactions would make them wait for the test's own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from django.conf import settings

from tables.cluster import context
from tables.cluster.context import ClusterContext
from tables.cluster.leadership import lead_controller_for
from tables.controller.resources import ResourceManager
from tables.domain.lead_assignment import lead_view
from tables.domain.leadership import LEAD_CONTROLLER_RESOURCE, lead_partition, partition_name
from tables.domain.names import LLCSegmentName
from tables.domain.znrecord import ZNRecord
from tables.redisconn import get_redis
from tables.server.protocol import CompletionClient, LeaderLocator
from tables.streams.redis_streams import RedisTopicAdmin
from tables.zk.cluster import init_cluster
from tables.zk.participants import instance_config, live_instance, register_participant
from tables.zk.paths import ClusterPaths
from tables.zk.records import create_record, read_record, update_record
from tests import envdefaults
from tests.cluster_fixtures import PATHS, SERVERS, load
from tests.ingest_cluster import HOST, free_port, table_config
from tests.poll import wait_until

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

TABLE = "githubEvents_REALTIME"
GHOST = ClusterPaths("GhostCluster")
GHOST_SEGMENT = "githubEvents__0__0__20210721T0600Z"
PARTITIONS = 24


@dataclass
class Controller:
    proc: subprocess.Popen
    instance_id: str
    url: str


def _masters(zk) -> dict[str, list[str]]:
    """leadControllerResource EXTERNALVIEW: partition -> its MASTERs."""
    found = read_record(zk, PATHS.externalview(LEAD_CONTROLLER_RESOURCE))
    if found is None:
        return {}
    return {
        p: sorted(i for i, state in states.items() if state == "MASTER")
        for p, states in found.record.map_fields.items()
    }


def _split(zk, controllers: list[str]) -> bool:
    """Every partition has exactly one MASTER, and the controllers share them evenly."""
    masters = _masters(zk)
    if sorted(masters) != sorted(partition_name(i) for i in range(PARTITIONS)):
        return False
    if any(len(named) != 1 for named in masters.values()):
        return False
    counts = {c: sum(1 for named in masters.values() if named == [c]) for c in controllers}
    return set(counts.values()) == {PARTITIONS // len(controllers)}


def _start_controller(settings) -> Controller:
    """`manage.py run_controller` in the test's chroot, on a free port."""
    port = free_port()
    env = {
        **os.environ,
        "ZK_HOSTS": settings.ZK_HOSTS,
        "DATABASE_URL": f"sqlite:///{envdefaults.VAR_DIR / 'test_db.sqlite3'}",
    }
    log = envdefaults.VAR_DIR / "logs" / f"protocol-controller-{port}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    args = ["run_controller", "--port", str(port), "--interval", "0.2"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", *args],
            cwd=envdefaults.ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Controller(proc, f"Controller_{HOST}_{port}", f"http://{HOST}:{port}")


def _stop(controllers: list[Controller]) -> None:
    for controller in controllers:
        if controller.proc.poll() is None:
            controller.proc.kill()
            controller.proc.wait()


@pytest.fixture
def controller(servers, zk, settings) -> Iterator[Controller]:
    """One controller, once it leads all 24 partitions."""
    started = [_start_controller(settings)]
    try:
        (one,) = started
        wait_until(lambda: _split(zk, [one.instance_id]), timeout=60, what="it leads")
        yield one
    finally:
        _stop(started)


@pytest.fixture
def two_controllers(servers, zk, settings) -> Iterator[tuple[Controller, Controller]]:
    """Two controllers, once they lead 12 partitions each: (githubEvents' leader, the other)."""
    started = [_start_controller(settings), _start_controller(settings)]
    try:
        ids = [c.instance_id for c in started]
        wait_until(lambda: _split(zk, ids), timeout=60, what="12 partitions each")
        leader = lead_controller_for(context.current(), TABLE)
        (lead,) = [c for c in started if c.instance_id == leader]
        (other,) = [c for c in started if c.instance_id != leader]
        yield lead, other
    finally:
        _stop(started)


@pytest.fixture
def github(servers, topic) -> tuple[str, list[str], int]:
    """The githubEvents table (replication 2): partition 0's segment, its two replicas and its
    start offset; partition 0 holds 100 more rows after it, so the offsets reported exist."""
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(table_config(topic))
    RedisTopicAdmin(get_redis(settings.REDIS_URL)).produce(topic, 0, [b"{}"] * 100, now_ms=0)
    for segment, replicas in manager.idealstate(TABLE).items():
        name = LLCSegmentName.parse(segment)
        if name is not None and name.partition_group_id == 0:
            start = manager.segment_metadata(TABLE, segment).start_offset
            assert set(replicas) <= set(SERVERS) and len(replicas) == 2
            return segment, sorted(replicas), int(start or 0)
    raise AssertionError("no segment for partition 0")


def _ghost(zk, controllers: list[str]) -> Callable[[], ClusterContext]:
    """A second cluster in the test's chroot whose lead-controller view names `controllers`
    (the first one MASTER of every partition; none named: no MASTER anywhere)."""
    init_cluster(zk, GHOST)
    held = {controllers[0]: frozenset(range(PARTITIONS))} if controllers else {}
    create_record(zk, GHOST.externalview(LEAD_CONTROLLER_RESOURCE), lead_view(PARTITIONS, held))
    return lambda: ClusterContext(zk, GHOST, settings.REDIS_URL)


def test_the_first_row_limit_reporter_commits_and_answers_are_counted(controller, github):
    segment, (first, second), start = github
    locator = LeaderLocator(context.current)
    assert locator.url_for(TABLE) == controller.url
    winner = CompletionClient(first, locator)
    other = CompletionClient(second, locator)
    offset = start + 10

    commit = winner.segment_consumed(TABLE, segment, offset, "rowLimit", 10)
    assert commit.status == "COMMIT"
    assert commit.offset == str(offset)
    assert commit.build_time_sec > 0
    assert commit.controller_vip_url == controller.url

    behind = other.segment_consumed(TABLE, segment, offset - 4, "rowLimit", 6)
    assert (behind.status, behind.offset) == ("CATCH_UP", str(offset))
    level = other.segment_consumed(TABLE, segment, offset, "catchUp", 10)
    assert (level.status, level.offset) == ("HOLD", str(offset))

    again = winner.segment_consumed(TABLE, segment, offset, "rowLimit", 10)
    assert again.status == "COMMIT"  # it missed the first COMMIT: the same answer again
    started = winner.segment_commit_start(TABLE, segment, offset, {"rowCount": 10})
    assert started.status == "COMMIT_CONTINUE"

    assert winner.responses == {"COMMIT": 2, "COMMIT_CONTINUE": 1}
    assert other.responses == {"CATCH_UP": 1, "HOLD": 1}
    # Each client's calls went over one kept-alive connection (tables.server.http_pool).
    assert (winner.pool.opened, other.pool.opened) == (1, 1)


def test_refused_calls_come_back_failed_and_keep_the_leader(controller, github, caplog):
    segment, replicas, start = github
    (outsider,) = set(SERVERS) - set(replicas)
    locator = LeaderLocator(context.current, relocate_interval_s=3600)
    forged = CompletionClient(replicas[0], locator, token="not-the-cluster-token")
    with caplog.at_level("WARNING", logger="tables.server.protocol"):
        for _ in range(3):
            answer = forged.segment_consumed(TABLE, segment, start + 5, "rowLimit", 5)
            assert (answer.status, answer.offset, answer.build_time_sec) == ("FAILED", None, -1)
    # Logged once (HTTP 401 of segmentConsumed), with the controller's reason.
    refusals = [
        r.getMessage() for r in caplog.records if "refused by the controller" in r.getMessage()
    ]
    assert len(refusals) == 1 and "HTTP 401" in refusals[0], refusals
    assert "invalid cluster token" in refusals[0]
    outsider_client = CompletionClient(outsider, locator)
    assert outsider_client.segment_consumed(TABLE, segment, start + 5, "rowLimit", 5).status == (
        "FAILED"
    )
    # A refusal is an answer from the right controller: the leader stays cached.
    assert locator.url_for(TABLE) == controller.url
    assert forged.responses == {"FAILED": 3}

    # The FSM saw none of it: the real replica's report wins.
    real = CompletionClient(replicas[0], locator)
    assert real.segment_consumed(TABLE, segment, start + 5, "rowLimit", 5).status == "COMMIT"


def test_not_leader_from_a_real_controller_drops_the_cached_leader_and_the_next_lookup_finds_it(
    two_controllers, github, zk
):
    lead, other = two_controllers
    segment, (first, _), start = github
    partition = partition_name(lead_partition("githubEvents"))
    assert _masters(zk)[partition] == [lead.instance_id]
    assert other.instance_id in {m for named in _masters(zk).values() for m in named}

    # The server's view is one lookup old: it names `other` (live, a MASTER of other partitions,
    # but not of githubEvents'). Staged in GhostCluster: `other` leads everything there.
    stale = _ghost(zk, [other.instance_id])
    host, port = other.url.removeprefix("http://").rsplit(":", 1)
    register_participant(zk, GHOST, other.instance_id, host, int(port), ["controller"])
    views = iter([stale])
    locator = LeaderLocator(lambda: next(views, context.current)(), relocate_interval_s=0)
    client = CompletionClient(first, locator)

    assert locator.url_for(TABLE) == other.url
    response = client.segment_consumed(TABLE, segment, start + 5, "rowLimit", 5)
    assert response.status == "NOT_LEADER"  # answered by the real controller `other`
    # NOT_LEADER dropped the cached URL: the next call looks up the current view, reaches the
    # real leader and commits (with the stale URL kept, `other` would answer NOT_LEADER again).
    response = client.segment_consumed(TABLE, segment, start + 5, "rowLimit", 5)
    assert response.status == "COMMIT"
    assert response.controller_vip_url == lead.url
    assert locator.url_for(TABLE) == lead.url
    assert client.responses == {"NOT_LEADER": 1, "COMMIT": 1}


def test_after_a_sigterm_hand_over_the_other_controller_leads_and_commits(two_controllers, github):
    lead, other = two_controllers
    segment, (first, _), start = github
    patient = LeaderLocator(context.current, relocate_interval_s=3600)
    assert patient.url_for(TABLE) == lead.url
    client = CompletionClient(first, patient)
    assert client.segment_consumed(TABLE, segment, start + 5, "rowLimit", 5).status == "COMMIT"
    # SIGTERM: the leader hands its partitions over and exits; the kept connection is closed and
    # the cached URL's port too: the call is NOT_SENT (tried once more, on a new connection,
    # refused) and the URL dropped.
    lead.proc.send_signal(signal.SIGTERM)
    assert lead.proc.wait(timeout=30) == 0
    response = client.segment_consumed(TABLE, segment, start + 5, "rowLimit", 5)
    assert response.status == "NOT_SENT"
    assert client.pool.opened == 2
    assert patient.url_for(TABLE) is None  # no new lookup within the interval
    # `other` takes the partition over (hand-over: no rebalance delay), and a locator that may
    # look up finds it.
    wait_until(
        lambda: lead_controller_for(context.current(), TABLE) == other.instance_id,
        timeout=30,
        what="the other controller leads githubEvents",
    )
    eager = CompletionClient(first, LeaderLocator(context.current, relocate_interval_s=0))
    assert eager.segment_consumed(TABLE, segment, start + 5, "rowLimit", 5).status == "COMMIT"


def test_a_leader_that_does_not_exist_gives_not_sent(cluster):
    ghost = "Controller_127.0.0.1_1"
    ctx = _ghost(cluster, [ghost])
    # A MASTER without a live instance leads nothing: no lookup, no call.
    locator = LeaderLocator(ctx, relocate_interval_s=0)
    assert lead_controller_for(ctx(), TABLE) is None
    assert locator.url_for(TABLE) is None
    create_record(cluster, GHOST.liveinstance(ghost), live_instance(ghost, "0"))
    assert lead_controller_for(ctx(), TABLE) == ghost

    # No instance config for the named leader: there is nowhere to send the call.
    client = CompletionClient(SERVERS[0], locator)
    assert locator.url_for(TABLE) is None
    assert client.segment_consumed(TABLE, GHOST_SEGMENT, 10, "rowLimit", 9).status == "NOT_SENT"

    # An instance config whose port nobody listens on: connection refused, NOT_SENT.
    closed = free_port()
    create_record(
        cluster,
        GHOST.participant_config(ghost),
        instance_config(ghost, HOST, closed, None, ["controller"]),
    )
    assert locator.url_for(TABLE) == f"http://{HOST}:{closed}"
    assert client.segment_consumed(TABLE, GHOST_SEGMENT, 10, "rowLimit", 9).status == "NOT_SENT"
    assert client.segment_stopped_consuming(TABLE, GHOST_SEGMENT, 10, "x").status == "NOT_SENT"
    assert client.responses == {"NOT_SENT": 3}

    # The failed call dropped the cached URL: a moved leader is found by the next lookup, while a
    # locator that never failed keeps its cached answer.
    untouched = LeaderLocator(ctx, relocate_interval_s=0)
    assert untouched.url_for(TABLE) == f"http://{HOST}:{closed}"
    moved = free_port()

    def move(record: ZNRecord) -> ZNRecord:
        record = record.copy()
        record.simple_fields["HELIX_PORT"] = str(moved)
        return record

    update_record(cluster, GHOST.participant_config(ghost), move)
    assert locator.url_for(TABLE) == f"http://{HOST}:{moved}"
    assert untouched.url_for(TABLE) == f"http://{HOST}:{closed}"


def test_with_the_resource_disabled_the_helix_leader_leads(cluster):
    ctx = _ghost(cluster, [])  # a view with no MASTER anywhere
    locator = LeaderLocator(ctx, relocate_interval_s=0)
    assert locator.url_for(TABLE) is None
    port = free_port()
    leader = f"Controller_{HOST}_{port}"
    create_record(
        cluster, GHOST.participant_config(leader), instance_config(leader, HOST, port, None, [])
    )

    def disable(record: ZNRecord) -> ZNRecord:
        record = record.copy()
        record.simple_fields["RESOURCE_ENABLED"] = "false"
        return record

    update_record(cluster, GHOST.resource_config(LEAD_CONTROLLER_RESOURCE), disable)
    create_record(cluster, GHOST.controller_leader, ZNRecord(id=f"{HOST}_{port}"))
    assert locator.url_for(TABLE) == f"http://{HOST}:{port}"


def test_no_reachable_controller_gives_not_sent(controller, github):
    segment, (first, _), start = github
    locator = LeaderLocator(context.current, relocate_interval_s=0)
    client = CompletionClient(first, locator)
    assert client.segment_consumed(TABLE, segment, start + 3, None, 3).status == "HOLD"

    controller.proc.send_signal(signal.SIGTERM)
    assert controller.proc.wait(timeout=30) == 0
    # Its live instance is gone, so it leads nothing; the cached URL's port refuses the call.
    assert lead_controller_for(context.current(), TABLE) is None
    for _ in range(2):
        response = client.segment_consumed(TABLE, segment, start + 3, "rowLimit", 3)
        assert (response.status, response.offset, response.build_time_sec) == ("NOT_SENT", None, -1)
    extended = client.extend_build_time(TABLE, segment, start + 3, 60)
    assert extended.status == "NOT_SENT"
    assert client.responses == {"HOLD": 1, "NOT_SENT": 3}
