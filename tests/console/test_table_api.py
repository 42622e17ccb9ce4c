"""Pinot's controller REST for tables and segments (issue 22), on the real ZooKeeper and Redis:
Pinot's JSON keys, the figures from what the cluster really has, and bad input answered 4xx with
nothing changed. The servers are registered participants only (no server process), so the
ExternalView and commits are written here as the controller would write them; disable/enable and
the debug fan-out against a real server are in tests/tables/server/test_table_state.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from tables import builds
from tables.domain.znrecord import ZNRecord
from tables.models import AuditEntry
from tables.zk.records import create_record, read_record, update_record
from tests.accounts import grant
from tests.cluster_fixtures import PATHS, SERVERS
from tests.console.test_pinot_api import create_github

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]

TABLE = "githubEvents_REALTIME"
TAR = b"x" * 1234  # the committed segment's tar in the deep store


@pytest.fixture
def api(admin_user) -> APIClient:
    client = APIClient()
    client.force_authenticate(admin_user)
    return client


@pytest.fixture
def table(api, servers, topic, zk) -> dict[str, dict[str, str]]:
    """githubEvents with replication 2 on the 3 registered servers; returns its IdealState map."""
    assert create_github(api, topic).status_code == 200
    return read_record(zk, PATHS.idealstate(TABLE)).record.map_fields


def _commit_first(zk, ideal: dict[str, dict[str, str]], tmp: Path) -> tuple[str, list[str]]:
    """Make the first segment committed (DONE, in the deep store, ONLINE in the IdealState) and
    write an ExternalView where its first replica is ONLINE and its second OFFLINE, the other
    segments CONSUMING everywhere. Returns (segment, its replicas)."""
    segment = sorted(ideal)[0]
    replicas = sorted(ideal[segment])

    def done(record: ZNRecord) -> ZNRecord:
        out = record.copy()
        out.simple_fields.update(
            {
                "segment.realtime.status": "DONE",
                "segment.realtime.endOffset": "10",
                "segment.crc": "987654321",
                "segment.size.in.bytes": "999",
                "segment.download.url": "file:///nowhere",
            }
        )
        return out

    update_record(zk, PATHS.segment(TABLE, segment), done)

    def online(record: ZNRecord) -> ZNRecord:
        out = record.copy()
        out.map_fields[segment] = {r: "ONLINE" for r in replicas}
        return out

    update_record(zk, PATHS.idealstate(TABLE), online)
    tar = tmp / f"{segment}.tar.gz"
    tar.write_bytes(TAR)
    store = builds.deep_store()
    store.publish(tar, store.segment_key("githubEvents", segment))
    view = {s: dict(states) for s, states in ideal.items()}
    view[segment] = {replicas[0]: "ONLINE", replicas[1]: "OFFLINE"}
    create_record(zk, PATHS.externalview(TABLE), ZNRecord(id=TABLE, map_fields=view))
    return segment, replicas


def test_tables_type_filter(api, table):
    assert api.get("/tables?type=offline").json() == {"tables": []}
    assert api.get("/tables?type=OFFLINE").json() == {"tables": []}
    assert api.get("/tables?type=realtime").json() == {"tables": ["githubEvents"]}
    assert api.get("/tables").json() == {"tables": ["githubEvents"]}
    resp = api.get("/tables?type=hybrid")
    assert resp.status_code == 400
    assert resp.json() == {"code": 400, "error": "Illegal table type: hybrid"}


def test_schema_and_instances(api, table):
    schema = api.get("/tables/githubEvents/schema").json()
    assert schema["schemaName"] == "githubEvents"
    assert schema == api.get("/schemas/githubEvents").json()
    assert {"dimensionFieldSpecs", "dateTimeFieldSpecs"} <= set(schema)

    data = api.get("/tables/githubEvents/instances").json()
    assert data == {
        "tableName": "githubEvents",
        "brokers": [{"tableType": "realtime", "instances": []}],
        "server": [{"tableType": "realtime", "instances": sorted(SERVERS)}],
    }
    assert api.get("/tables/githubEvents/instances?type=broker").json()["server"] == []
    assert api.get("/tables/githubEvents/instances?type=SERVER").json()["brokers"] == []
    for path in ("schema", "instances", "size", "segmentsStatus"):
        resp = api.get(f"/tables/nosuch/{path}")
        assert resp.status_code == 404, path
        assert set(resp.json()) == {"code", "error"}
        assert api.get(f"/tables/bad%20name/{path}").status_code == 400, path


def test_size_follows_pinots_table_size_reader(api, table, zk, tmp_path):
    segment, (up, down) = _commit_first(zk, table, tmp_path)
    data = api.get("/tables/githubEvents/size").json()
    assert set(data) == {
        "tableName", "reportedSizeInBytes", "estimatedSizeInBytes",
        "reportedSizePerReplicaInBytes", "offlineSegments", "realtimeSegments",
    }  # fmt: skip
    realtime = data["realtimeSegments"]
    assert set(realtime) == {
        "reportedSizeInBytes", "estimatedSizeInBytes", "missingSegments",
        "reportedSizePerReplicaInBytes", "segments",
    }  # fmt: skip
    assert data["offlineSegments"] is None
    assert data["tableName"] == "githubEvents"
    # The committed segment: its ONLINE replica reports the tar size, the OFFLINE one does not
    # (-1) and is estimated from it; the 3 CONSUMING segments report nothing: missing.
    committed = realtime["segments"][segment]
    assert committed == {
        "reportedSizeInBytes": len(TAR),
        "estimatedSizeInBytes": 2 * len(TAR),
        "maxReportedSizePerReplicaInBytes": len(TAR),
        "serverInfo": {
            up: {"segmentName": segment, "diskSizeInBytes": len(TAR)},
            down: {"segmentName": segment, "diskSizeInBytes": -1},
        },
    }
    assert realtime["missingSegments"] == 3
    for name, details in realtime["segments"].items():
        if name != segment:
            assert details["reportedSizeInBytes"] == details["estimatedSizeInBytes"] == -1
            assert {i["diskSizeInBytes"] for i in details["serverInfo"].values()} == {-1}
    assert (realtime["reportedSizeInBytes"], realtime["estimatedSizeInBytes"]) == (1234, 2468)
    assert data["reportedSizeInBytes"] == 1234
    assert data["estimatedSizeInBytes"] == 2468
    assert data["reportedSizePerReplicaInBytes"] == 1234


def test_size_of_a_table_with_nothing_committed_is_minus_one(api, table):
    data = api.get("/tables/githubEvents/size").json()
    assert data["reportedSizeInBytes"] == data["estimatedSizeInBytes"] == -1
    assert data["realtimeSegments"]["missingSegments"] == len(table)


def test_segment_servers_and_crc_win_over_segment_paths(api, table, zk, tmp_path):
    segment, _ = _commit_first(zk, table, tmp_path)
    ideal = read_record(zk, PATHS.idealstate(TABLE)).record.map_fields
    [item] = api.get("/segments/githubEvents/servers").json()
    assert list(item) == ["tableName", "serverToSegmentsMap", "serverToSegmentsCountMap"]
    assert item["tableName"] == TABLE
    expected: dict[str, list[str]] = {}
    for name, states in ideal.items():
        for server in states:
            expected.setdefault(server, []).append(name)
    assert item["serverToSegmentsMap"] == {s: sorted(v) for s, v in expected.items()}
    assert item["serverToSegmentsCountMap"] == {s: len(v) for s, v in expected.items()}
    [brief] = api.get("/segments/githubEvents/servers?verbose=false").json()
    assert set(brief) == {"tableName", "serverToSegmentsCountMap"}
    assert api.get("/segments/githubEvents/servers?type=offline").status_code == 404
    assert api.get("/segments/githubEvents/servers?type=x").status_code == 400

    crcs = api.get("/segments/githubEvents/crc").json()
    assert crcs[segment] == "987654321"
    assert set(crcs) == set(ideal)
    assert {v for k, v in crcs.items() if k != segment} == {"-1"}  # not committed yet
    assert api.get("/segments/nosuch/crc").status_code == 404


def test_segments_status_is_pinots_display_status(api, table, zk, tmp_path):
    assert {s["segmentStatus"] for s in api.get("/tables/githubEvents/segmentsStatus").json()} == {
        "UPDATING"  # no ExternalView yet
    }
    segment, replicas = _commit_first(zk, table, tmp_path)
    status = api.get("/tables/githubEvents/segmentsStatus").json()
    assert [set(s) for s in status] == [{"segmentName", "segmentStatus"}] * len(table)
    by_name = {s["segmentName"]: s["segmentStatus"] for s in status}
    assert by_name.pop(segment) == "UPDATING"  # one replica not ONLINE yet
    assert set(by_name.values()) == {"GOOD"}

    def error(record: ZNRecord) -> ZNRecord:
        out = record.copy()
        out.map_fields[segment] = {replicas[0]: "ERROR", replicas[1]: "ONLINE"}
        return out

    update_record(zk, PATHS.externalview(TABLE), error)
    by_name = {
        s["segmentName"]: s["segmentStatus"]
        for s in api.get("/tables/githubEvents/segmentsStatus?tableType=realtime").json()
    }
    assert by_name[segment] == "BAD"
    assert api.get("/tables/githubEvents/segmentsStatus?tableType=x").status_code == 400
    assert api.get("/tables/githubEvents/segmentsStatus?tableType=offline").status_code == 404


def test_state_bad_input_is_4xx_and_changes_nothing(api, table, zk, admin_user):
    before = read_record(zk, PATHS.idealstate(TABLE))
    assert api.get("/tables/githubEvents/state?type=realtime").json() == {"state": "enabled"}
    cases = [
        ("get", "/tables/githubEvents/state", 400, "Illegal table type: null"),
        ("get", "/tables/githubEvents/state?type=x", 400, "Illegal table type: x"),
        ("get", "/tables/githubEvents/state?type=offline", 404, None),
        ("get", "/tables/nosuch/state?type=realtime", 404, None),
        ("put", "/tables/githubEvents/state?state=pause&type=realtime", 400, "Unknown state"),
        ("put", "/tables/githubEvents/state?type=realtime", 400, "Unknown state"),
        ("put", "/tables/githubEvents/state?state=disable", 400, "Illegal table type"),
        ("put", "/tables/githubEvents/state?state=disable&type=offline", 404, None),
        ("put", "/tables/nosuch/state?state=disable&type=realtime", 404, "does not exist"),
        ("put", "/tables/bad%20name/state?state=disable&type=realtime", 400, None),
    ]
    for method, path, status, message in cases:
        resp = getattr(api, method)(path)
        assert resp.status_code == status, (path, resp.content)
        assert set(resp.json()) == {"code", "error"}
        if message:
            assert message in resp.json()["error"], path
    viewer = grant(User.objects.create_user("viewer1"), "viewer")
    client = APIClient()
    client.force_authenticate(viewer)
    assert client.get("/tables/githubEvents/state?type=realtime").status_code == 200
    assert client.put("/tables/githubEvents/state?state=disable&type=realtime").status_code == 403
    assert APIClient().put("/tables/githubEvents/state?state=disable").status_code in (401, 403)
    after = read_record(zk, PATHS.idealstate(TABLE))
    assert (after.version, after.record) == (before.version, before.record)
    results = AuditEntry.objects.filter(action="table_state").values_list("result", flat=True)
    assert sorted(set(results)) == ["DENIED", "REJECTED"]


def test_debug_answers_from_zookeeper_when_no_server_answers(api, table, zk, tmp_path):
    segment, (up, down) = _commit_first(zk, table, tmp_path)
    resp = api.get("/debug/tables/githubEvents?verbosity=1")
    assert resp.status_code == 200, resp.content
    [info] = resp.json()
    assert info["tableSize"] == {"reportedSize": "1 KB", "estimatedSize": "2 KB"}
    assert info["brokerDebugInfos"] == [] and info["numBrokers"] == 0
    states = {s["segmentName"]: s["serverState"] for s in info["segmentDebugInfos"]}
    assert states[segment][down]["externalView"] == "OFFLINE"
    assert states[segment][up] == {
        "idealState": "ONLINE",
        "externalView": "ONLINE",
        "segmentSize": None,
        "consumerInfo": None,
        "errorInfo": None,
    }
    assert api.get("/debug/tables/nosuch").status_code == 404


def test_a_disabled_table_is_mirrored_and_shown_as_disabled_not_as_errors(
    api, table, zk, admin_user, settings
):
    """What the servers reach once the table is disabled (every replica OFFLINE in the
    ExternalView) is PAUSED with the reason in the mirror and shown "disabled" on the pages; the
    same ExternalView on an enabled table is BAD (all-OFFLINE segments are errors there)."""
    from django.test import Client

    from tables.cluster import context
    from tables.mirror.sync import sync_cluster
    from tables.models import MirroredTable, PartitionStatus

    settings.TRIAGE_REPORT_GRACE_SECONDS = 0
    offline = {s: {r: "OFFLINE" for r in states} for s, states in table.items()}
    create_record(zk, PATHS.externalview(TABLE), ZNRecord(id=TABLE, map_fields=offline))
    assert api.put("/tables/githubEvents/state?state=disable&type=realtime").status_code == 200
    sync_cluster(context.current())
    row = MirroredTable.objects.get(name=TABLE)
    assert (row.disabled, row.health, row.error_segments, row.missing_consuming) == (
        True,
        "PAUSED",
        0,
        0,
    )
    assert "disabled" in row.health_reason
    verdicts = set(PartitionStatus.objects.filter(table=row).values_list("verdict", "health"))
    assert verdicts == {("PAUSED", "PAUSED")}
    page = Client()
    page.force_login(admin_user)
    listing = page.get("/ui/tables/").content.decode()
    assert 'data-disabled="true"' in listing and ">disabled</span>" in listing
    detail = page.get(f"/ui/tables/{TABLE}/").content.decode()
    assert 'id="table-enabled" data-disabled="true"' in detail

    assert api.put("/tables/githubEvents/state?state=enable&type=realtime").status_code == 200
    sync_cluster(context.current())
    row.refresh_from_db()
    assert (row.disabled, row.health, row.error_segments) == (False, "BAD", len(table))
    detail = page.get(f"/ui/tables/{TABLE}/").content.decode()
    assert 'id="table-enabled" data-disabled="false"' in detail
