"""Force commit (reference §4.5): the pure parts of `tables.controller.force_commit`, then Pinot's
`forceCommit` / `forceCommitStatus` endpoints against the real ZooKeeper (no servers running:
the messages are checked as znodes).

Covered: bad parameters (400) and unknown/disabled tables (404/400) change nothing; a viewer gets
403, audited DENIED, with ZooKeeper unchanged; the message znodes and the job record have Pinot's
fields; the status shrinks and persists the list; batches wait for DONE and give up on timeout.
"""

from __future__ import annotations

import json

import pytest
from celery.signals import before_task_publish
from rest_framework.test import APIClient

from tables.cluster import context
from tables.cluster.errors import BadRequest
from tables.cluster.leadership import lead_controller_for
from tables.controller.force_commit import (
    BATCHES_TASK,
    MAX_JOBS,
    BatchConfig,
    BatchRun,
    ForceCommitManager,
    add_job,
    is_inconsistent_during_consumption,
    recipients,
    segment_batches,
    select_targets,
)
from tables.controller.resources import ResourceManager
from tables.domain.names import LLCSegmentName
from tables.domain.znrecord import ZNRecord
from tables.models import AuditEntry
from tables.tasks import force_commit_batches
from tables.zk import messages
from tables.zk.records import read_record, update_record
from tests.accounts import grant
from tests.cluster_fixtures import PATHS, SERVERS, load
from tests.ingest_cluster import table_config
from tests.tables.leaders import lead_every_partition

TABLE = "githubEvents_REALTIME"
JOBS = PATHS.controller_jobs("FORCE_COMMIT")


# --- pure parts -----------------------------------------------------------------------------
def seg(partition: int, sequence: int = 0) -> str:
    return f"t__{partition}__{sequence}__20240501T1030Z"


def test_batch_config_defaults_and_validation():
    assert BatchConfig.parse(None, None, None) == BatchConfig(2**31 - 1, 5, 180)
    assert BatchConfig.parse("2", "1", "30") == BatchConfig(2, 1, 30)
    for bad in (("0", None, None), (None, "-1", None), (None, None, "0"), ("x", None, None)):
        with pytest.raises(BadRequest, match="Invalid batch config"):
            BatchConfig.parse(*bad)


def test_targets_are_filtered_by_partitions_or_segments():
    consuming = [seg(0, 3), seg(1, 2), seg(2, 5)]
    assert select_targets(consuming, None, None) == sorted(consuming)
    assert select_targets(consuming, {1, 2}, None) == [seg(1, 2), seg(2, 5)]
    assert select_targets(consuming, None, {seg(0, 3), seg(0, 2), "nope"}) == [seg(0, 3)]
    with pytest.raises(BadRequest, match="Cannot find segments to commit for partitions: 7"):
        select_targets(consuming, {7}, None)
    with pytest.raises(BadRequest, match="is CONSUMING"):
        select_targets(consuming, None, {seg(0, 2)})
    with pytest.raises(BadRequest, match="both"):
        select_targets(consuming, {0}, {seg(0, 3)})


def test_batches_take_one_segment_per_instance_in_turn():
    # s1 hosts partitions 0, 1, 2; s2 hosts 0 and 3; s3 hosts 4.
    assignment = {
        seg(0): {"s1": "CONSUMING", "s2": "CONSUMING"},
        seg(1): {"s1": "CONSUMING"},
        seg(2): {"s1": "CONSUMING"},
        seg(3): {"s2": "CONSUMING"},
        seg(4): {"s3": "CONSUMING", "s1": "OFFLINE"},
    }
    batches = segment_batches(assignment, list(assignment), 2)
    assert batches == [[seg(0), seg(4)], [seg(1), seg(3)], [seg(2)]]
    assert segment_batches(assignment, [seg(1), seg(3)], 5) == [[seg(1), seg(3)]]
    singles = segment_batches(assignment, list(assignment), 1)
    assert sorted(s for (s,) in singles) == sorted(assignment)


def test_recipients_are_the_live_hosts_with_their_sessions():
    ideal = {seg(0): {"s1": "CONSUMING", "s2": "CONSUMING"}, seg(1): {"s3": "CONSUMING"}}
    view = {seg(0): {"s4": "CONSUMING"}}
    live = {"s1": "a", "s3": "c", "s4": "d", "s9": "z"}
    assert recipients([seg(0)], [ideal, view], live) == {"s1": "a", "s4": "d"}
    assert recipients([seg(0), seg(1)], [ideal], live) == {"s1": "a", "s3": "c"}
    assert recipients([seg(5)], [ideal, view], live) == {}


def test_the_job_record_keeps_the_newest_jobs():
    record = ZNRecord(id="FORCE_COMMIT")
    for i in range(MAX_JOBS + 5):
        record = add_job(record, {"jobId": f"j{i}", "submissionTimeMs": str(1000 + i)})
    assert len(record.map_fields) == MAX_JOBS
    assert "j0" not in record.map_fields and "j4" not in record.map_fields
    assert f"j{MAX_JOBS + 4}" in record.map_fields


def test_partial_upsert_tables_are_inconsistent_during_consumption():
    assert not is_inconsistent_during_consumption({})
    assert not is_inconsistent_during_consumption({"upsertConfig": {"mode": "FULL"}})
    assert is_inconsistent_during_consumption({"upsertConfig": {"mode": "PARTIAL"}})
    assert is_inconsistent_during_consumption({"upsertConfig": {"dropOutOfOrderRecord": True}})
    assert is_inconsistent_during_consumption({"upsertConfig": {"outOfOrderRecordColumn": "c"}})
    assert not is_inconsistent_during_consumption(
        {"upsertConfig": {"mode": "NONE", "outOfOrderRecordColumn": "c"}}
    )


# --- the API on real ZooKeeper --------------------------------------------------------------
def _user(django_user_model, name: str, role: str | None) -> APIClient:
    user = django_user_model.objects.create_user(name, password="a-long-test-password")
    if role:
        grant(user, role)
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def operator(db, django_user_model) -> APIClient:
    return _user(django_user_model, "op", "operator")


@pytest.fixture
def viewer(db, django_user_model) -> APIClient:
    return _user(django_user_model, "oncall", "viewer")


@pytest.fixture
def table(servers, topic, zk) -> dict[int, str]:
    """githubEvents on the 4-partition topic, replication 2 over the 3 servers; partition ->
    its CONSUMING segment."""
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(table_config(topic))
    out = {}
    for segment in manager.idealstate(TABLE):
        name = LLCSegmentName.parse(segment)
        assert name is not None
        out[name.partition_group_id] = segment
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


def sent(zk) -> dict[str, list[ZNRecord]]:
    """Server -> the messages waiting for it."""
    out = {}
    for server in SERVERS:
        ids = messages.message_ids(zk, PATHS, server)
        found = [messages.read_message(zk, PATHS, server, i) for i in ids]
        out[server] = [m for m in found if m is not None]
    return out


def sent_names(zk) -> set[str]:
    """Every segment named by a waiting message."""
    found = [m for waiting in sent(zk).values() for m in waiting]
    return {name for m in found for name in m.simple_fields["segmentNames"].split(",")}


def hosts(segment: str) -> set[str]:
    return set(ResourceManager(context.current()).idealstate(TABLE)[segment])


def mark_done(zk, segment: str) -> None:
    def done(record):
        out = record.copy()
        out.simple_fields["segment.realtime.status"] = "DONE"
        return out

    update_record(zk, PATHS.segment(TABLE, segment), done)


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.django_db
def test_force_commit_sends_pinots_message_and_records_the_job(operator, table, zk, settings):
    settings.CONTROLLER_INSTANCE_ID = "Controller_127.0.0.1_9000"
    reply = operator.post(f"/tables/githubEvents/forceCommit?comment={'roll the segments'}")
    assert reply.status_code == 200, reply.content
    body = reply.json()
    job_id = body.pop("forceCommitJobId")
    assert body == {"forceCommitStatus": "SUCCESS", "jobMetaZKWriteStatus": "SUCCESS"}

    # Every server hosts a segment: each got one message on its session, listing all four.
    session = read_record(zk, PATHS.liveinstance(SERVERS[0])).record.simple_fields["SESSION_ID"]
    targets = sorted(table.values())
    by_server = sent(zk)
    for server in SERVERS:
        (message,) = by_server[server]
        fields = message.simple_fields
        assert message.id == fields["MSG_ID"]
        assert fields["MSG_TYPE"] == "USER_DEFINE_MSG"
        assert fields["MSG_SUBTYPE"] == "FORCE_COMMIT"
        assert fields["MSG_STATE"] == "new"
        assert fields["TIMEOUT"] == "-1"
        assert fields["TGT_NAME"] == server
        assert fields["TGT_SESSION_ID"] == session
        assert fields["SRC_NAME"] == "Controller_127.0.0.1_9000"
        assert fields["SRC_CLUSTER"] == "PinotCluster"
        assert fields["tableName"] == fields["RESOURCE_NAME"] == TABLE
        assert fields["segmentNames"].split(",") == targets

    jobs = read_record(zk, JOBS).record
    assert jobs.id == "FORCE_COMMIT"
    job = jobs.map_fields[job_id]
    assert set(job) == {
        "jobId",
        "tableName",
        "jobType",
        "submissionTimeMs",
        "segmentsForceCommitted",
    }
    assert (job["jobId"], job["tableName"], job["jobType"]) == (job_id, TABLE, "FORCE_COMMIT")
    assert int(job["submissionTimeMs"]) > 1_600_000_000_000
    assert json.loads(job["segmentsForceCommitted"]) == targets

    (audit,) = AuditEntry.objects.all()
    expected = ("force_commit", "githubEvents_REALTIME", "OK")
    assert (audit.action, audit.target, audit.result) == expected
    assert (audit.username, audit.role, audit.status_code) == ("op", "operator", 200)
    assert audit.reason == "roll the segments"
    assert audit.detail == {"jobId": job_id, "segments": targets}

    # The status: nothing committed yet; then two segments DONE and one deleted.
    status = operator.get(f"/tables/forceCommitStatus/{job_id}")
    assert status.status_code == 200
    assert status.json() == {
        **job,
        "segmentsYetToBeCommitted": targets,
        "numberOfSegmentsYetToBeCommitted": 4,
    }
    assert "segmentsYetToBeCommitted" not in read_record(zk, JOBS).record.map_fields[job_id]
    mark_done(zk, table[0])
    mark_done(zk, table[2])
    zk.delete(PATHS.segment(TABLE, table[3]))
    status = operator.get(f"/tables/forceCommitStatus/{job_id}").json()
    assert status["segmentsYetToBeCommitted"] == [table[1]]
    assert status["numberOfSegmentsYetToBeCommitted"] == 1
    assert json.loads(status["segmentsForceCommitted"]) == targets
    stored = read_record(zk, JOBS).record.map_fields[job_id]
    assert json.loads(stored["segmentsYetToBeCommitted"]) == [table[1]]


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.django_db
def test_partitions_select_the_segments_and_their_servers(operator, table, zk):
    reply = operator.post("/tables/githubEvents_REALTIME/forceCommit?partitions=1")
    assert reply.status_code == 200, reply.content
    job_id = reply.json()["forceCommitJobId"]
    by_server = sent(zk)
    assert {s for s, found in by_server.items() if found} == hosts(table[1])
    for server in hosts(table[1]):
        assert by_server[server][0].simple_fields["segmentNames"] == table[1]
    job = read_record(zk, JOBS).record.map_fields[job_id]
    assert json.loads(job["segmentsForceCommitted"]) == [table[1]]

    reply = operator.post(f"/tables/githubEvents/forceCommit?segments={table[2]},{table[0]}x")
    assert reply.status_code == 200
    job = read_record(zk, JOBS).record.map_fields[reply.json()["forceCommitJobId"]]
    assert json.loads(job["segmentsForceCommitted"]) == [table[2]]


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "status", "error"),
    [
        ("partitions=0&segments=x", 400, "Cannot specify both partitions and segments"),
        ("batchSize=0", 400, "Invalid batch config"),
        ("batchSize=two", 400, "Invalid batch config"),
        ("batchStatusCheckIntervalSec=-5", 400, "Invalid batch config"),
        ("batchStatusCheckTimeoutSec=0", 400, "Invalid batch config"),
        ("partitions=x", 400, "invalid partition id"),
        ("partitions=9", 400, "Cannot find segments to commit for partitions: 9"),
        ("segments=githubEvents__0__7__20240501T1030Z", 400, "is CONSUMING"),
    ],
)
def test_bad_parameters_are_400_and_change_nothing(operator, table, zk, query, status, error):
    before = snapshot(zk)
    reply = operator.post(f"/tables/githubEvents/forceCommit?{query}&comment=why")
    assert reply.status_code == status, reply.content
    assert error in reply.json()["error"]
    assert snapshot(zk) == before
    (audit,) = AuditEntry.objects.all()
    assert (audit.result, audit.status_code, audit.reason) == ("REJECTED", status, "why")
    assert error in audit.detail["error"]


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.django_db
def test_unknown_and_disabled_tables(operator, table, zk):
    before = snapshot(zk)
    reply = operator.post("/tables/nope/forceCommit")
    assert reply.status_code == 404
    assert reply.json()["error"] == "Table nope_REALTIME not found!"
    assert operator.post("/tables/bad__name/forceCommit").status_code == 400
    assert snapshot(zk) == before

    def disable(record):
        out = record.copy()
        out.simple_fields["HELIX_ENABLED"] = "false"
        return out

    update_record(zk, PATHS.idealstate(TABLE), disable)
    before = snapshot(zk)
    reply = operator.post("/tables/githubEvents/forceCommit")
    assert reply.status_code == 400
    assert reply.json()["error"] == f"Table {TABLE} is disabled!"
    assert snapshot(zk) == before
    results = list(AuditEntry.objects.order_by("id").values_list("result", "status_code"))
    assert results == [("REJECTED", 404), ("REJECTED", 400), ("REJECTED", 400)]


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.django_db
def test_a_viewer_is_refused_audited_and_nothing_changes(viewer, table, zk):
    before = snapshot(zk)
    reply = viewer.post("/tables/githubEvents/forceCommit?comment=please")
    assert reply.status_code == 403
    assert snapshot(zk) == before
    (audit,) = AuditEntry.objects.all()
    expected = ("force_commit", "githubEvents_REALTIME", "DENIED")
    assert (audit.action, audit.target, audit.result) == expected
    assert (audit.username, audit.role, audit.status_code) == ("oncall", "viewer", 403)
    assert audit.reason == "please"

    # Reading a job's status is for every signed-in account; anonymous callers get 401.
    assert viewer.get("/tables/forceCommitStatus/no-such-job").status_code == 404
    assert APIClient().post("/tables/githubEvents/forceCommit").status_code == 401
    assert APIClient().get("/tables/forceCommitStatus/x").status_code == 401
    assert AuditEntry.objects.count() == 1


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.django_db
def test_no_live_server_is_a_failure(operator, table, zk):
    for server in SERVERS:
        zk.delete(PATHS.liveinstance(server))
    reply = operator.post("/tables/githubEvents/forceCommit")
    assert reply.status_code == 500
    assert reply.json()["error"] == f"No force commit message was sent for table: {TABLE}"
    assert sent(zk) == {s: [] for s in SERVERS}
    assert not zk.exists(JOBS)
    (audit,) = AuditEntry.objects.all()
    assert (audit.result, audit.status_code) == ("FAILED", 500)


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.django_db
def test_batches_are_sent_once_the_previous_one_is_done(table, zk):
    scheduled: list[BatchRun] = []
    clock = [1000.0]
    manager = ForceCommitManager(
        context.current(), source="c", schedule=scheduled.append, clock=lambda: clock[0]
    )
    result = manager.force_commit("githubEvents", batch=BatchConfig(2, 3, 7))
    assert result.batches == 2 and result.job_id is not None
    (run,) = scheduled  # the remaining batch goes to Celery, to be checked every 3 s
    assert (run.index, run.deadline, run.batch) == (1, 1007.0, BatchConfig(2, 3, 7))
    assert BatchRun.from_kwargs(**run.as_kwargs()) == run  # what the task carries round-trips
    first = sent_names(zk)
    assert len(first) == 2 and set(run.rounds[0]) == first
    second = set(table.values()) - first
    assert set(run.rounds[1]) == second

    # Batch 1 not DONE yet: check again later; past the deadline, give up without sending.
    clock[0] = 1006.0
    assert manager.advance(run) == run
    clock[0] = 1007.0
    assert manager.advance(run) is None
    assert sent_names(zk) == first

    # Once batch 1 is DONE, batch 2 goes out to its hosts and the run is over.
    for segment in first:
        mark_done(zk, segment)
    assert manager.advance(run) is None
    assert sent_names(zk) == set(table.values())


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.django_db
def test_a_failed_job_write_is_reported_as_pinot_does(table, zk):
    zk.create(JOBS, b"not a znrecord", makepath=True)
    result = ForceCommitManager(context.current()).force_commit("githubEvents")
    assert result.job_id is None
    assert result.response() == {"forceCommitStatus": "SUCCESS", "jobMetaZKWriteStatus": "FAILED"}
    assert all(sent(zk).values())  # the messages went out all the same


def _sources(zk, segments: set[str]) -> set[str]:
    """The SRC_NAME of the waiting messages that name any of `segments`."""
    return {
        m.simple_fields[messages.SRC_NAME]
        for waiting in sent(zk).values()
        for m in waiting
        if set(m.simple_fields["segmentNames"].split(",")) & segments
    }


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.django_db
def test_a_batch_waits_for_the_tables_lead_controller_and_is_sent_on_its_behalf(table, zk):
    scheduled: list[BatchRun] = []
    clock = [1000.0]
    ctx = context.current()
    manager = ForceCommitManager(
        ctx,
        source="web",
        schedule=scheduled.append,
        clock=lambda: clock[0],
        lead_controller=lambda name: lead_controller_for(ctx, name),
    )
    manager.force_commit("githubEvents", batch=BatchConfig(2, 3, 7))
    (run,) = scheduled
    first = sent_names(zk)
    for segment in first:
        mark_done(zk, segment)

    # Batch 1 is DONE but nobody leads the table: wait, and past the deadline give up unsent.
    clock[0] = 1006.0
    assert manager.advance(run) == run
    clock[0] = 1007.0
    assert manager.advance(run) is None
    assert sent_names(zk) == first

    # With a live MASTER of its partition, batch 2 goes out on that controller's behalf.
    clock[0] = 1006.0
    controller = lead_every_partition(zk)
    assert manager.advance(run) is None
    second = set(table.values()) - first
    assert sent_names(zk) == set(table.values())
    assert _sources(zk, first) == {"web"} and _sources(zk, second) == {controller}


@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.django_db
def test_the_batch_task_reschedules_while_the_table_has_no_lead_controller(table, zk, redis_client):
    scheduled: list[BatchRun] = []
    ForceCommitManager(context.current(), schedule=scheduled.append).force_commit(
        "githubEvents", batch=BatchConfig(2, 3, 60)
    )
    (run,) = scheduled
    first = sent_names(zk)
    for segment in first:
        mark_done(zk, segment)
    published: list[dict] = []

    def record(sender=None, body=None, **_):
        if sender == BATCHES_TASK:
            published.append(dict(body[1]))

    before_task_publish.connect(record, weak=False)
    try:
        force_commit_batches(**run.as_kwargs())  # the task's body, in this process
        assert published == [run.as_kwargs()]  # the same step again, later
        assert sent_names(zk) == first

        controller = lead_every_partition(zk)
        force_commit_batches(**run.as_kwargs())
        assert len(published) == 1  # the last batch: nothing more to schedule
        assert _sources(zk, set(table.values()) - first) == {controller}
    finally:
        before_task_publish.disconnect(record)
        for raw in redis_client.lrange("celery", 0, -1):
            headers = json.loads(raw).get("headers", {})
            if headers.get("task") == BATCHES_TASK and TABLE in headers.get("kwargsrepr", ""):
                redis_client.lrem("celery", 1, raw)
