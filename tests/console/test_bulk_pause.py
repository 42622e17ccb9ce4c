"""Bulk pause and resume (`/api/v1/bulk/...`) on a real ZooKeeper: dry run, apply, audit."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.idealstate import consuming_segments, pause_state
from tables.models import AuditEntry
from tables.zk.records import read_record
from tests.cluster_fixtures import PATHS, load
from tests.console import mirror_factory as mf
from tests.console.test_force_commit import _user, sent_names, snapshot
from tests.ingest_cluster import table_config

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]
TENANT = "DefaultTenant_REALTIME"


@pytest.fixture
def operator(db, django_user_model) -> APIClient:
    return _user(django_user_model, "op", "operator")


@pytest.fixture
def two_tables(servers, topic, zk) -> list[str]:
    """githubEvents and a copy, both mirrored under the tenant (the pages select from there)."""
    manager = ResourceManager(context.current())
    schema = load("githubEvents_schema.json")
    manager.add_schema(schema)
    manager.add_table(table_config(topic))
    copy = table_config(topic)
    copy["tableName"] = "githubCopy"
    schema["schemaName"] = "githubCopy"
    manager.add_schema(schema)
    copy["segmentsConfig"]["schemaName"] = "githubCopy"
    manager.add_table(copy)
    for raw in ("githubEvents", "githubCopy"):
        mf.table(raw, tenant=TENANT)
    mf.table("elsewhere", tenant="Other_REALTIME")
    return ["githubCopy_REALTIME", "githubEvents_REALTIME"]


def ideal(table: str):
    return read_record(context.current().client, PATHS.idealstate(table)).record


def test_a_dry_run_lists_the_tenants_tables_and_changes_nothing(operator, two_tables, zk):
    before = snapshot(zk)
    reply = operator.post(f"/api/v1/bulk/pause?tenant={TENANT}")
    assert reply.status_code == 200, reply.content
    body = reply.json()
    assert (body["action"], body["dryRun"]) == ("pause", True)
    assert [t["table"] for t in body["tables"]] == two_tables
    for item in body["tables"]:
        assert item["pauseFlag"] is False
        assert item["consumingSegments"] == consuming_segments(ideal(item["table"]))
        assert item["change"] == "pause; commit 4 segment(s)"
    assert snapshot(zk) == before
    assert AuditEntry.objects.count() == 0


def test_apply_pauses_each_table_and_audits_each(operator, two_tables, zk):
    reply = operator.post(f"/api/v1/bulk/pause?tenant={TENANT}&dryRun=false&comment=maintenance")
    assert reply.status_code == 200, reply.content
    items = reply.json()["tables"]
    assert [(t["table"], t["result"], t["pauseFlag"]) for t in items] == [
        (name, "OK", True) for name in two_tables
    ]
    for name in two_tables:
        assert pause_state(ideal(name)).paused
    assert len(sent_names(zk)) == 8  # FORCE_COMMIT for the 4 consuming segments of each
    audits = AuditEntry.objects.filter(action="pause").order_by("target")
    assert [(a.target, a.result, a.reason) for a in audits] == [
        (name, "OK", "maintenance") for name in two_tables
    ]
    assert all(a.detail["bulk"] for a in audits)

    # The resume preview now proposes the resume; applying it by table names resumes both.
    preview = operator.post("/api/v1/bulk/resume?tables=githubEvents,githubCopy").json()
    assert {t["change"] for t in preview["tables"]} == {"resume; start new consuming segments"}
    reply = operator.post(
        "/api/v1/bulk/resume?tables=githubEvents,githubCopy&dryRun=false&comment=done"
    )
    assert [t["result"] for t in reply.json()["tables"]] == ["OK", "OK"]
    assert not any(pause_state(ideal(name)).paused for name in two_tables)


def test_bad_bulk_requests_change_nothing(operator, two_tables, zk, django_user_model):
    viewer = _user(django_user_model, "oncall", "viewer")
    before = snapshot(zk)
    cases = [
        (operator, "/api/v1/bulk/pause", 400, "either tables"),
        (operator, f"/api/v1/bulk/pause?tenant={TENANT}&tables=a", 400, "either tables"),
        (operator, "/api/v1/bulk/pause?tenant=Nobody_REALTIME", 400, "no realtime table"),
        # PostgreSQL refuses NUL in a query parameter: a 400, never a 500.
        (operator, "/api/v1/bulk/pause?tenant=%00", 400, "NUL"),
        (operator, f"/api/v1/bulk/pause?tenant={TENANT}&dryRun=false", 400, "comment"),
        (viewer, f"/api/v1/bulk/pause?tenant={TENANT}&dryRun=false&comment=xyz", 403, "pause"),
    ]
    for client, url, status, message in cases:
        reply = client.post(url)
        assert reply.status_code == status, (url, reply.content)
        assert message in json.dumps(reply.json()), reply.json()
    assert snapshot(zk) == before
    (denied,) = AuditEntry.objects.all()
    assert (denied.action, denied.result, denied.target) == ("pause", "DENIED", TENANT)
    # An unknown table among known ones is reported on its own; the others still go through.
    reply = operator.post("/api/v1/bulk/pause?tables=githubEvents,nope&dryRun=false&comment=xyz")
    results = {t["table"]: (t["result"], t["status"]) for t in reply.json()["tables"]}
    assert results == {"githubEvents_REALTIME": ("OK", 200), "nope_REALTIME": ("REJECTED", 404)}


def test_audit_summaries_say_what_an_action_did():
    resume = {
        "segments": [
            {
                "segment": "t__0__5",
                "startOffset": 900,
                "previousOffset": 700,
                "skipped": 200,
                "startReason": "largest",
            },
            {
                "segment": "t__1__5",
                "startOffset": 1,
                "previousOffset": 80,
                "skipped": 0,
                "startReason": "smallest",
            },
            {
                "segment": "t__2__5",
                "startOffset": 40,
                "previousOffset": 40,
                "skipped": 0,
                "startReason": None,
            },
        ],
        "dataLoss": 0,
    }
    assert AuditEntry(detail=resume).summary == (
        "3 new consuming segment(s); t__0__5: skipped 200 offset(s) from 700 (largest); "
        "t__1__5: starts at 1, not 80 (smallest)"
    )
    pause = {"written": False, "consumingSegments": [], "jobId": None}
    assert AuditEntry(detail=pause).summary == "already paused; 0 segment(s) to commit"
    assert AuditEntry(detail={"jobId": "j", "segments": ["a", "b"]}).summary == (
        "2 segment(s) to commit"
    )
    assert AuditEntry(detail={"error": "Table x not found!"}).summary == "Table x not found!"
