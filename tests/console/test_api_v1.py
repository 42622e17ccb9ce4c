"""The console's JSON API (`/api/v1/`) over mirror rows written by the test: every endpoint, paging,
filters and sorts, 404/400s, who may read, and authentication (session, token, anonymous)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from console import roles
from tables.models import (
    AuditEntry,
    LeadControllerPartition,
    MirroredInstance,
    MirroredSegment,
    MirroredTable,
    MirrorState,
    PartitionStatus,
)
from tests.accounts import grant

pytestmark = pytest.mark.django_db

SYNCED = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
SYNCED_TEXT = "2026-01-02T03:04:05Z"


def user_with(role: str, username: str | None = None):
    user = get_user_model().objects.create_user(username or role, password="pw-for-tests-123")
    grant(user, role)
    return user


@pytest.fixture
def viewer():
    return user_with(roles.VIEWER)


@pytest.fixture
def api(viewer) -> APIClient:
    client = APIClient()
    client.force_authenticate(viewer)
    return client


def table(name: str, **fields) -> MirroredTable:
    raw, _, kind = name.rpartition("_")
    defaults = {"raw_name": raw, "table_type": kind, "last_synced": SYNCED, "tenant": "Default"}
    return MirroredTable.objects.create(name=name, **{**defaults, **fields})


def segment(owner: MirroredTable, partition: int, sequence: int, state: str, **fields):
    name = f"{owner.raw_name}__{partition}__{sequence}__20260102T0304Z"
    return MirroredSegment.objects.create(
        table=owner,
        name=name,
        partition=partition,
        sequence=sequence,
        display_state=state,
        ideal_states={"Server_a_1": "ONLINE"},
        external_states={"Server_a_1": state},
        status="DONE" if state == "ONLINE" else "IN_PROGRESS",
        metadata={"segment.realtime.status": "DONE"},
        last_synced=SYNCED,
        **fields,
    )


@pytest.fixture
def mirror():
    MirrorState.objects.create(name="zk", last_synced=SYNCED, last_attempt=SYNCED, duration_ms=12)
    github = table(
        "githubEvents_REALTIME",
        health="BAD",
        health_rank=4,
        max_records_lag=500,
        num_partitions=2,
        config={"tableName": "githubEvents_REALTIME"},
    )
    airline = table("airlineStats_REALTIME", health="GOOD", max_records_lag=10, paused=True)
    table("baseballStats_OFFLINE", health="WARNING", health_rank=3, tenant="Other")
    for partition in (0, 1):
        PartitionStatus.objects.create(
            table=github,
            partition=partition,
            consuming_segment=f"githubEvents__{partition}__1__20260102T0304Z",
            replicas={"Server_a_1": {"state": "CONSUMING", "recordsLag": 5}},
            records_lag=5 * partition,
            current_offset=1000,
            upstream_offset=1000 + 5 * partition,
            verdict="CONSUMING",
            last_synced=SYNCED,
        )
    segment(github, 0, 0, "ONLINE", total_docs=100)
    segment(github, 0, 1, "CONSUMING")
    segment(github, 1, 0, "ERROR", has_error=True)
    segment(github, 1, 1, "CONSUMING")
    segment(airline, 0, 0, "OFFLINE", all_offline=True)
    for i in range(3):
        LeadControllerPartition.objects.create(
            partition_id=i,
            name=f"leadControllerResource_{i}",
            controller="Controller_127.0.0.1_9000",
            tables=["githubEvents_REALTIME"] if i == 2 else [],
            last_synced=SYNCED,
        )
    MirroredInstance.objects.create(
        name="Server_a_1",
        kind="SERVER",
        tags=["DefaultTenant_REALTIME"],
        live=True,
        last_synced=SYNCED,
    )
    MirroredInstance.objects.create(
        name="Controller_127.0.0.1_9000", kind="CONTROLLER", live=False, last_synced=SYNCED
    )
    return github


def results(response) -> list[dict]:
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["lastSynced"] == SYNCED_TEXT
    return body["results"]


def names(response) -> list[str]:
    return [row["name"] for row in results(response)]


def test_whoami_by_role(api, mirror):
    body = api.get("/api/v1/whoami").json()
    assert body == {
        "lastSynced": SYNCED_TEXT,
        "result": {"username": "viewer", "role": "viewer", "actions": []},
    }
    operator = APIClient()
    operator.force_authenticate(user_with(roles.OPERATOR))
    result = operator.get("/api/v1/whoami").json()["result"]
    assert result["role"] == "operator"
    assert result["actions"] == sorted(roles.OPERATOR_ACTIONS)
    admin = APIClient()
    admin.force_authenticate(user_with(roles.ADMIN))
    assert "manage_users" in admin.get("/api/v1/whoami").json()["result"]["actions"]


def test_every_response_has_last_synced_even_before_the_first_sync(api):
    for url in ("/api/v1/whoami", "/api/v1/tables", "/api/v1/audit", "/api/v1/leaders"):
        assert api.get(url).json()["lastSynced"] is None
    mirror = api.get("/api/v1/mirror").json()["result"]
    assert mirror["lastSynced"] is None
    assert mirror["stale"] is True
    assert mirror["ageSeconds"] is None


def test_mirror_staleness(api, mirror, settings):
    result = api.get("/api/v1/mirror").json()["result"]
    assert result["name"] == "zk"
    assert result["durationMs"] == 12
    assert result["stale"] is True  # SYNCED is long ago
    assert result["syncIntervalSeconds"] == settings.MIRROR_SYNC_SECONDS
    MirrorState.objects.update(last_synced=timezone.now())
    fresh = api.get("/api/v1/mirror").json()["result"]
    assert fresh["stale"] is False
    assert fresh["ageSeconds"] < 3 * settings.MIRROR_SYNC_SECONDS


def test_tables_default_sort_is_worst_first(api, mirror):
    body = api.get("/api/v1/tables").json()
    assert [t["name"] for t in body["results"]] == [
        "githubEvents_REALTIME",
        "baseballStats_OFFLINE",
        "airlineStats_REALTIME",
    ]
    assert (body["count"], body["page"], body["numPages"], body["pageSize"]) == (3, 1, 1, 50)
    first = body["results"][0]
    assert first["rawName"] == "githubEvents"
    assert first["maxRecordsLag"] == 500
    assert first["synced"] == SYNCED_TEXT
    assert "config" not in first


def test_tables_filters_and_sorts(api, mirror):
    assert names(api.get("/api/v1/tables?sort=name"))[0] == "airlineStats_REALTIME"
    assert names(api.get("/api/v1/tables?sort=-lag"))[:2] == [
        "githubEvents_REALTIME",
        "airlineStats_REALTIME",
    ]
    assert names(api.get("/api/v1/tables?q=GITHUB")) == ["githubEvents_REALTIME"]
    assert names(api.get("/api/v1/tables?health=GOOD,WARNING&sort=name")) == [
        "airlineStats_REALTIME",
        "baseballStats_OFFLINE",
    ]
    assert names(api.get("/api/v1/tables?paused=true")) == ["airlineStats_REALTIME"]
    assert len(names(api.get("/api/v1/tables?paused=false"))) == 2
    assert names(api.get("/api/v1/tables?tenant=Other")) == ["baseballStats_OFFLINE"]
    assert names(api.get("/api/v1/tables?type=OFFLINE")) == ["baseballStats_OFFLINE"]


def test_tables_paging(api, mirror):
    body = api.get("/api/v1/tables?sort=name&page_size=2&page=2").json()
    assert [t["name"] for t in body["results"]] == ["githubEvents_REALTIME"]
    assert (body["count"], body["page"], body["numPages"], body["pageSize"]) == (3, 2, 2, 2)
    assert body["next"] is None
    assert "page_size=2" in body["previous"]
    assert api.get("/api/v1/tables?page=9").status_code == 404


@pytest.mark.parametrize(
    "query", ["sort=wrong", "health=GREAT", "page_size=0", "page_size=5000", "type=HYBRID"]
)
def test_bad_parameters_are_400(api, mirror, query):
    response = api.get(f"/api/v1/tables?{query}")
    assert response.status_code == 400
    assert response.json()["code"] == 400


def test_table_detail_by_raw_or_typed_name(api, mirror):
    for name in ("githubEvents", "githubEvents_REALTIME"):
        body = api.get(f"/api/v1/tables/{name}").json()
        assert body["lastSynced"] == SYNCED_TEXT
        assert body["result"]["name"] == "githubEvents_REALTIME"
        assert body["result"]["config"] == {"tableName": "githubEvents_REALTIME"}
    missing = api.get("/api/v1/tables/nope")
    assert missing.status_code == 404
    assert missing.json() == {"code": 404, "error": "table nope not found"}


def test_partitions(api, mirror):
    rows = results(api.get("/api/v1/tables/githubEvents/partitions"))
    assert [r["partition"] for r in rows] == [0, 1]
    assert rows[1]["recordsLag"] == 5
    assert rows[0]["replicas"] == {"Server_a_1": {"state": "CONSUMING", "recordsLag": 5}}
    one = api.get("/api/v1/tables/githubEvents/partitions/1").json()
    assert one["result"]["consumingSegment"] == "githubEvents__1__1__20260102T0304Z"
    assert api.get("/api/v1/tables/githubEvents/partitions/7").status_code == 404
    assert api.get("/api/v1/tables/nope/partitions").status_code == 404


def test_segments_paged_and_filtered(api, mirror):
    body = api.get("/api/v1/tables/githubEvents_REALTIME/segments?page_size=3").json()
    assert body["count"] == 4
    assert [(s["partition"], s["sequence"]) for s in body["results"]] == [(0, 0), (0, 1), (1, 0)]
    consuming = results(api.get("/api/v1/tables/githubEvents/segments?state=CONSUMING"))
    assert [s["name"] for s in consuming] == [
        "githubEvents__0__1__20260102T0304Z",
        "githubEvents__1__1__20260102T0304Z",
    ]
    assert len(results(api.get("/api/v1/tables/githubEvents/segments?partition=1"))) == 2
    assert len(results(api.get("/api/v1/tables/githubEvents/segments?status=DONE"))) == 1
    assert api.get("/api/v1/tables/githubEvents/segments?state=BROKEN").status_code == 400


def test_segment_detail(api, mirror):
    name = "githubEvents__0__0__20260102T0304Z"
    result = api.get(f"/api/v1/tables/githubEvents/segments/{name}").json()["result"]
    assert result["name"] == name
    assert result["table"] == "githubEvents_REALTIME"
    assert result["totalDocs"] == 100
    assert result["metadata"] == {"segment.realtime.status": "DONE"}
    assert result["externalStates"] == {"Server_a_1": "ONLINE"}
    missing = api.get("/api/v1/tables/githubEvents/segments/other__0__0__20260102T0304Z")
    assert missing.status_code == 404


def test_segments_and_partitions_show_their_tables_last_sync(api, mirror):
    """An unchanged re-sync confirms a table's segment and partition rows without rewriting them:
    their `synced` is their table's `last_synced`, read with the table (no query per row)."""
    written = SYNCED - dt.timedelta(hours=1)
    MirroredSegment.objects.update(last_synced=written)
    PartitionStatus.objects.update(last_synced=written)
    segment_urls = [
        "/api/v1/tables/githubEvents/segments",
        "/api/v1/tables/githubEvents/segments?state=CONSUMING&sort=-name",
        "/api/v1/errors",
        "/api/v1/errors?table=githubEvents",
    ]
    for url in [*segment_urls, "/api/v1/tables/githubEvents/partitions"]:
        assert {r["synced"] for r in results(api.get(url))} == {SYNCED_TEXT}, url
    name = "githubEvents__0__0__20260102T0304Z"
    one = api.get(f"/api/v1/tables/githubEvents/segments/{name}").json()["result"]
    assert one["synced"] == SYNCED_TEXT
    part = api.get("/api/v1/tables/githubEvents/partitions/1").json()["result"]
    assert part["synced"] == SYNCED_TEXT
    counts = []
    for added in (0, 10):
        for sequence in range(2, 2 + added):
            segment(mirror, 0, sequence, "ONLINE", has_error=True)
            PartitionStatus.objects.create(table=mirror, partition=sequence, last_synced=written)
        with CaptureQueriesContext(connection) as queries:
            for url in ["/api/v1/tables/githubEvents/partitions", *segment_urls[::2]]:
                assert len(results(api.get(url))) > added, url
        counts.append(len(queries))
    assert counts[0] == counts[1]  # the tables come with the rows


def test_errors_across_tables(api, mirror):
    rows = results(api.get("/api/v1/errors"))
    assert [(r["table"], r["displayState"]) for r in rows] == [
        ("airlineStats_REALTIME", "OFFLINE"),
        ("githubEvents_REALTIME", "ERROR"),
    ]
    only = results(api.get("/api/v1/errors?table=githubEvents"))
    assert [r["name"] for r in only] == ["githubEvents__1__0__20260102T0304Z"]


def test_leaders_and_instances(api, mirror):
    leaders = results(api.get("/api/v1/leaders"))
    assert [p["partitionId"] for p in leaders] == [0, 1, 2]
    assert leaders[2]["tables"] == ["githubEvents_REALTIME"]
    assert leaders[0]["controller"] == "Controller_127.0.0.1_9000"
    assert names(api.get("/api/v1/instances")) == ["Controller_127.0.0.1_9000", "Server_a_1"]
    assert names(api.get("/api/v1/instances?kind=SERVER")) == ["Server_a_1"]
    assert names(api.get("/api/v1/instances?live=no")) == ["Controller_127.0.0.1_9000"]
    assert names(api.get("/api/v1/instances?tag=DefaultTenant_REALTIME")) == ["Server_a_1"]


def test_audit_paged_and_filtered(api, mirror):
    start = timezone.now()
    for i in range(5):
        AuditEntry.objects.create(
            at=start + dt.timedelta(seconds=i),
            username="olga" if i % 2 else "vic",
            role="operator",
            action="pause" if i < 3 else "resume",
            target=f"table{i}",
            result="OK" if i else "DENIED",
            source="api",
        )
    body = api.get("/api/v1/audit?page_size=2").json()
    assert body["count"] == 5
    assert [e["target"] for e in body["results"]] == ["table4", "table3"]
    assert {e["target"] for e in results(api.get("/api/v1/audit?user=olg"))} == {
        "table1",
        "table3",
    }
    assert len(results(api.get("/api/v1/audit?action=resume"))) == 2
    assert [e["target"] for e in results(api.get("/api/v1/audit?result=DENIED"))] == ["table0"]
    since = (start + dt.timedelta(seconds=3)).isoformat()
    recent = api.get("/api/v1/audit", {"since": since})
    assert [e["target"] for e in results(recent)] == ["table4", "table3"]
    assert api.get("/api/v1/audit?since=yesterday").status_code == 400


def test_token_authentication(mirror):
    user = user_with(roles.VIEWER, "script")
    token = Token.objects.create(user=user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    assert client.get("/api/v1/whoami").json()["result"]["username"] == "script"
    assert len(results(client.get("/api/v1/tables"))) == 3
    client.credentials(HTTP_AUTHORIZATION="Token wrong")
    assert client.get("/api/v1/tables").status_code == 401


def test_session_and_basic_authentication(mirror):
    user_with(roles.OPERATOR, "olga")
    session = APIClient()
    assert session.login(username="olga", password="pw-for-tests-123")
    assert session.get("/api/v1/whoami").json()["result"]["role"] == "operator"
    basic = APIClient()
    basic.credentials(HTTP_AUTHORIZATION="Basic b2xnYTpwdy1mb3ItdGVzdHMtMTIz")  # olga:pw-...
    assert basic.get("/api/v1/tables").status_code == 200


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/whoami",
        "/api/v1/mirror",
        "/api/v1/tables",
        "/api/v1/tables/githubEvents",
        "/api/v1/tables/githubEvents/partitions",
        "/api/v1/tables/githubEvents/segments",
        "/api/v1/errors",
        "/api/v1/leaders",
        "/api/v1/instances",
        "/api/v1/audit",
    ],
)
def test_anonymous_gets_401_not_a_redirect(mirror, url):
    response = APIClient().get(url)
    assert response.status_code == 401
    assert response.json()["code"] == 401


def test_the_api_is_read_only(api, mirror):
    assert api.post("/api/v1/tables", {}).status_code == 405
    assert api.delete("/api/v1/tables/githubEvents").status_code == 405


# --- honest figures: unknown lag, under-replication, tables that never commit ---------------------


def test_an_unknown_lag_is_null_and_flags_are_listed(api):
    from tests.console import mirror_factory as mf

    now = timezone.now()
    orders = mf.table("orders", replication=2, flush_time="1h", rows_per_s=5.0)
    mf.partition(  # one replica up of two, and nobody knows the upstream offset
        orders,
        0,
        verdict="UNDER_REPLICATED",
        health="WARNING",
        replicas={
            "Server_a_8001": mf.replica(offset=10, upstream=10, upstreamOffset=None),
            "Server_b_8002": {},
        },
        current_offset=10,
        upstream_offset=None,
    )
    three_hours_ago = int((now - dt.timedelta(hours=3)).timestamp() * 1000)
    mf.segment(orders, 0, 0, display_state="CONSUMING", created_ms=three_hours_ago)
    MirroredTable.objects.filter(pk=orders.pk).update(segment_count=1, consuming_count=1)

    row = api.get("/api/v1/tables").json()["results"][0]
    assert row["name"] == "orders_REALTIME"
    assert row["lagKnown"] is False
    assert row["maxRecordsLag"] is None and row["maxTimeLagMs"] is None
    assert row["underReplicatedPartitions"] == [0]
    assert row["neverCommitted"].startswith("no segment committed in 3 h")
    detail = api.get("/api/v1/tables/orders_REALTIME").json()["result"]
    assert detail["underReplicatedPartitions"] == [0] and detail["neverCommitted"]

    part = api.get("/api/v1/tables/orders_REALTIME/partitions").json()["results"][0]
    assert part["recordsLag"] is None and part["timeLagMs"] is None
    assert (part["replication"], part["replicasUp"], part["underReplicated"]) == (2, 1, True)
