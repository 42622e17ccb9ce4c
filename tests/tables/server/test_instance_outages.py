"""A server outlives ZooKeeper session expiries and failing transitions (issue 13), in-process
against the real ZooKeeper and Redis:

- the session expires: the process keeps its one ZooKeeper client (and so its watches), registers
  again on the new session, and still applies IdealState changes made afterwards;
- a transition that keeps failing is retried with capped back-off, not in a tight loop.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from kazoo.client import KazooClient

from tables import builds
from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.server.consumer import Phase
from tables.server.instance import ServerInstance
from tables.zk.client import get_client
from tables.zk.participants import session_id_of
from tables.zk.records import read_record
from tests.cluster_fixtures import PATHS, load
from tests.ingest_cluster import HOST, free_port, table_config
from tests.poll import wait_until

pytestmark = [pytest.mark.zk, pytest.mark.redis]
TABLE = "githubEvents_REALTIME"


def _no_build(*args: object) -> None:
    raise AssertionError("nothing completes without a controller")


@pytest.fixture
def server(cluster, tmp_path: Path) -> Iterator[ServerInstance]:
    port = free_port()
    instance = ServerInstance(
        f"Server_{HOST}_{port}",
        HOST,
        port,
        context.current,
        builds.deep_store,
        _no_build,
        tmp_path / "server",
        hold_s=0.2,
        tick_s=0.5,
    )
    instance.start()
    try:
        wait_until(lambda: instance.session is not None, what="registered")
        yield instance
    finally:
        instance.stop()


def _live_session(instance: ServerInstance) -> str | None:
    found = read_record(context.current().client, PATHS.liveinstance(instance.instance_id))
    return None if found is None else found.record.simple_fields.get("SESSION_ID")


def _expire(client: KazooClient) -> None:
    """End `client`'s session from outside, as ZooKeeper does after a long stall: a second
    connection on the same session id and password closes it."""
    session_id, password = client.client_id
    other = KazooClient(hosts=settings.ZK_HOSTS, client_id=(session_id, password))
    other.start(timeout=10)
    other.stop()
    other.close()


def _create_table(topic: str) -> ResourceManager:
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    config = table_config(topic, **{"realtime.segment.flush.threshold.segment.rows": "100000"})
    config["segmentsConfig"]["replication"] = "1"
    manager.add_table(config)
    return manager


def _consuming(instance: ServerInstance) -> int:
    replicas = instance.replicas_of(TABLE) or {}
    return sum(
        r.consumer is not None and r.consumer.phase is Phase.CONSUMING for r in replicas.values()
    )


def test_after_a_session_expiry_the_server_registers_again_and_follows_new_idealstates(
    server, topic
):
    client = get_client(settings.ZK_HOSTS)
    old_session = session_id_of(client)
    assert _live_session(server) == old_session

    _expire(client)
    wait_until(
        lambda: client.connected and session_id_of(client) != old_session,
        timeout=30,
        what="the same client on a new session",
    )
    new_session = session_id_of(client)
    # The live instance appears a moment before the server records its new session: wait for both.
    wait_until(
        lambda: _live_session(server) == new_session and server.session == new_session,
        timeout=30,
        what="registered again",
    )
    assert get_client(settings.ZK_HOSTS) is client  # never replaced: its watches live on it

    # The table appears only now: the IDEALSTATES children watch and the table's data watch,
    # both set before the expiry, must see it.
    _create_table(topic)
    wait_until(lambda: _consuming(server) == 4, timeout=30, what="4 partitions consuming")
    folder = f"{PATHS.instance(server.instance_id)}/CURRENTSTATES"
    # Published once the transitions end, a moment after their consumers started.
    wait_until(
        lambda: client.get_children(folder) == [new_session],
        timeout=30,
        what="CURRENTSTATES under the new session only",
    )


def test_a_transition_that_keeps_failing_backs_off(server, topic):
    manager = _create_table(topic)
    wait_until(lambda: _consuming(server) == 4, timeout=30, what="4 partitions consuming")
    calls: dict[str, list[float]] = {}

    def cannot_remove(table: str, segment: str) -> None:
        calls.setdefault(segment, []).append(time.monotonic())
        raise OSError(f"[Errno 36] File name too long: {segment}")

    server.local.remove = cannot_remove
    manager.delete_table(TABLE)
    tried = wait_until(
        lambda: [times for times in calls.values() if len(times) >= 3],
        timeout=60,
        what="a segment's drop failing 3 times",
    )
    # The n-th failure in a row makes the next try wait 0.5 * 2**(n-1) s: a lower bound the
    # server enforces, whatever the machine's load (a tight loop would call thousands of times).
    for times in tried:
        gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
        assert gaps[0] >= 0.45 and gaps[1] >= 0.95, gaps
    replicas = server.replicas.get(TABLE, {})
    assert all(r.error and "File name too long" in r.error for r in replicas.values())
