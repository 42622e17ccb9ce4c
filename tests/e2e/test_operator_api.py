"""Issue 22's operator surface walked over HTTP against a real stack: a controller (`run_controller`
serving the API) and three servers as processes, the Celery workers building segments with Spark.

One 4-partition table (replication 2) consumes a few hundred rows; partition 0 is force committed
so that the table holds a DONE segment as well as CONSUMING ones. Then every GET that Pinot's UI
makes on its home, tables, table, segment, schema, tenant, instance, servers, controllers and
ZooKeeper pages, and every other path of the issue, is called with a viewer's basic auth (the
writes with an admin's, refused to the viewer) and its answer is checked for Pinot's JSON keys
and for values that only this cluster can have. Disabling the table takes every replica OFFLINE
in the ExternalView and enabling it brings them back, and so does disabling a server for its
replicas; a znode is created, updated compare-and-set and deleted; unknown paths and methods
answer JSON.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.names import LLCSegmentName
from tests.accounts import grant
from tests.cluster_fixtures import load
from tests.ingest_cluster import HOST, IngestCluster, produce, table_config
from tests.poll import wait_until

pytestmark = [
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.celery,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]
RAW = "githubEvents"
TABLE = f"{RAW}_REALTIME"
ROWS = 200
PASSWORD = "a-long-test-password"


class Api:
    """HTTP calls to the controller process with basic auth; answers (status, parsed body)."""

    def __init__(self, port: int, user: str | None) -> None:
        self.base = f"http://{HOST}:{port}"
        token = base64.b64encode(f"{user}:{PASSWORD}".encode()).decode() if user else None
        self.headers = {"Authorization": f"Basic {token}"} if token else {}

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, object]:
        request = urllib.request.Request(
            self.base + path, data=body, method=method, headers=dict(self.headers)
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                status, raw, kind = reply.status, reply.read(), reply.headers["Content-Type"]
        except urllib.error.HTTPError as exc:
            status, raw, kind = exc.code, exc.read(), exc.headers["Content-Type"]
        text = raw.decode()
        return status, json.loads(text) if (kind or "").startswith("application/json") else text

    def get(self, path: str) -> object:
        status, body = self.call("GET", path)
        assert status == 200, (path, status, body)
        return body


def _segments() -> dict[str, dict[str, str]]:
    return ResourceManager(context.current()).idealstate(TABLE)


def _by_sequence(sequence: int) -> dict[int, str]:
    out = {}
    for segment in _segments():
        name = LLCSegmentName.parse(segment)
        if name is not None and name.sequence_number == sequence:
            out[name.partition_group_id] = segment
    return out


def _externalview_states() -> set[str]:
    view = ResourceManager(context.current()).externalview(TABLE) or {}
    return {state for replicas in view.values() for state in replicas.values()}


@pytest.fixture
def apis(ingest, topic, django_user_model) -> tuple[Api, Api, str]:
    """(viewer, admin, committed segment): the table ingesting, partition 0 committed once."""
    for name, role in (("viewer", "viewer"), ("admin", "admin")):
        grant(django_user_model.objects.create_user(name, password=PASSWORD), role)
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(
        table_config(
            topic,
            **{
                "realtime.segment.flush.threshold.segment.rows": "100000",
                "realtime.segment.flush.threshold.time": "6h",
            },
        )
    )
    producer = produce(topic, ROWS, rate=2_000)
    output, _ = producer.communicate(timeout=300)
    assert producer.returncode == 0, output.decode(errors="replace")
    viewer, admin = Api(ingest.controller_port, "viewer"), Api(ingest.controller_port, "admin")
    first = _by_sequence(0)
    wait_until(lambda: _externalview_states() == {"CONSUMING"}, timeout=120, what="consuming")
    status, body = admin.call("POST", f"/tables/{RAW}/forceCommit?partitions=0")
    assert status == 200, body
    committed = first[0]
    wait_until(
        lambda: (
            manager.segment_metadata(TABLE, committed).status == "DONE"
            and set(_segments()[committed].values()) == {"ONLINE"}
        ),
        timeout=300,
        what="partition 0 committed",
    )
    wait_until(
        lambda: (
            set(
                (ResourceManager(context.current()).externalview(TABLE) or {})
                .get(committed, {})
                .values()
            )
            == {"ONLINE"}
        ),
        timeout=120,
        what="committed segment ONLINE on its replicas",
    )
    return viewer, admin, committed


def test_the_operator_surface_answers_pinots_keys(ingest: IngestCluster, apis):
    viewer, admin, committed = apis
    servers = sorted(ingest.server_id(i) for i in range(3))
    ctx = context.current()

    assert Api(ingest.controller_port, None).call("GET", "/health") == (200, "OK")
    assert Api(ingest.controller_port, None).call("GET", "/auth/info") == (
        200,
        {"workflow": "BASIC"},
    )
    assert viewer.get("/auth/verify") is True
    assert Api(ingest.controller_port, None).call("GET", "/auth/verify")[0] == 401
    assert isinstance(viewer.get("/version"), dict) and viewer.get("/version")

    # Home: cluster name, instances, tenants, tables, task types.
    assert viewer.get("/cluster/info") == {"clusterName": ctx.paths.cluster}
    assert isinstance(viewer.get("/cluster/configs"), dict)
    instances = viewer.get("/instances")["instances"]
    assert {ingest.controller_id, *servers} <= set(instances)
    tenants = viewer.get("/tenants")
    assert "DefaultTenant" in tenants["SERVER_TENANTS"] and tenants["BROKER_TENANTS"] == []
    assert viewer.get("/tables") == {"tables": [RAW]}
    assert viewer.get("/tables?type=offline") == {"tables": []}
    assert viewer.get("/tables?type=realtime") == {"tables": [RAW]}
    assert viewer.get("/tasks/tasktypes") == []
    assert isinstance(viewer.get("/tasks/scheduler/information"), dict)
    assert viewer.get("/logicalTables") == []
    assert viewer.get("/periodictask/names") == [
        "RealtimeSegmentValidationManager",
        "SegmentStatusChecker",
    ]

    # Servers, controllers and an instance page.
    server = viewer.get(f"/instances/{servers[0]}")
    assert {"instanceName", "hostName", "enabled", "port", "tags"} <= set(server)
    assert server["instanceName"] == servers[0] and server["enabled"] is True
    assert "DefaultTenant_REALTIME" in server["tags"]
    assert viewer.get(f"/instances/{ingest.controller_id}")["instanceName"] == ingest.controller_id

    # Tenant pages.
    tenant = viewer.get("/tenants/DefaultTenant")
    assert tenant["tenantName"] == "DefaultTenant"
    assert set(servers) <= set(tenant["ServerInstances"])
    assert viewer.get("/tenants/DefaultTenant/tables") == {"tables": [TABLE]}
    assert viewer.get("/brokers/tenants/DefaultTenant") == []

    # Tables and table pages.
    assert viewer.get(f"/tables/{RAW}")["REALTIME"]["tableName"] == TABLE
    assert viewer.get(f"/tables/{TABLE}/schema")["schemaName"] == RAW
    schemas = {item["schemaName"]: item for item in viewer.get("/schemas/info")}
    assert {"numDimensionFields", "numDateTimeFields", "numMetricFields"} <= set(schemas[RAW])
    size = viewer.get(f"/tables/{RAW}/size")
    assert {"tableName", "reportedSizeInBytes", "estimatedSizeInBytes"} <= set(size)
    realtime_size = size["realtimeSegments"]
    assert realtime_size["segments"][committed]["reportedSizeInBytes"] > 0
    assert realtime_size["missingSegments"] == 4  # the CONSUMING ones have no size yet
    instances_of = viewer.get(f"/tables/{RAW}/instances")
    assert instances_of["tableName"] == RAW
    assert {s for group in instances_of["server"] for s in group["instances"]} <= set(servers)
    assert viewer.get(f"/tables/{RAW}/state?type=realtime") == {"state": "enabled"}
    ideal = viewer.get(f"/tables/{RAW}/idealstate")["REALTIME"]
    assert set(ideal) == set(_segments())
    assert set(viewer.get(f"/tables/{RAW}/externalview")["REALTIME"]) == set(ideal)
    statuses = {
        s["segmentName"]: s["segmentStatus"] for s in viewer.get(f"/tables/{RAW}/segmentsStatus")
    }
    assert set(statuses) == set(ideal) and set(statuses.values()) == {"GOOD"}
    consuming = viewer.get(f"/tables/{RAW}/consumingSegmentsInfo")
    assert len(consuming["_segmentToConsumingInfoMap"]) == 4
    assert viewer.get(f"/tables/{RAW}/pauseStatus")["pauseFlag"] is False

    # Segment pages.
    assert set(viewer.get(f"/segments/{RAW}")[0]["REALTIME"]) == set(ideal)
    servers_of = viewer.get(f"/segments/{RAW}/servers")[0]
    assert servers_of["tableName"] == TABLE
    held = {seg for segs in servers_of["serverToSegmentsMap"].values() for seg in segs}
    assert held == set(ideal)
    crcs = viewer.get(f"/segments/{RAW}/crc")
    meta = viewer.get(f"/segments/{RAW}/{committed}/metadata")
    assert crcs[committed] == meta["segment.crc"] != "-1"
    debug = viewer.get(f"/debug/tables/{RAW}?verbosity=1")
    assert debug[0]["tableName"] == TABLE and "segmentDebugInfos" in debug[0]

    # The ZooKeeper page.
    root = f"/{ctx.paths.cluster}"
    assert {"IDEALSTATES", "PROPERTYSTORE", "CONFIGS"} <= set(viewer.get(f"/zk/ls?path={root}"))
    ideal_path = urllib.parse.quote(f"{root}/IDEALSTATES/{TABLE}")
    assert viewer.get(f"/zk/get?path={ideal_path}")["id"] == TABLE
    stat = viewer.get(f"/zk/stat?path={ideal_path}")
    assert {"version", "ctime", "mtime", "numChildren", "dataLength"} <= set(stat)
    listed = viewer.get(f"/zk/lsl?path={root}")
    assert "IDEALSTATES" in json.dumps(listed)

    # Errors are JSON, for unknown paths and methods too.
    status, body = viewer.call("GET", "/no/such/path")
    assert status == 404 and body["code"] == 404 and body["error"]
    status, body = admin.call("DELETE", "/cluster/info")
    assert status == 405 and body["code"] == 405

    assert viewer.get("/schemas") == [RAW]
    assert viewer.get(f"/schemas/{RAW}")["schemaName"] == RAW

    _zookeeper_writes(viewer, admin, root)
    _table_disabled_and_enabled(viewer, admin)
    _instance_disabled_and_enabled(viewer, admin, servers[0])


def _zookeeper_writes(viewer: Api, admin: Api, root: str) -> None:
    """An admin creates, updates (compare-and-set) and deletes a znode; a viewer cannot."""
    path = urllib.parse.quote(f"{root}/PROPERTYSTORE/operator-walk")
    record = urllib.parse.quote(json.dumps({"id": "operator-walk", "simpleFields": {"n": "1"}}))
    assert viewer.call("PUT", f"/zk/put?path={path}&data={record}&expectedVersion=-1")[0] == 403
    status, body = admin.call(
        "PUT", f"/zk/put?path={path}&data={record}&expectedVersion=-1&comment=walk"
    )
    assert status == 200, body
    assert viewer.get(f"/zk/get?path={path}")["simpleFields"] == {"n": "1"}
    version = viewer.get(f"/zk/stat?path={path}")["version"]
    stale = f"/zk/put?path={path}&data={record}&expectedVersion={version + 1}&comment=walk"
    assert admin.call("PUT", stale)[0] == 409
    status, body = admin.call("DELETE", f"/zk/delete?path={path}&expectedVersion={version}")
    assert status == 200, body
    assert viewer.call("GET", f"/zk/stat?path={path}")[0] == 404


def _instance_disabled_and_enabled(viewer: Api, admin: Api, server: str) -> None:
    """A disabled server takes its replicas OFFLINE; enabled again, it follows the IdealState."""

    def states_of(instance: str) -> set[str]:
        view = ResourceManager(context.current()).externalview(TABLE) or {}
        return {replicas[instance] for replicas in view.values() if instance in replicas}

    assert viewer.call("PUT", f"/instances/{server}/state?state=disable")[0] == 403
    status, body = admin.call("PUT", f"/instances/{server}/state?state=disable&comment=walk")
    assert status == 200, body
    assert viewer.get(f"/instances/{server}")["enabled"] is False
    wait_until(lambda: states_of(server) == {"OFFLINE"}, timeout=120, what=f"{server} OFFLINE")
    status, body = admin.call("PUT", f"/instances/{server}/state?state=enable&comment=walk")
    assert status == 200, body
    assert viewer.get(f"/instances/{server}")["enabled"] is True
    wait_until(
        lambda: states_of(server) and states_of(server) <= {"CONSUMING", "ONLINE"},
        timeout=180,
        what=f"{server} back",
    )


def _table_disabled_and_enabled(viewer: Api, admin: Api) -> None:
    """Disabling the table takes every replica OFFLINE; enabling brings them back."""
    assert viewer.call("PUT", f"/tables/{RAW}/state?state=disable&type=realtime")[0] == 403
    status, body = admin.call("PUT", f"/tables/{RAW}/state?state=disable&type=realtime")
    assert status == 200, body
    assert viewer.get(f"/tables/{RAW}/state?type=realtime") == {"state": "disabled"}
    wait_until(lambda: _externalview_states() == {"OFFLINE"}, timeout=120, what="all OFFLINE")
    status, body = admin.call("PUT", f"/tables/{RAW}/state?state=enable&type=realtime")
    assert status == 200, body
    wait_until(
        lambda: _externalview_states() == {"CONSUMING", "ONLINE"},
        timeout=180,
        what="replicas back",
    )
