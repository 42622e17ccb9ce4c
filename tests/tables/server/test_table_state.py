"""Disabled tables and instances (Helix's HELIX_ENABLED), on a real in-process `ServerInstance`
with its admin HTTP, against the real ZooKeeper and Redis (no controller: nothing commits).

- `PUT /tables/{t}/state?state=disable&type=realtime` (admin, audited) sets the IdealState's
  HELIX_ENABLED to false and nothing else; the server takes every replica OFFLINE (its consumers
  stop without committing), CURRENTSTATES (so the ExternalView the controller computes from them)
  say OFFLINE; `state=enable` brings them back CONSUMING, reading again from the ZK start offset.
- An instance whose CONFIGS/PARTICIPANT HELIX_ENABLED is false does the same for all its replicas,
  and follows the IdealState again once it is true.
- `GET /debug/tables/{t}` shows, per segment and server, the IdealState and ExternalView states and
  the consumer's info from the live state, and a failed consumer's error at verbosity 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from tables import builds
from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.externalview import table_view
from tables.domain.names import LLCSegmentName
from tables.models import AuditEntry
from tables.redisconn import get_redis
from tables.server.admin import AdminServer
from tables.server.consumer import Phase, SegmentConsumer
from tables.server.instance import ServerInstance
from tables.server.live import LivePublisher
from tables.zk.records import create_record, read_record, update_record
from tests.cluster_fixtures import PATHS, load
from tests.ingest_cluster import HOST, free_port, table_config
from tests.poll import wait_until

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]

TABLE = "githubEvents_REALTIME"


def _no_build(*args: object) -> None:
    raise AssertionError("nothing completes without a controller")


@dataclass
class Serving:
    instance: ServerInstance
    admin: AdminServer
    faults: Path
    segments: dict[int, str] = field(default_factory=dict)  # partition -> consuming segment
    start_offsets: dict[str, int] = field(default_factory=dict)

    def consumer(self, segment: str) -> SegmentConsumer | None:
        replica = (self.instance.replicas_of(TABLE) or {}).get(segment)
        return None if replica is None else replica.consumer

    def current_states(self, zk) -> dict[str, str]:
        me, session = self.instance.instance_id, self.instance.session or ""
        found = read_record(zk, PATHS.currentstate(me, session, TABLE))
        fields = {} if found is None else found.record.map_fields
        return {segment: f.get("CURRENT_STATE", "") for segment, f in fields.items()}

    def all_consuming_caught_up(self) -> bool:
        # The `topic` fixture wrote partition p's rows at offsets 1..p+1.
        consumers = [self.consumer(s) for s in self.segments.values()]
        return all(
            c is not None and c.phase is Phase.CONSUMING and c.next_offset == p + 2
            for p, c in enumerate(consumers)
        )


@pytest.fixture
def serving(cluster, topic, tmp_path: Path, settings) -> Iterator[Serving]:
    """githubEvents (replication 1) on one in-process server with its admin HTTP, every partition
    consuming and caught up; fault injection on, in a directory of the test's own."""
    settings.FAULT_INJECTION_DIR = str(tmp_path / "faults")
    (tmp_path / "faults").mkdir()
    port, admin_port = free_port(), free_port()
    instance = ServerInstance(
        f"Server_{HOST}_{port}",
        HOST,
        port,
        context.current,
        builds.deep_store,
        _no_build,
        tmp_path / "server",
        admin_port=admin_port,
        hold_s=0.2,
        tick_s=0.5,
    )
    admin = AdminServer(instance, HOST, admin_port, lambda: (b"", "text/plain"))
    admin.start()
    instance.start()
    try:
        wait_until(
            lambda: cluster.exists(PATHS.liveinstance(instance.instance_id)), what="registered"
        )
        manager = ResourceManager(context.current())
        manager.add_schema(load("githubEvents_schema.json"))
        config = table_config(topic, **{"realtime.segment.flush.threshold.segment.rows": "1000"})
        config["segmentsConfig"]["replication"] = "1"
        manager.add_table(config)
        state = Serving(instance, admin, tmp_path / "faults")
        for segment in manager.idealstate(TABLE):
            name = LLCSegmentName.parse(segment)
            assert name is not None
            state.segments[name.partition_group_id] = segment
            meta = manager.segment_metadata(TABLE, segment)
            state.start_offsets[segment] = int(meta.start_offset or 0)
        wait_until(state.all_consuming_caught_up, what="the 4 partitions consuming, caught up")
        yield state
    finally:
        instance.stop()
        admin.stop()


@pytest.fixture
def api(admin_user) -> APIClient:
    client = APIClient()
    client.force_authenticate(admin_user)
    return client


def _write_external_view(zk, serving: Serving) -> None:
    """What the table's lead controller writes from CURRENTSTATES (no controller runs here)."""
    states = {serving.instance.instance_id: {s: {"CURRENT_STATE": v} for s, v in
              serving.current_states(zk).items()}}  # fmt: skip
    view = table_view(TABLE, states)
    path = PATHS.externalview(TABLE)
    if zk.exists(path) is None:
        create_record(zk, path, view)
    else:
        update_record(zk, path, lambda _: view)


def _all(serving: Serving, zk, state: str) -> bool:
    states = serving.current_states(zk)
    return set(serving.segments.values()) <= set(states) and set(states.values()) == {state}


def test_a_disabled_table_goes_offline_without_committing_and_comes_back(serving, zk, api):
    before = {s: serving.consumer(s) for s in serving.segments.values()}
    ideal_before = read_record(zk, PATHS.idealstate(TABLE))
    assert ideal_before is not None

    resp = api.put("/tables/githubEvents/state?state=disable&type=realtime")
    assert resp.status_code == 200, resp.content
    assert resp.json() == {
        "status": "Request to disable table 'githubEvents_REALTIME' is successful"
    }
    ideal = read_record(zk, PATHS.idealstate(TABLE))
    assert ideal.record.simple_fields["HELIX_ENABLED"] == "false"
    assert ideal.record.map_fields == ideal_before.record.map_fields  # only the flag changed
    entry = AuditEntry.objects.get(action="table_state")
    assert (entry.target, entry.result, entry.status_code) == (TABLE, "OK", 200)

    wait_until(lambda: _all(serving, zk, "OFFLINE"), what="every replica OFFLINE")
    for segment, consumer in before.items():
        assert consumer.phase is Phase.STOPPED  # stopped, never asked to commit
        assert serving.consumer(segment) is None
    _write_external_view(zk, serving)
    view = read_record(zk, PATHS.externalview(TABLE)).record.map_fields
    assert {state for states in view.values() for state in states.values()} == {"OFFLINE"}
    assert api.get("/tables/githubEvents/state?type=realtime").json() == {"state": "disabled"}
    status = api.get("/tables/githubEvents/segmentsStatus").json()
    assert {s["segmentStatus"] for s in status} == {"UPDATING"}  # EV OFFLINE, IS CONSUMING

    resp = api.put("/tables/githubEvents_REALTIME/state?state=ENABLE&type=REALTIME")
    assert resp.status_code == 200, resp.content
    assert read_record(zk, PATHS.idealstate(TABLE)).record.simple_fields["HELIX_ENABLED"] == "true"
    wait_until(lambda: _all(serving, zk, "CONSUMING"), what="every replica CONSUMING again")
    wait_until(serving.all_consuming_caught_up, what="the rows read again")
    for segment in serving.segments.values():
        consumer = serving.consumer(segment)
        assert consumer is not before[segment]
        assert consumer.spec.start_offset == serving.start_offsets[segment]  # from ZooKeeper
    assert api.get("/tables/githubEvents/state?type=realtime").json() == {"state": "enabled"}


def test_a_disabled_instance_takes_its_replicas_offline_until_enabled(serving, zk):
    me = serving.instance.instance_id

    def set_enabled(value: str) -> None:
        def mutate(record):
            out = record.copy()
            out.simple_fields["HELIX_ENABLED"] = value
            return out

        update_record(zk, PATHS.participant_config(me), mutate)

    set_enabled("false")
    wait_until(lambda: _all(serving, zk, "OFFLINE"), what="every replica OFFLINE")
    assert all(serving.consumer(s) is None for s in serving.segments.values())
    assert read_record(zk, PATHS.idealstate(TABLE)).record.simple_fields.get("HELIX_ENABLED") in (
        None,
        "true",
    )  # the table itself stays enabled
    set_enabled("true")
    wait_until(lambda: _all(serving, zk, "CONSUMING"), what="every replica CONSUMING again")
    wait_until(serving.all_consuming_caught_up, what="the rows read again")


def test_debug_shows_states_consumer_info_and_a_consumer_error(serving, zk, api, settings):
    publisher = LivePublisher(
        serving.instance, get_redis(settings.REDIS_URL), PATHS.cluster, 60.0, 30.0
    )
    assert publisher.publish_once()
    # The EXTERNALVIEW is made from CURRENTSTATES, which the server writes on its own thread.
    wait_until(lambda: _all(serving, zk, "CONSUMING"), what="every replica CONSUMING in ZK")
    _write_external_view(zk, serving)
    me = serving.instance.instance_id

    resp = api.get("/debug/tables/githubEvents?verbosity=1")
    assert resp.status_code == 200, resp.content
    [info] = resp.json()
    assert set(info) == {
        "tableName", "ingestionStatus", "tableSize", "numSegments", "numServers", "numBrokers",
        "segmentDebugInfos", "serverDebugInfos", "brokerDebugInfos",
    }  # fmt: skip
    assert (info["tableName"], info["numSegments"], info["numServers"]) == (TABLE, 4, 1)
    assert info["ingestionStatus"] == {"ingestionState": "HEALTHY", "errorMessage": ""}
    by_segment = {s["segmentName"]: s["serverState"] for s in info["segmentDebugInfos"]}
    assert set(by_segment) == set(serving.segments.values())
    segment = serving.segments[2]
    state = by_segment[segment][me]
    assert set(state) == {"idealState", "externalView", "segmentSize", "consumerInfo", "errorInfo"}
    assert (state["idealState"], state["externalView"], state["errorInfo"]) == (
        "CONSUMING",
        "CONSUMING",
        None,
    )
    assert state["consumerInfo"]["consumerState"] == "CONSUMING"
    assert state["consumerInfo"]["partitionToOffsetMap"] == {"2": "4"}
    # Verbosity 0 (Pinot's default) lists only replicas with a problem: none yet.
    assert api.get("/debug/tables/githubEvents").json()[0]["segmentDebugInfos"] == []

    (serving.faults / f"server.{me}.consumer_fails").write_text("")
    failed = wait_until(
        lambda: next(
            (s for s in serving.segments.values() if (r := (serving.instance.replicas_of(TABLE) or
             {}).get(s)) and r.error), None),
        what="a failed consumer",
    )  # fmt: skip
    (serving.faults / f"server.{me}.consumer_fails").unlink(missing_ok=True)
    assert publisher.publish_once()
    [info] = api.get("/debug/tables/githubEvents?type=REALTIME").json()
    [item] = info["segmentDebugInfos"]
    assert item["segmentName"] == failed
    error = item["serverState"][me]["errorInfo"]
    assert "fault injection" in error["errorMessage"]
    assert info["ingestionStatus"]["ingestionState"] == "UNHEALTHY"
    assert api.get("/debug/tables/githubEvents?verbosity=x").status_code == 400
    assert api.get("/debug/tables/githubEvents?type=OFFLINE").status_code == 404
