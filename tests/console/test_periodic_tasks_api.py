"""Pinot's periodic task endpoints (`GET /periodictask/names`, `GET /periodictask/run`) against the
real ZooKeeper: roles (401 anonymous, 403 viewers audited DENIED), 404 for an unknown task or
table and 400 for a malformed name or type (audited REJECTED, nothing queued), Pinot's answer
`{"taskId": "api-<8 hex>", "isSuccessful": true}` with the task queued once the request's writes
commit. That the queued task runs in a worker and records its run is in
`test_healing_end_to_end.py`."""

from __future__ import annotations

import re

import pytest
from rest_framework.test import APIClient

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.models import AuditEntry, HealingRun
from tests.accounts import grant
from tests.cluster_fixtures import load
from tests.ingest_cluster import table_config

pytestmark = [pytest.mark.django_db]

TASK = "RealtimeSegmentValidationManager"
RUN = "/periodictask/run"


def _client(django_user_model, name: str, role: str | None) -> APIClient:
    user = django_user_model.objects.create_user(name, password="a-long-test-password")
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
def github(servers, topic, zk) -> None:
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(table_config(topic))


def test_the_names_are_listed_to_any_account(viewer):
    resp = viewer.get("/periodictask/names")
    assert resp.status_code == 200
    assert resp.json() == ["RealtimeSegmentValidationManager", "SegmentStatusChecker"]
    assert APIClient().get("/periodictask/names").status_code == 401


def test_anonymous_callers_get_401_and_nothing_is_audited():
    resp = APIClient().get(RUN, {"taskname": TASK, "tableName": "githubEvents"})
    assert resp.status_code == 401
    assert not AuditEntry.objects.exists()


def test_viewers_are_refused_and_audited(viewer, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as queued:
        resp = viewer.get(RUN, {"taskname": TASK, "tableName": "githubEvents", "comment": "try"})
    assert resp.status_code == 403
    assert resp.json()["code"] == 403
    assert queued == []
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.result, entry.status_code) == ("run_periodic_task", "DENIED", 403)
    assert (entry.target, entry.reason) == ("githubEvents_REALTIME", "try")


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.parametrize(
    ("params", "status", "error"),
    [
        ({"taskname": "RetentionManager"}, 404, "Periodic task 'RetentionManager' not found."),
        ({}, 404, "Periodic task '' not found."),
        ({"taskname": TASK, "tableName": "nosuch"}, 404, "table nosuch not found"),
        ({"taskname": TASK, "tableName": "githubEvents", "type": "OFFLINE"}, 404, "_OFFLINE"),
        ({"taskname": TASK, "tableName": "githubEvents_OFFLINE"}, 404, "REALTIME tables only"),
        ({"taskname": TASK, "tableName": "githubEvents", "type": "HYBRID"}, 400, "type must be"),
        (
            {"taskname": TASK, "tableName": "githubEvents_REALTIME", "type": "OFFLINE"},
            400,
            "is not a OFFLINE table name",
        ),
        ({"taskname": TASK, "tableName": "bad/name"}, 400, "table name"),
    ],
)
def test_bad_requests_are_refused_with_the_reason_and_queue_nothing(
    operator, github, django_capture_on_commit_callbacks, params, status, error
):
    with django_capture_on_commit_callbacks() as queued:
        resp = operator.get(RUN, params)
    assert resp.status_code == status, resp.content
    assert resp.json()["code"] == status
    assert error in resp.json()["error"]
    assert queued == []
    entry = AuditEntry.objects.get()
    assert (entry.result, entry.status_code) == ("REJECTED", status)
    assert error in entry.detail["error"]


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.parametrize(
    ("params", "table"),
    [
        ({"taskname": TASK, "tableName": "githubEvents"}, "githubEvents_REALTIME"),
        (
            {"taskname": TASK, "tableName": "githubEvents", "type": "realtime"},
            "githubEvents_REALTIME",
        ),
        ({"taskname": TASK, "tableName": "githubEvents_REALTIME"}, "githubEvents_REALTIME"),
        ({"taskname": TASK}, None),
        (
            {"taskname": "SegmentStatusChecker", "tableName": "githubEvents"},
            "githubEvents_REALTIME",
        ),
    ],
)
def test_an_operator_queues_one_run_and_gets_pinots_answer(
    operator, github, django_capture_on_commit_callbacks, params, table
):
    with django_capture_on_commit_callbacks() as queued:
        resp = operator.get(RUN, {**params, "comment": "doctor said so"})
    assert resp.status_code == 200, resp.content
    body = resp.json()
    assert set(body) == {"taskId", "isSuccessful"} and body["isSuccessful"] is True
    assert re.fullmatch(r"api-[0-9a-f]{8}", body["taskId"])
    assert len(queued) == 1  # sent when the request's writes commit (not under this test)
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.result, entry.reason) == (
        "run_periodic_task",
        "OK",
        "doctor said so",
    )
    assert entry.target == (table or params["taskname"])
    assert entry.detail == {
        "taskName": params["taskname"],
        "taskId": body["taskId"],
        "table": table,
    }
    assert not HealingRun.objects.exists()  # recorded by the task, once a worker ran it


@pytest.mark.zk
@pytest.mark.redis
def test_a_browser_session_must_send_the_consoles_header(
    django_user_model, github, django_capture_on_commit_callbacks
):
    """Pinot's run is a GET, which CSRF protection does not cover: another site's <img> could
    make a signed-in operator's browser call it. The console's own calls send X-Console-Page."""
    grant(
        django_user_model.objects.create_user("sess", password="a-long-test-password"), "operator"
    )
    browser = APIClient()
    assert browser.login(username="sess", password="a-long-test-password")
    params = {"taskname": TASK, "tableName": "githubEvents"}
    with django_capture_on_commit_callbacks() as queued:
        refused = browser.get(RUN, params)
    assert refused.status_code == 403
    assert "X-Console-Page: 1" in refused.json()["error"]
    assert queued == []
    assert AuditEntry.objects.get().result == "REJECTED"
    with django_capture_on_commit_callbacks() as queued:
        allowed = browser.get(RUN, params, HTTP_X_CONSOLE_PAGE="1")
    assert allowed.status_code == 200 and len(queued) == 1
    assert AuditEntry.objects.latest("id").source == "page"
