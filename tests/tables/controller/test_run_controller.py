"""`run_controller` as a real process: participant, lead-controller view, table views, its own
HTTP server, and a clean stop on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.table_config import switch_stream_type
from tables.domain.znrecord import ZNRecord
from tables.security import cluster_token
from tables.zk.records import create_record, read_record
from tests import envdefaults
from tests.cluster_fixtures import PATHS, SERVERS, load
from tests.poll import wait_until

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]
TABLE = "githubEvents_REALTIME"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def controller(servers, settings):
    port = _free_port()
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


def _lead_masters(zk) -> set[str]:
    found = read_record(zk, PATHS.externalview("leadControllerResource"))
    if found is None:
        return set()
    return {i for replicas in found.record.map_fields.values() for i in replicas}


def test_the_controller_leads_serves_keeps_views_and_stops_cleanly(controller, zk, topic):
    proc, instance, port = controller
    wait_until(lambda: zk.exists(PATHS.liveinstance(instance)), timeout=60, what="live instance")
    wait_until(lambda: _lead_masters(zk) == {instance}, timeout=30, what="lead controller view")
    lead = read_record(zk, PATHS.externalview("leadControllerResource")).record
    assert len(lead.map_fields) == 24
    config = read_record(zk, PATHS.participant_config(instance)).record
    assert config.list_fields["TAG_LIST"] == ["controller"]

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
    session = read_record(zk, PATHS.liveinstance(server)).record.simple_fields["SESSION_ID"]
    assert server in SERVERS
    create_record(
        zk,
        PATHS.currentstate(server, session, TABLE),
        ZNRecord(id=TABLE, map_fields={segment: {"CURRENT_STATE": "CONSUMING"}}),
    )

    def view():
        found = read_record(zk, PATHS.externalview(TABLE))
        return found is not None and found.record.map_fields == {segment: {server: "CONSUMING"}}

    wait_until(view, timeout=30, what="the table's EXTERNALVIEW")

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert zk.exists(PATHS.liveinstance(instance)) is None
