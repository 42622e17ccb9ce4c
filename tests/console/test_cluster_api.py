"""Pinot's cluster-level controller paths (issue 22) against the real ZooKeeper: the JSON keys
Pinot's controller answers and its UI reads, enabling and disabling an instance (admin only,
compare-and-set, audited), bad input refused with a 4xx that changes nothing, and errors as
Pinot's JSON on every API path, unknown paths and methods included."""

from __future__ import annotations

import base64
import tomllib
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from tables.cluster import context
from tables.cluster.context import ClusterContext
from tables.cluster.instances import ClusterAdmin
from tables.controller.resources import ResourceManager
from tables.domain.table_config import switch_stream_type
from tables.models import AuditEntry
from tables.zk.participants import register_participant
from tables.zk.records import read_record, update_record
from tables.zk.zookeeper import ZooKeeperStore
from tests.accounts import grant
from tests.cluster_fixtures import PATHS, SERVERS, load

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]

CONTROLLER = "Controller_127.0.0.1_9000"
SERVER = SERVERS[0]
INSTANCE_KEYS = {
    "instanceName",
    "hostName",
    "enabled",
    "port",
    "tags",
    "pools",
    "grpcPort",
    "adminPort",
    "queryServicePort",
    "queryMailboxPort",
    "shutdownInProgress",
    "systemResourceInfo",
}


@pytest.fixture
def api(admin_user) -> APIClient:
    client = APIClient()
    client.force_authenticate(admin_user)
    return client


@pytest.fixture
def viewer(django_user_model) -> APIClient:
    client = APIClient()
    client.force_authenticate(grant(django_user_model.objects.create_user("v"), "viewer"))
    return client


@pytest.fixture
def instances(servers, zk) -> list[str]:
    register_participant(zk, PATHS, CONTROLLER, "127.0.0.1", 9000, ["controller"])
    return sorted([CONTROLLER, *servers])


@pytest.fixture
def github(instances, topic) -> str:
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(
        switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic)
    )
    return "githubEvents_REALTIME"


def _config(zk, name: str):
    return read_record(zk, PATHS.participant_config(name))


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _pinot_error(response, status: int) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert body["code"] == status and body["error"]
    return body


# --- version, cluster -----------------------------------------------------------------------------
def test_version_names_this_project(api, cluster):
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    project = pyproject["project"]
    assert api.get("/version").json() == {project["name"]: project["version"]}
    assert APIClient().get("/version").status_code == 401


def test_cluster_info_and_configs(api, cluster):
    assert api.get("/cluster/info").json() == {"clusterName": "PinotCluster"}
    stored = read_record(cluster, PATHS.cluster_config).record.simple_fields
    assert api.get("/cluster/configs").json() == stored == {"allowParticipantAutoJoin": "true"}

    def add_knob(record):
        out = record.copy()
        out.simple_fields["max.segment.completion.time.millis"] = "300000"
        return out

    update_record(cluster, PATHS.cluster_config, add_knob)
    assert api.get("/cluster/configs").json()["max.segment.completion.time.millis"] == "300000"


# --- instances ------------------------------------------------------------------------------------
def test_instances_lists_controllers_and_servers(api, instances):
    assert api.get("/instances").json() == {"instances": instances}
    assert api.get("/instances?tag=controller").json() == {"instances": [CONTROLLER]}
    tagged = api.get("/instances", {"tag": "DefaultTenant_REALTIME"}).json()
    assert tagged == {"instances": SERVERS}
    assert api.get("/instances?tag=nobody").json() == {"instances": []}


def test_instance_in_pinots_shape(api, instances, zk):
    body = api.get(f"/instances/{SERVER}").json()
    assert set(body) == INSTANCE_KEYS
    assert body["instanceName"] == SERVER
    assert body["hostName"] == "127.0.0.1"
    assert body["port"] == "7001"  # a string, as Helix's InstanceConfig.getPort()
    assert body["enabled"] is True
    assert body["tags"] == ["DefaultTenant_REALTIME"]
    assert body["adminPort"] == body["grpcPort"] == body["queryMailboxPort"] == -1
    assert body["pools"] is None and body["systemResourceInfo"] is None

    register_participant(zk, PATHS, "Server_h_8098", "h", 8098, ["T_REALTIME"], admin_port=8097)
    assert api.get("/instances/Server_h_8098").json()["adminPort"] == 8097
    controller = api.get(f"/instances/{CONTROLLER}").json()
    assert controller["tags"] == ["controller"] and controller["port"] == "9000"


def test_instance_bad_names_and_unknown(api, instances):
    assert "Server_nope_1" in _pinot_error(api.get("/instances/Server_nope_1"), 404)["error"]
    for bad in ("..", "a%20b", "x%00y", "%C3%A9t%C3%A9", "a" * 300):
        _pinot_error(api.get(f"/instances/{bad}"), 400)
        _pinot_error(api.put(f"/instances/{bad}/state?state=disable"), 400)


# --- enable / disable -----------------------------------------------------------------------------
def test_disable_then_enable_an_instance(api, instances, zk):
    before = _config(zk, SERVER)
    response = api.put(f"/instances/{SERVER}/state?state=disable&reason=maintenance")
    assert response.status_code == 200, response.content
    assert response.json() == {"status": f"Request to disable instance '{SERVER}' is successful"}
    after = _config(zk, SERVER)
    assert after.version == before.version + 1
    assert after.record.simple_fields["HELIX_ENABLED"] == "false"
    stamp = int(after.record.simple_fields["HELIX_ENABLED_TIMESTAMP"])
    assert stamp >= before.mtime_ms
    assert after.record.list_fields == before.record.list_fields  # tags untouched
    assert api.get(f"/instances/{SERVER}").json()["enabled"] is False
    assert api.get(f"/instances/{SERVERS[1]}").json()["enabled"] is True

    # Disabling again changes nothing; a server re-registering (a restart) keeps it disabled.
    assert api.put(f"/instances/{SERVER}/state?state=DISABLE").status_code == 200
    register_participant(zk, PATHS, SERVER, "127.0.0.1", 7001, ["DefaultTenant_REALTIME"])
    assert _config(zk, SERVER).version == after.version
    assert _config(zk, SERVER).record.simple_fields["HELIX_ENABLED"] == "false"

    # Pinot's older form: POST with the state as the text body.
    response = api.post(f"/instances/{SERVER}/state", "enable", content_type="text/plain")
    assert response.status_code == 200, response.content
    assert api.get(f"/instances/{SERVER}").json()["enabled"] is True
    assert _config(zk, SERVER).record.simple_fields["HELIX_ENABLED"] == "true"

    audit = list(AuditEntry.objects.filter(target=SERVER).order_by("id"))
    assert [(a.action, a.result) for a in audit] == [
        ("disable_instance", "OK"),
        ("disable_instance", "OK"),
        ("enable_instance", "OK"),
    ]
    assert audit[0].reason == "maintenance" and audit[0].username == "admin"


def test_instance_state_write_is_compare_and_set(instances, zk):
    """Another writer changes the instance config between the read and the write: the toggle's
    write must lose (BadVersion), re-read and apply on top, so neither change is lost."""

    class Racing(ZooKeeperStore):
        sets = 0

        def set(self, path, value, version=-1):
            Racing.sets += 1
            if Racing.sets == 1:

                def other(record):
                    out = record.copy()
                    out.simple_fields["pinotVersion"] = "1.4.0"
                    return out

                update_record(ZooKeeperStore(zk), path, other)
            return super().set(path, value, version=version)

    ctx = ClusterContext(Racing(zk), PATHS, "redis://unused")
    assert ClusterAdmin(ctx).set_enabled(SERVER, False) is True
    fields = _config(zk, SERVER).record.simple_fields
    assert fields["HELIX_ENABLED"] == "false"
    assert fields["pinotVersion"] == "1.4.0"
    assert Racing.sets == 2


def test_instance_state_refusals_change_nothing(api, viewer, instances, zk):
    version = _config(zk, SERVER).version
    for bad in ("?state=drop", "?state=", "", "?state=enable%00"):
        _pinot_error(api.put(f"/instances/{SERVER}/state{bad}"), 400)
    _pinot_error(api.post(f"/instances/{SERVER}/state", "x" * 100, content_type="text/plain"), 400)
    _pinot_error(api.put("/instances/Server_nope_1/state?state=disable"), 404)
    _pinot_error(viewer.put(f"/instances/{SERVER}/state?state=disable"), 403)
    _pinot_error(APIClient().put(f"/instances/{SERVER}/state?state=disable"), 401)
    _pinot_error(api.delete(f"/instances/{SERVER}/state"), 405)
    assert _config(zk, SERVER).version == version

    results = [(a.action, a.result, a.status_code) for a in AuditEntry.objects.order_by("id")]
    assert results[:5] == [("instance_state", "REJECTED", 400)] * 5
    assert ("disable_instance", "REJECTED", 404) in results
    assert ("instance_state", "DENIED", 403) in results
    assert not [r for r in results if r[2] == 401]  # nobody to attribute it to


# --- tenants --------------------------------------------------------------------------------------
def test_tenants_from_instance_tags(api, github, zk):
    register_participant(zk, PATHS, "Broker_b_8099", "b", 8099, ["DefaultTenant_BROKER"])
    register_participant(zk, PATHS, "Server_o_1", "o", 1, ["Hist_OFFLINE"])
    body = api.get("/tenants").json()
    assert body == {
        "SERVER_TENANTS": ["DefaultTenant", "Hist"],
        "BROKER_TENANTS": ["DefaultTenant"],
    }
    assert api.get("/tenants?type=server").json()["BROKER_TENANTS"] is None
    _pinot_error(api.get("/tenants?type=minion"), 400)

    tenant = api.get("/tenants/DefaultTenant").json()
    assert tenant == {
        "ServerInstances": SERVERS,
        "BrokerInstances": ["Broker_b_8099"],
        "tenantName": "DefaultTenant",
    }
    typed = api.get("/tenants/DefaultTenant?type=server").json()
    assert typed["RealtimeServerInstances"] == SERVERS and typed["OfflineServerInstances"] == []
    assert set(typed) == {
        "OfflineServerInstances",
        "RealtimeServerInstances",
        "ServerInstances",
        "tenantName",
    }
    assert api.get("/tenants/Hist?type=server&tableType=realtime").status_code == 404
    assert api.get("/tenants/DefaultTenant?type=broker").json()["BrokerInstances"] == [
        "Broker_b_8099"
    ]
    assert "Nobody" in _pinot_error(api.get("/tenants/Nobody"), 404)["error"]
    _pinot_error(api.get("/tenants/DefaultTenant?tableType=hybrid"), 400)

    assert api.get("/tenants/DefaultTenant/tables").json() == {"tables": [github]}
    assert api.get("/tenants/DefaultTenant/tables?type=broker").json() == {"tables": [github]}
    assert api.get("/tenants/Hist/tables").json() == {"tables": []}
    _pinot_error(api.get("/tenants/DefaultTenant/tables?type=x"), 400)
    assert api.get("/brokers/tenants/DefaultTenant").json() == ["Broker_b_8099"]


def test_a_cluster_without_brokers(api, instances):
    assert api.get("/tenants").json() == {
        "SERVER_TENANTS": ["DefaultTenant"],
        "BROKER_TENANTS": [],
    }
    assert api.get("/brokers/tenants/DefaultTenant").json() == []
    assert api.get("/brokers/tenants/Nobody").json() == []


# --- auth -----------------------------------------------------------------------------------------
def test_auth_info_and_verify(django_user_model, cluster):
    django_user_model.objects.create_user("ops", password="pw-ops-12345")
    anonymous = APIClient()
    assert anonymous.get("/auth/info").json() == {"workflow": "BASIC"}
    bad = {"HTTP_AUTHORIZATION": _basic("ops", "wrong")}
    assert anonymous.get("/auth/info", **bad).json() == {"workflow": "BASIC"}

    good = {"HTTP_AUTHORIZATION": _basic("ops", "pw-ops-12345")}
    response = anonymous.get("/auth/verify", **good)
    assert response.status_code == 200 and response.json() is True
    _pinot_error(anonymous.get("/auth/verify", **bad), 401)
    _pinot_error(anonymous.get("/auth/verify"), 401)
    # With good credentials Pinot's UI sends them on every call: our API takes them.
    assert anonymous.get("/cluster/info", **good).json() == {"clusterName": "PinotCluster"}


# --- minion tasks, logical tables, schema summaries -----------------------------------------------
def test_what_this_cluster_does_not_have(api, cluster):
    assert api.get("/tasks/tasktypes").json() == []
    assert api.get("/logicalTables").json() == []
    info = api.get("/tasks/scheduler/information").json()
    assert {"Version", "SchedulerName", "NumberOfJobsExecuted", "InStandbyMode", "JobDetails"} <= (
        set(info)
    )
    assert info["JobDetails"] == [] and info["NumberOfJobsExecuted"] == 0


def test_schemas_info(api, github):
    schema = load("githubEvents_schema.json")
    assert api.get("/schemas/info").json() == [
        {
            "schemaName": "githubEvents",
            "numDimensionFields": len(schema.get("dimensionFieldSpecs", [])),
            "numDateTimeFields": len(schema.get("dateTimeFieldSpecs", [])),
            "numMetricFields": len(schema.get("metricFieldSpecs", [])),
            "numComplexFields": len(schema.get("complexFieldSpecs", [])),
        }
    ]
    # The literal path wins: the schema itself is still at /schemas/githubEvents.
    assert api.get("/schemas/githubEvents").json()["schemaName"] == "githubEvents"


# --- errors as JSON -------------------------------------------------------------------------------
def test_unknown_api_paths_and_methods_answer_json(api, cluster):
    for path in ("/nope", "/api/v1/nope", "/instances/a/b/c", "/tenants/x/y/z", "/zk/nope/x"):
        _pinot_error(api.get(path), 404)
        _pinot_error(APIClient().get(path), 404)  # before any login, too
    _pinot_error(api.delete("/version"), 405)  # a DRF view
    _pinot_error(api.post("/cluster/info"), 405)
    response = APIClient().post("/segmentConsumed")  # a plain Django view (require_GET)
    assert _pinot_error(response, 405)["error"].startswith('Method "POST" not allowed')
    assert response["Allow"] == "GET"
    _pinot_error(APIClient().get("/segmentCommitEndWithMetadata"), 405)


def test_console_pages_keep_their_html_404(admin_client, cluster):
    for path in ("/ui/nope/", "/ui/tables/x/y/z/w/", "/login/nope"):
        response = admin_client.get(path, HTTP_ACCEPT="text/html")
        assert response.status_code == 404
        assert response["Content-Type"].startswith("text/html"), path


def test_the_openapi_schema_lists_every_path():
    from console.api.schema_generator import PinotSchemaGenerator

    paths = PinotSchemaGenerator().get_schema(request=None, public=True)["paths"]
    expected = {
        "/version": {"get"},
        "/instances": {"get"},
        "/instances/{name}": {"get"},
        "/instances/{name}/state": {"put", "post"},
        "/cluster/info": {"get"},
        "/cluster/configs": {"get"},
        "/tenants": {"get"},
        "/tenants/{name}": {"get"},
        "/tenants/{name}/tables": {"get"},
        "/brokers/tenants/{name}": {"get"},
        "/auth/info": {"get"},
        "/auth/verify": {"get"},
        "/tasks/tasktypes": {"get"},
        "/tasks/scheduler/information": {"get"},
        "/logicalTables": {"get"},
        "/schemas/info": {"get"},
    }
    for path, methods in expected.items():
        assert methods <= set(paths.get(path, {})), path
