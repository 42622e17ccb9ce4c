"""The healing history in the console's JSON API: `GET /api/v1/tables/{table}/healing` (newest
first, paged, filtered) and `GET /api/v1/healing/runs/{runId}` (404 until recorded), from
HealingRun rows written straight to the database; and the new paths in the OpenAPI schema."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone
from drf_spectacular.validation import validate_schema
from rest_framework.test import APIClient

from tables.models import HealingRun
from tests.console import mirror_factory as mf

pytestmark = pytest.mark.django_db

START_MS = int(timezone.now().timestamp() * 1000) - 3_600_000
ACTION = {
    "kind": "commitStoppedAfterStep1",
    "detail": "events__0__3 DONE but still CONSUMING: made ONLINE, events__0__4 CONSUMING",
    "partition": 0,
    "segment": "events__0__3__20240101T0000Z",
    "new_segment": "events__0__4__20240101T0000Z",
    "instances": ["Server_a_8001"],
    "data_loss": False,
}


def record(table: str, run_id: str, minute: int, trigger: str = "schedule", **report) -> None:
    started = START_MS + minute * 60_000
    HealingRun.record(
        {
            "table": table,
            "runId": run_id,
            "trigger": trigger,
            "startedMs": started,
            "finishedMs": started + 250,
            **report,
        }
    )


@pytest.fixture
def client(django_user_model) -> APIClient:
    client = APIClient()
    client.force_authenticate(django_user_model.objects.create_user("reader", password="pw-12345"))
    return client


@pytest.fixture
def history() -> None:
    mf.table("events")
    record("events_REALTIME", "schedule-00000001", 1)
    record("events_REALTIME", "mirror-00000002", 2, "mirror", actions=[ACTION])
    record("events_REALTIME", "api-00000003", 3, "api", error="consuming repairs: boom")
    record("events_REALTIME", "schedule-00000004", 4, waiting=["partition 1: guard until 12:08"])
    record("other_REALTIME", "schedule-00000004", 4)


def test_a_tables_runs_newest_first_with_what_they_did(client, history):
    resp = client.get("/api/v1/tables/events/healing")
    assert resp.status_code == 200
    body = resp.json()
    assert body["count"] == 4
    assert [r["runId"] for r in body["results"]] == [
        "schedule-00000004",
        "api-00000003",
        "mirror-00000002",
        "schedule-00000001",
    ]
    newest, failed, repaired, _ = body["results"]
    assert newest["waiting"] == ["partition 1: guard until 12:08"]
    assert (newest["error"], newest["actionCount"], newest["durationMs"]) == (None, 0, 250)
    assert failed["error"] == "consuming repairs: boom" and failed["trigger"] == "api"
    assert repaired["actions"] == [ACTION] and repaired["actionCount"] == 1
    assert set(repaired) == {
        "runId", "table", "trigger", "startedAt", "finishedAt", "durationMs", "actionCount",
        "actions", "waiting", "skipped", "error",
    }  # fmt: skip


def test_paging_and_filters(client, history):
    page = client.get("/api/v1/tables/events_REALTIME/healing", {"page_size": 3, "page": 2}).json()
    assert (page["count"], page["numPages"], len(page["results"])) == (4, 2, 1)
    acted = client.get("/api/v1/tables/events/healing", {"acted": "true"}).json()["results"]
    assert [r["runId"] for r in acted] == ["api-00000003", "mirror-00000002"]
    idle = client.get("/api/v1/tables/events/healing", {"acted": "false"}).json()["results"]
    assert [r["runId"] for r in idle] == ["schedule-00000004", "schedule-00000001"]
    mirror = client.get("/api/v1/tables/events/healing", {"trigger": "mirror"}).json()["results"]
    assert [r["runId"] for r in mirror] == ["mirror-00000002"]
    bad = client.get("/api/v1/tables/events/healing", {"trigger": "cron"})
    assert bad.status_code == 400


def test_unknown_and_malformed_tables(client, history):
    unknown = client.get("/api/v1/tables/nosuch/healing")
    assert unknown.status_code == 404 and "nosuch" in unknown.json()["error"]
    assert client.get("/api/v1/tables/a__b/healing").status_code == 400
    assert APIClient().get("/api/v1/tables/events/healing").status_code == 401


def test_a_run_by_its_id_is_404_until_recorded(client, history):
    missing = client.get("/api/v1/healing/runs/api-0badcafe")
    assert missing.status_code == 404
    assert missing.json() == {
        "code": 404,
        "error": "healing run api-0badcafe not found (not recorded yet, or pruned)",
    }
    record("events_REALTIME", "api-0badcafe", 9, "api", actions=[ACTION])
    found = client.get("/api/v1/healing/runs/api-0badcafe").json()
    assert (found["runId"], found["count"]) == ("api-0badcafe", 1)
    assert found["results"][0]["actions"] == [ACTION]
    assert "lastSynced" in found


def test_a_run_over_every_table_has_one_result_per_table(client, history):
    body = client.get("/api/v1/healing/runs/schedule-00000004").json()
    assert [r["table"] for r in body["results"]] == ["events_REALTIME", "other_REALTIME"]


def test_a_malformed_run_id_is_400(client):
    resp = client.get("/api/v1/healing/runs/-dash-first")
    assert resp.status_code == 400 and "is not a run id" in resp.json()["error"]
    assert client.get("/api/v1/healing/runs/" + "x" * 65).status_code == 400
    assert APIClient().get("/api/v1/healing/runs/api-0badcafe").status_code == 401


def test_the_schema_describes_the_new_paths(client):
    schema = json.loads(client.get("/api/v1/schema/?format=json").content)
    validate_schema(schema)
    paths = schema["paths"]
    for path in (
        "/api/v1/tables/{table}/healing",
        "/api/v1/healing/runs/{run_id}",
        "/periodictask/names",
        "/periodictask/run",
    ):
        assert path in paths, path
    run = paths["/periodictask/run"]["get"]
    taskname = next(p for p in run["parameters"] if p["name"] == "taskname")
    assert taskname["required"] and taskname["schema"]["enum"] == [
        "RealtimeSegmentValidationManager",
        "SegmentStatusChecker",
    ]
    listing = paths["/api/v1/tables/{table}/healing"]["get"]
    assert {"trigger", "acted", "page", "page_size"} <= {p["name"] for p in listing["parameters"]}
