"""Pinot's segment reset endpoint (`POST /segments/{t}/{segment}/reset`, round 2 §A.7) against the
real ZooKeeper: the servers are registered (live) but not running, so the reset's STATE_TRANSITION
messages are checked as znodes in `INSTANCES/<id>/MESSAGES`.

Covered: an operator's reset messages every replica that is not OFFLINE (Helix's fields, the live
session) and answers Pinot's SuccessResponse plus the instances; OFFLINE, not-live and already
pending replicas are left alone (and the answer says nothing was sent); unknown tables and
segments are 404 and malformed names 400, each with the reason, audited REJECTED, ZooKeeper
unchanged; a viewer gets 403 audited DENIED; an anonymous caller 401; a session needs the CSRF
token; the path is in the OpenAPI schema.
"""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.names import LLCSegmentName
from tables.domain.znrecord import ZNRecord
from tables.models import AuditEntry
from tables.zk import messages
from tables.zk.records import create_record, read_record
from tests.accounts import grant
from tests.cluster_fixtures import PATHS, SERVERS, load
from tests.ingest_cluster import table_config

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]

TABLE = "githubEvents_REALTIME"
PASSWORD = "a-long-test-password"


def _client(django_user_model, name: str, role: str | None) -> APIClient:
    user = django_user_model.objects.create_user(name, password=PASSWORD)
    if role:
        grant(user, role)
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def operator(django_user_model) -> APIClient:
    return _client(django_user_model, "op", "operator")


@pytest.fixture
def viewer(django_user_model) -> APIClient:
    return _client(django_user_model, "oncall", "viewer")


@pytest.fixture
def table(servers, topic, zk) -> dict[int, str]:
    """githubEvents on the 4-partition topic, replication 2 over the 3 servers; partition -> its
    CONSUMING segment."""
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(table_config(topic))
    out = {}
    for segment in manager.idealstate(TABLE):
        name = LLCSegmentName.parse(segment)
        assert name is not None
        out[name.partition_group_id] = segment
    return out


def replicas(segment: str) -> list[str]:
    return sorted(ResourceManager(context.current()).idealstate(TABLE)[segment])


def external_view(zk, states: dict[str, dict[str, str]]) -> None:
    """Write the table's ExternalView (what the servers would report)."""
    path = PATHS.externalview(TABLE)
    if zk.exists(path):
        zk.delete(path)
    create_record(zk, path, ZNRecord(id=TABLE, map_fields=states))


def waiting(zk) -> dict[str, list[ZNRecord]]:
    """Server -> the messages waiting for it."""
    out = {}
    for server in SERVERS:
        found = [
            messages.read_message(zk, PATHS, server, i)
            for i in messages.message_ids(zk, PATHS, server)
        ]
        out[server] = [m for m in found if m is not None]
    return out


def snapshot(zk) -> dict[str, bytes]:
    out: dict[str, bytes] = {}

    def walk(path: str) -> None:
        for child in zk.get_children(path):
            full = f"{path.rstrip('/')}/{child}"
            out[full] = zk.get(full)[0]
            walk(full)

    walk("/")
    return out


def test_an_operator_resets_every_replica_that_is_not_offline(operator, table, zk, settings):
    settings.CONTROLLER_INSTANCE_ID = "Controller_127.0.0.1_9000"
    segment = table[0]
    first, second = replicas(segment)
    external_view(zk, {segment: {first: "ERROR", second: "CONSUMING"}})

    reply = operator.post(f"/segments/{TABLE}/{segment}/reset?comment=stuck in ERROR")

    assert reply.status_code == 200, reply.content
    assert reply.json() == {
        "status": f"Successfully reset segment: {segment} of table: {TABLE}",
        "instances": [first, second],
    }
    by_server = waiting(zk)
    assert {s for s, found in by_server.items() if found} == {first, second}
    for server, from_state in ((first, "ERROR"), (second, "CONSUMING")):
        (message,) = by_server[server]
        fields = message.simple_fields
        session = read_record(zk, PATHS.liveinstance(server)).record.simple_fields["SESSION_ID"]
        assert fields["MSG_TYPE"] == "STATE_TRANSITION"
        assert (fields["FROM_STATE"], fields["TO_STATE"]) == (from_state, "OFFLINE")
        assert (fields["RESOURCE_NAME"], fields["PARTITION_NAME"]) == (TABLE, segment)
        assert (fields["TGT_NAME"], fields["TGT_SESSION_ID"]) == (server, session)
        assert fields["SRC_NAME"] == "Controller_127.0.0.1_9000-ADMIN"
    (audit,) = AuditEntry.objects.all()
    assert (audit.action, audit.target, audit.result) == (
        "reset_segment",
        f"{TABLE}/{segment}",
        "OK",
    )
    assert (audit.username, audit.role, audit.status_code) == ("op", "operator", 200)
    assert audit.reason == "stuck in ERROR"
    assert audit.detail == {"instances": [first, second]}


def test_offline_not_live_and_pending_replicas_are_left_alone(operator, table, zk):
    segment = table[1]
    first, second = replicas(segment)
    external_view(zk, {segment: {first: "OFFLINE", second: "ERROR"}})
    zk.delete(PATHS.liveinstance(second))

    reply = operator.post(f"/segments/githubEvents/{segment}/reset")  # a raw name works too

    assert reply.status_code == 200, reply.content
    body = reply.json()
    assert body["instances"] == []
    assert "no replica was messaged" in body["note"]
    assert body["status"] == f"Successfully reset segment: {segment} of table: {TABLE}"
    assert not any(waiting(zk).values())

    # One live ERROR replica: messaged once; a second reset finds it pending and sends nothing.
    external_view(zk, {segment: {first: "ERROR", second: "OFFLINE"}})
    assert operator.post(f"/segments/{TABLE}/{segment}/reset").json()["instances"] == [first]
    again = operator.post(f"/segments/{TABLE}/{segment}/reset").json()
    assert again["instances"] == [] and "note" in again
    assert len(waiting(zk)[first]) == 1
    results = list(AuditEntry.objects.order_by("id").values_list("result", flat=True))
    assert results == ["OK", "OK", "OK"]


@pytest.mark.parametrize(
    ("path", "status", "error"),
    [
        ("/segments/nope_REALTIME/nope__0__0__20240101T0000Z/reset", 404, "table nope not found"),
        (
            f"/segments/{TABLE}/githubEvents__9__0__20240101T0000Z/reset",
            404,
            "not in the IdealState",
        ),
        (f"/segments/{TABLE}/.hidden/reset", 400, "segment name"),
        ("/segments/bad__name/seg/reset", 400, "must not contain"),
    ],
)
def test_unknown_and_malformed_names_are_refused_with_the_reason(
    operator, table, zk, path, status, error
):
    external_view(zk, {table[0]: dict.fromkeys(replicas(table[0]), "ERROR")})
    before = snapshot(zk)

    reply = operator.post(path + "?comment=why")

    assert reply.status_code == status, reply.content
    assert reply.json()["code"] == status
    assert error in reply.json()["error"]
    assert snapshot(zk) == before
    (audit,) = AuditEntry.objects.all()
    assert (audit.action, audit.result, audit.status_code) == ("reset_segment", "REJECTED", status)
    assert audit.reason == "why"
    assert error in audit.detail["error"]


def test_a_viewer_is_refused_and_audited_and_anonymous_gets_401(viewer, table, zk):
    segment = table[2]
    external_view(zk, {segment: dict.fromkeys(replicas(segment), "ERROR")})
    before = snapshot(zk)

    reply = viewer.post(f"/segments/{TABLE}/{segment}/reset?comment=let me")

    assert reply.status_code == 403
    assert "may not perform 'reset_segment'" in reply.json()["error"]
    (audit,) = AuditEntry.objects.all()
    assert (audit.username, audit.result, audit.status_code) == ("oncall", "DENIED", 403)
    assert (audit.target, audit.reason) == (f"{TABLE}/{segment}", "let me")

    assert APIClient().post(f"/segments/{TABLE}/{segment}/reset").status_code == 401
    assert AuditEntry.objects.count() == 1
    assert snapshot(zk) == before


def test_a_console_session_needs_the_csrf_token(django_user_model, table, zk):
    user = grant(django_user_model.objects.create_user("page", password=PASSWORD), "operator")
    browser = APIClient(enforce_csrf_checks=True)
    browser.force_login(user)
    segment = table[3]
    external_view(zk, {segment: dict.fromkeys(replicas(segment), "ERROR")})

    refused = browser.post(f"/segments/{TABLE}/{segment}/reset")
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["error"]
    assert not any(waiting(zk).values())

    browser.get("/ui/errors/")  # sets the csrftoken cookie
    token = browser.cookies["csrftoken"].value
    reply = browser.post(
        f"/segments/{TABLE}/{segment}/reset", headers={"X-CSRFToken": token, "X-Console-Page": "1"}
    )
    assert reply.status_code == 200, reply.content
    assert reply.json()["instances"] == replicas(segment)
    assert AuditEntry.objects.get(result="OK").source == "page"


def test_the_reset_is_in_the_openapi_schema(operator):
    schema = operator.get("/api/v1/schema/?format=json").json()
    operation = schema["paths"]["/segments/{table}/{segment}/reset"]["post"]
    assert operation["operationId"] == "segment_reset"
    assert "comment" in {p["name"] for p in operation["parameters"]}
    response = operation["responses"]["200"]["content"]["application/json"]["schema"]
    props = schema["components"]["schemas"][response["$ref"].rsplit("/", 1)[1]]["properties"]
    assert {"status", "instances", "note"} <= set(props)
