"""`run_controller` as a real process: participant, cluster leader (`/CONTROLLER/LEADER`) and
MASTER of every leadControllerResource partition when alone, table views, its own HTTP server, and
on SIGTERM a clean stop that hands its partitions over (CURRENTSTATE emptied, HISTORY HANDOVER).

The tests commit nothing to the test database while the controller runs (`transaction=True`): the
controller records leadership changes there, and SQLite's IMMEDIATE transactions would make it
wait for the test's own transaction."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.leadership import LEAD_CONTROLLER_RESOURCE, partition_name
from tables.domain.table_config import switch_stream_type
from tables.domain.znrecord import ZNRecord
from tables.security import cluster_token
from tables.zk.records import create_record, read_record
from tests import envdefaults
from tests.cluster_fixtures import PATHS, SERVERS, load
from tests.poll import wait_until
from tests.ports import free_port

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db(transaction=True)]
TABLE = "githubEvents_REALTIME"


@pytest.fixture
def controller(servers, settings):
    port = free_port()
    env = {
        **os.environ,
        "ZK_HOSTS": settings.ZK_HOSTS,
        "DATABASE_URL": f"sqlite:///{envdefaults.VAR_DIR / 'test_db.sqlite3'}",
    }
    log = (envdefaults.VAR_DIR / "logs").joinpath(f"controller-{port}.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "run_controller",
                "--port",
                str(port),
                "--interval",
                "0.2",
            ],
            cwd=envdefaults.ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield proc, f"Controller_127.0.0.1_{port}", port
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _masters_of_all(zk, instance: str) -> bool:
    """The EXTERNALVIEW names `instance` the one MASTER of each of the 24 partitions."""
    found = read_record(zk, PATHS.externalview(LEAD_CONTROLLER_RESOURCE))
    return found is not None and found.record.map_fields == {
        partition_name(i): {instance: "MASTER"} for i in range(24)
    }


def _current_state(zk, instance: str, session: str) -> dict[str, dict[str, str]]:
    found = read_record(zk, PATHS.currentstate(instance, session, LEAD_CONTROLLER_RESOURCE))
    assert found is not None, "no CURRENTSTATE of leadControllerResource"
    return found.record.map_fields


def test_the_controller_leads_serves_keeps_views_and_hands_over_on_sigterm(controller, zk, topic):
    proc, instance, port = controller
    wait_until(lambda: zk.exists(PATHS.liveinstance(instance)), timeout=60, what="live instance")
    wait_until(lambda: _masters_of_all(zk, instance), timeout=30, what="MASTER of all 24")
    config = read_record(zk, PATHS.participant_config(instance)).record
    assert config.list_fields["TAG_LIST"] == ["controller"]
    # Alone, it is the cluster leader (Helix's id: no Controller_ prefix) and owns everything.
    leader = read_record(zk, PATHS.controller_leader).record
    session = read_record(zk, PATHS.liveinstance(instance)).record.simple_fields["SESSION_ID"]
    assert leader.id == f"127.0.0.1_{port}"
    assert leader.simple_fields["SESSION_ID"] == session
    assignment = read_record(zk, PATHS.idealstate(LEAD_CONTROLLER_RESOURCE)).record.list_fields
    assert {p: assignment[partition_name(p)] for p in range(24)} == {
        p: [instance] for p in range(24)
    }
    assert _current_state(zk, instance, session) == {
        partition_name(i): {"CURRENT_STATE": "MASTER"} for i in range(24)
    }

    # Its own HTTP server answers the protocol (here: a call without parameters).
    call = urllib.request.Request(
        f"http://127.0.0.1:{port}/segmentConsumed",
        headers={"Authorization": f"Bearer {cluster_token()}"},
    )
    with urllib.request.urlopen(call, timeout=10) as resp:
        assert json.load(resp)["status"] == "FAILED"

    # A table it leads gets an EXTERNALVIEW from its servers' current states.
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(
        switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic)
    )
    ideal = read_record(zk, PATHS.idealstate(TABLE)).record
    segment = sorted(ideal.map_fields)[0]
    server = next(iter(ideal.map_fields[segment]))
    server_session = read_record(zk, PATHS.liveinstance(server)).record.simple_fields["SESSION_ID"]
    assert server in SERVERS
    create_record(
        zk,
        PATHS.currentstate(server, server_session, TABLE),
        ZNRecord(id=TABLE, map_fields={segment: {"CURRENT_STATE": "CONSUMING"}}),
    )

    def view():
        found = read_record(zk, PATHS.externalview(TABLE))
        return found is not None and found.record.map_fields == {segment: {server: "CONSUMING"}}

    wait_until(view, timeout=30, what="the table's EXTERNALVIEW")

    # SIGTERM: it hands its partitions over, resigns, and its session ends.
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert zk.exists(PATHS.liveinstance(instance)) is None
    assert zk.exists(PATHS.controller_leader) is None
    assert _current_state(zk, instance, session) == {}
    history = read_record(zk, f"{PATHS.instance(instance)}/HISTORY").record.simple_fields
    assert history["HANDOVER"] == "true"
    assert int(history["LAST_OFFLINE_TIME"]) >= int(history["LAST_ONLINE_TIME"])
