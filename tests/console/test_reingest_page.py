"""Re-ingestion on the table page and its API (`console.api.reingest`, round 2 §C), against the
real ZooKeeper and a real server's admin port (an in-process `ServerInstance` with Pinot's
ReingestionResource; its Spark rebuild is held by the test, so a started job keeps running).

The segments the button acts on are listed in the IdealState on a live participant whose instance
config points at that server's admin port (nobody reconciles it), so each answer is the server's
own. Covered:
- the page: operators get a Re-ingest button on COMMITTING segments only, not on a DONE one nor in
  a partial-upsert table in disasterRecoveryMode DEFAULT (each says why); viewers get none; the
  jobs section points at the jobs API; the requests made from the console show their segment's
  status as the mirror sees it (COMMITTING, then DONE);
- `POST .../reingest`: 200 with the server's job id (audited OK, the job runs on the server), then
  409 while a live replica lists that job; Pinot's 400 (download URL present), 404 (no metadata)
  and 500 (no end offset) relayed with the server's message, audited REJECTED or FAILED, nothing
  started and ZooKeeper unchanged; the console's own refusals (malformed names 400, unknown table
  or segment 404, the DR mode 409, no live server 503, a server that cannot be reached 502); a
  viewer's 403 audited DENIED, an anonymous 401;
- `GET .../reingestJobs`: the running job with its server and elapsed time, and a server that
  does not answer named as such;
- both paths in the OpenAPI schema.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from drf_spectacular.validation import validate_schema
from rest_framework.test import APIClient

from tables import builds
from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentStatus, SegmentZKMetadata
from tables.models import AuditEntry
from tables.server.admin import AdminServer
from tables.server.instance import ServerInstance
from tables.server.reingestion import SegmentReingestion
from tables.zk.participants import register_participant
from tables.zk.records import create_record, read_record, update_record
from tests.accounts import grant
from tests.cluster_fixtures import PATHS, load
from tests.console import mirror_factory as mf
from tests.ingest_cluster import HOST, free_port, table_config
from tests.poll import wait_until

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]

TABLE = "githubEvents_REALTIME"
PASSWORD = "a-long-test-password"


def _name(partition: int, sequence: int) -> str:
    return str(LLCSegmentName.create("githubEvents", partition, sequence, 1_714_559_400_000))


class HeldTask:
    """A submitted rebuild that never finishes until revoked (the job stays running)."""

    def __init__(self) -> None:
        self.revoked = False

    def ready(self) -> bool:
        return self.revoked

    def successful(self) -> bool:
        return False

    def get(self, timeout: float | None = None, propagate: bool = True) -> Any:
        return RuntimeError("revoked")

    def revoke(self) -> None:
        self.revoked = True


@dataclass
class Replica:
    """The participant the IdealState names for the test's segments (`name`), answered by a real
    server's admin port (its re-ingestion resource: `reingestion`)."""

    zk: Any
    name: str
    reingestion: SegmentReingestion | None = None
    submitted: list[tuple[tuple, HeldTask]] = field(default_factory=list)

    def segment(self, segment: str, **fields: Any) -> str:
        """`segment` in the IdealState on this replica, with metadata (status None: none)."""
        if fields.get("status") is not None:
            meta = SegmentZKMetadata(segment, **fields)
            create_record(self.zk, PATHS.segment(TABLE, segment), meta.to_znrecord())

        def add(record):
            out = record.copy()
            out.map_fields[segment] = {self.name: "ONLINE"}
            return out

        update_record(self.zk, PATHS.idealstate(TABLE), add)
        return segment

    def committing(self, segment: str, **fields: Any) -> str:
        values = {"status": SegmentStatus.COMMITTING, "start_offset": "1", "end_offset": "101"}
        return self.segment(segment, **{**values, **fields})

    def jobs(self) -> list[dict[str, Any]]:
        assert self.reingestion is not None
        return self.reingestion.jobs()


@pytest.fixture
def replica(cluster, topic, tmp_path: Path) -> Iterator[Replica]:
    """githubEvents (replication 1) served by an in-process server, and a live participant
    `Server_127.0.0.1_<p>` whose adminPort is that server's admin port. (The server's own
    instance config names its HELIX_PORT, where nothing listens: it holds the table's CONSUMING
    segments and would otherwise list every job a second time.)"""
    port, admin_port = free_port(), free_port()
    instance = ServerInstance(
        f"Server_{HOST}_{port}",
        HOST,
        port,
        context.current,
        builds.deep_store,
        lambda *a: pytest.fail("no build here"),
        tmp_path / "server",
        tick_s=0.5,
    )
    fake = f"Server_{HOST}_{free_port()}"
    state = Replica(cluster, fake)

    def submit(*args: object) -> HeldTask:
        task = HeldTask()
        state.submitted.append((args, task))
        return task

    reingestion = SegmentReingestion(instance, submit, lambda raw: None, poll_s=0.05)
    state.reingestion = reingestion
    server = AdminServer(instance, HOST, admin_port, lambda: (b"", "text/plain"), None, reingestion)
    instance.start()
    server.start()
    try:
        wait_until(lambda: cluster.exists(PATHS.liveinstance(instance.instance_id)), what="live")
        register_participant(cluster, PATHS, fake, HOST, 1, [], admin_port=admin_port)
        manager = ResourceManager(context.current())
        manager.add_schema(load("githubEvents_schema.json"))
        config = table_config(topic)
        config["segmentsConfig"]["replication"] = "1"
        manager.add_table(config)
        wait_until(lambda: instance.replicas_of(TABLE), what="the server serves the table")
        yield state
    finally:
        for _args, task in state.submitted:
            task.revoke()
        server.stop()
        instance.stop()


def _client(django_user_model, name: str, role: str | None) -> APIClient:
    user = django_user_model.objects.create_user(name, password=PASSWORD)
    if role:
        grant(user, role)
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def operator(django_user_model) -> APIClient:
    return _client(django_user_model, "otto", "operator")


@pytest.fixture
def viewer(django_user_model) -> APIClient:
    return _client(django_user_model, "vera", "viewer")


def _url(segment: str, table: str = TABLE) -> str:
    return f"/api/v1/tables/{table}/segments/{segment}/reingest"


def _zk_state(zk) -> tuple:
    ideal = read_record(zk, PATHS.idealstate(TABLE))
    metadata = {}
    for segment in zk.get_children(PATHS.segments(TABLE)):
        found = read_record(zk, PATHS.segment(TABLE, segment))
        metadata[segment] = found.version if found else None
    return ideal.version, metadata


# --- the API -----------------------------------------------------------------------------------


def test_an_operator_starts_a_reingestion_and_sees_it_running(operator, replica, cluster):
    segment = replica.committing(_name(0, 7))

    reply = operator.post(_url(segment) + "?comment=every replica lost it")

    assert reply.status_code == 200, reply.content
    job = reply.json()
    assert job["segmentName"] == segment and job["server"] == replica.name
    assert isinstance(job["jobId"], str) and isinstance(job["startTimeMs"], int)
    (running,) = replica.jobs()
    assert running["jobId"] == job["jobId"]
    wait_until(lambda: replica.submitted, what="the rebuild submitted")
    assert replica.submitted[0][0] == (TABLE, segment, 1, 101)  # [startOffset, endOffset)
    (audit,) = AuditEntry.objects.all()
    assert (audit.action, audit.target, audit.result, audit.status_code) == (
        "reingest",
        f"{TABLE}/{segment}",
        "OK",
        200,
    )
    assert audit.summary == f"job {job['jobId']} on {job['server']}"
    assert (audit.username, audit.reason) == ("otto", "every replica lost it")
    assert audit.detail == job

    # The jobs of the table's servers: this one, on the replica the IdealState names.
    jobs = operator.get(f"/api/v1/tables/{TABLE}/reingestJobs")
    assert jobs.status_code == 200
    body = jobs.json()
    (listed,) = body["jobs"]
    assert (listed["jobId"], listed["segmentName"], listed["server"]) == (
        job["jobId"],
        segment,
        replica.name,
    )
    assert listed["startTimeMs"] == job["startTimeMs"] and listed["elapsedMs"] >= 0
    servers = {s["server"]: s for s in body["servers"]}
    assert servers[replica.name] == {
        "server": replica.name,
        "live": True,
        "answered": True,
        "error": None,
        "jobs": 1,
    }

    # A second press while it runs: 409, the job being listed by a live replica; nothing new.
    again = operator.post(_url(segment))
    assert again.status_code == 409
    assert again.json()["error"] == (
        f"Re-ingestion for segment: {segment} is already in progress on {replica.name} "
        "(its GET /reingestSegment/jobs lists it): nothing sent"
    )
    assert len(replica.jobs()) == 1 and len(replica.submitted) == 1
    refused = AuditEntry.objects.get(result="REJECTED")
    assert refused.status_code == 409 and "already in progress" in refused.detail["error"]


@pytest.mark.parametrize(
    ("fields", "status", "message", "result"),
    [
        (
            {"status": SegmentStatus.DONE, "download_url": ""},
            400,
            "Download URL is already present for segment: {s}. No need to re-ingest.",
            "REJECTED",
        ),
        ({"status": None}, 404, "Segment ZK metadata not found for segment: {s}", "REJECTED"),
        (
            {"status": SegmentStatus.COMMITTING, "start_offset": "1", "end_offset": None},
            500,
            "Null start/end offset for segment: {s}",
            "FAILED",
        ),
    ],
    ids=["download-url-present", "no-metadata", "no-end-offset"],
)
def test_the_servers_refusals_are_relayed_and_change_nothing(
    operator, replica, cluster, fields, status, message, result
):
    segment = replica.segment(_name(1, 7), **fields)
    before = _zk_state(cluster)

    reply = operator.post(_url(segment))

    assert reply.status_code == status
    expected = f"{replica.name} answered HTTP {status}: {message.format(s=segment)}"
    assert reply.json() == {"code": status, "error": expected}
    assert replica.jobs() == [] and replica.submitted == []
    assert _zk_state(cluster) == before
    (audit,) = AuditEntry.objects.all()
    assert (audit.result, audit.status_code, audit.detail) == (result, status, {"error": expected})


def test_the_consoles_own_refusals_come_first_and_change_nothing(operator, replica, cluster):
    committing = replica.committing(_name(2, 7))
    before = _zk_state(cluster)
    refusals = {
        _url("notASegment"): (400, "Segment name is not in LLC format: notASegment"),
        _url("other__0__1__20240501T1030Z"): (
            400,
            "segment other__0__1__20240501T1030Z is not a segment of table githubEvents",
        ),
        _url(committing, "bad$name"): (400, None),
        _url("nope__0__1__20240501T1030Z", "nope"): (404, "table nope not found"),
        _url(_name(3, 9)): (404, f"segment {_name(3, 9)} is not in the IdealState of {TABLE}"),
    }
    for url, (status, error) in refusals.items():
        reply = operator.post(url)
        assert reply.status_code == status, (url, reply.content)
        if error is not None:
            assert reply.json()["error"] == error
    assert replica.jobs() == [] and _zk_state(cluster) == before
    results = list(AuditEntry.objects.values_list("result", flat=True))
    assert results == ["REJECTED"] * len(refusals)


def test_a_partial_upsert_table_in_default_mode_is_not_reingested(operator, replica, cluster):
    manager = ResourceManager(context.current())
    rest = manager.get_table_config(TABLE).rest
    schema = manager.get_schema(manager.get_table_config(TABLE).schema_name).raw
    manager.add_schema({**schema, "primaryKeyColumns": ["id"]})  # an upsert table needs keys
    rest = {**rest, "routing": {"instanceSelectorType": "strictReplicaGroup"}}
    manager.update_table(TABLE, {**rest, "upsertConfig": {"mode": "PARTIAL"}})
    segment = replica.committing(_name(0, 8))

    reply = operator.post(_url(segment))

    assert reply.status_code == 409
    assert "disasterRecoveryMode DEFAULT" in reply.json()["error"]
    assert replica.jobs() == []

    stream = rest["ingestionConfig"]["streamIngestionConfig"]
    always = {**rest, "upsertConfig": {"mode": "PARTIAL"}}
    always["ingestionConfig"] = {
        **rest["ingestionConfig"],
        "streamIngestionConfig": {**stream, "disasterRecoveryMode": "ALWAYS"},
    }
    manager.update_table(TABLE, always)
    assert operator.post(_url(segment)).status_code == 200
    assert len(replica.jobs()) == 1


def test_no_live_server_is_503_and_an_unreachable_one_502(operator, replica, cluster):
    segment = replica.committing(_name(0, 9))

    def point(record):  # the replica's admin port: nothing listens there
        out = record.copy()
        out.simple_fields["adminPort"] = str(free_port())
        return out

    update_record(cluster, PATHS.participant_config(replica.name), point)
    unreachable = operator.post(_url(segment))
    assert unreachable.status_code == 502
    assert unreachable.json()["error"].startswith(f"{replica.name} (http://{HOST}:")
    assert "cannot be reached" in unreachable.json()["error"]

    cluster.delete(PATHS.liveinstance(replica.name))
    gone = operator.post(_url(segment))
    assert gone.status_code == 503
    assert gone.json()["error"] == (
        f"no live server of {segment} with a known admin endpoint (its replicas: {replica.name})"
    )
    results = list(AuditEntry.objects.order_by("id").values_list("result", "status_code"))
    assert results == [("FAILED", 502), ("FAILED", 503)]
    assert replica.jobs() == []


def test_a_viewer_is_refused_and_audited_and_anonymous_callers_get_401(viewer, replica, cluster):
    segment = replica.committing(_name(1, 9))
    reply = viewer.post(_url(segment))
    assert reply.status_code == 403
    (audit,) = AuditEntry.objects.all()
    assert (audit.result, audit.username, audit.target) == ("DENIED", "vera", f"{TABLE}/{segment}")
    assert replica.jobs() == []
    assert APIClient().post(_url(segment)).status_code == 401
    assert APIClient().get(f"/api/v1/tables/{TABLE}/reingestJobs").status_code == 401
    assert viewer.get(f"/api/v1/tables/{TABLE}/reingestJobs").status_code == 200  # reading


def test_the_jobs_name_a_server_that_does_not_answer(viewer, replica, cluster):
    silent = f"Server_{HOST}_{free_port()}"
    register_participant(cluster, PATHS, silent, HOST, 1, [], admin_port=free_port())
    replica.committing(_name(2, 9))

    def add(record):
        out = record.copy()
        out.map_fields[_name(2, 9)][silent] = "ONLINE"
        return out

    update_record(cluster, PATHS.idealstate(TABLE), add)
    body = viewer.get(f"/api/v1/tables/{TABLE}/reingestJobs").json()
    servers = {s["server"]: s for s in body["servers"]}
    assert servers[silent]["live"] is True and servers[silent]["answered"] is False
    assert servers[silent]["error"].startswith("did not answer within 2 s")
    assert servers[replica.name]["answered"] is True
    assert body["jobs"] == [] and body["timeoutMs"] == 2000
    assert viewer.get("/api/v1/tables/nope/reingestJobs").status_code == 404
    assert viewer.get("/api/v1/tables/bad$name/reingestJobs").status_code == 400


# --- the page (mirror rows) --------------------------------------------------------------------


def _page(client, table: str) -> str:
    resp = client.get(f"/ui/tables/{table}/")
    assert resp.status_code == 200
    return resp.content.decode()


def _deep_store_rows(html: str) -> set[str]:
    found = re.search(r'<div id="deep-store-region" data-live>(.*?)</div>', html, re.S)
    assert found
    return set(re.findall(r'<tr data-segment="([^"]+)"', found.group(0)))


def _row(html: str, segment: str) -> str:
    found = re.search(rf'<tr data-segment="{re.escape(segment)}".*?</tr>', html, re.S)
    assert found, segment
    return found.group(0)


@pytest.fixture
def page_client(client, django_user_model):
    def login(role: str):
        user = django_user_model.objects.create_user(f"{role}-user", password=PASSWORD)
        client.force_login(grant(user, role))
        return client

    return login


def _mirrored(raw: str, **config: Any):
    mf.mirror_state()
    owner = mf.table(raw, pauseless=True, config={"tableName": f"{raw}_REALTIME", **config})
    ev = {"Server_a_8001": "ONLINE", "Server_b_8002": "OFFLINE"}
    common = {"ideal_states": dict.fromkeys(ev, "ONLINE"), "external_states": ev}
    mf.segment(owner, 0, 1, status="DONE", download_url="", **common)
    mf.segment(owner, 0, 2, status="COMMITTING", download_url="", **common)
    return owner


def test_operators_get_the_button_on_committing_segments_only(page_client):
    _mirrored("pl")
    html = _page(page_client("operator"), "pl_REALTIME")
    done, committing = mf.llc_name("pl", 0, 1), mf.llc_name("pl", 0, 2)
    button = re.search(r'data-reingest-url="([^"]+)"', _row(html, committing))
    assert button and button.group(1) == _url(committing, "pl_REALTIME")
    assert "reingest-button" not in _row(html, done)
    assert 'data-field="reingest-refusal"' in _row(html, done)
    assert 'id="reingest-csrf"' in html
    assert 'data-jobs-url="/api/v1/tables/pl_REALTIME/reingestJobs"' in html
    assert "console/reingest.js" in html


def test_the_dr_mode_hides_the_button_and_viewers_never_see_one(page_client):
    _mirrored("pu", upsertConfig={"mode": "PARTIAL"})
    html = _page(page_client("operator"), "pu_REALTIME")
    committing = _row(html, mf.llc_name("pu", 0, 2))
    assert "reingest-button" not in committing
    assert "disasterRecoveryMode DEFAULT forbids it" in committing

    _mirrored("pl")
    viewer_html = _page(page_client("viewer"), "pl_REALTIME")
    assert "reingest-button" not in viewer_html and 'id="reingest-csrf"' not in viewer_html
    assert 'id="reingest-jobs"' in viewer_html  # the jobs are for everyone to read


def test_the_requests_show_their_segment_reach_done(page_client):
    owner = _mirrored("pl")
    segment = mf.llc_name("pl", 0, 2)
    job = {"jobId": "j-1", "segmentName": segment, "startTimeMs": 1, "server": "Server_a_8001"}
    mf.audit("otto", "reingest", f"pl_REALTIME/{segment}", detail=job, status_code=200)
    mf.audit(
        "otto",
        "reingest",
        f"pl_REALTIME/{segment}",
        result="REJECTED",
        status_code=409,
        detail={"error": "Server_a_8001 answered HTTP 409: already in progress."},
    )
    client = page_client("viewer")

    def requests() -> list[dict[str, str]]:
        html = _page(client, "pl_REALTIME")
        region = re.search(r'<div id="reingest-requests-region" data-live>(.*?)</div>', html, re.S)
        assert region
        region = region.group(1)
        rows = re.findall(r"<tr data-audit-id=.*?</tr>", region, re.S)
        return [dict(re.findall(r'data-([\w-]+)="([^"]*)"', row)) for row in rows]

    refused, started = requests()  # newest first
    assert (started["result"], started["job-id"], started["status"], started["done"]) == (
        "OK",
        "j-1",
        "COMMITTING",
        "false",
    )
    assert refused["result"] == "REJECTED" and refused["job-id"] == ""
    assert segment in _deep_store_rows(_page(client, "pl_REALTIME"))

    owner.segments.filter(name=segment).update(status="DONE", download_url="file:///deep/x")
    assert requests()[1]["status"] == "DONE" and requests()[1]["done"] == "true"
    assert segment not in _deep_store_rows(_page(client, "pl_REALTIME"))


def test_both_paths_are_in_the_openapi_schema(viewer):
    reply = viewer.get("/api/v1/schema/?format=json")
    assert reply.status_code == 200
    schema = reply.json()
    validate_schema(schema)
    post = schema["paths"]["/api/v1/tables/{table}/segments/{segment}/reingest"]["post"]
    assert post["operationId"] == "segment_reingest"
    assert "comment" in {p["name"] for p in post["parameters"]}
    get = schema["paths"]["/api/v1/tables/{table}/reingestJobs"]["get"]
    assert get["operationId"] == "table_reingest_jobs"
