"""The server's re-ingestion endpoints (round 2 §C.2) on a real in-process server, real ZooKeeper
and Redis: every answer of `POST /reingestSegment/{segment}` (400 name, 401 token, 404 table, 404
metadata, 400 download URL present, "" included, 500 offsets, 409 in progress, 200) and `GET
/reingestSegment/jobs` listing the running job until it ends; a failure outside the Spark task
counts `segmentReingestionFailure`, a failed Spark task (counted by the worker) does not count
again. The Spark task is replaced here by a submission the test holds and releases; the real one
runs in tests/tables/server/test_reingestion_e2e.py."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tables import builds
from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentStatus, SegmentZKMetadata
from tables.security import cluster_token
from tables.server.admin import AdminServer
from tables.server.instance import ServerInstance
from tables.server.reingestion import SegmentReingestion
from tables.zk.records import create_record
from tests.cluster_fixtures import PATHS, load
from tests.ingest_cluster import HOST, admin_get, free_port, table_config
from tests.poll import wait_until

pytestmark = [pytest.mark.zk, pytest.mark.redis]
TABLE = "githubEvents_REALTIME"


def _name(partition: int, sequence: int) -> str:
    return str(LLCSegmentName.create("githubEvents", partition, sequence, 1_714_559_400_000))


class HeldTask:
    """A submitted rebuild the test finishes: `release(outcome)` or `release(None)` (failed)."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.outcome: dict[str, Any] | None = None

    def release(self, outcome: dict[str, Any] | None) -> None:
        self.outcome = outcome
        self.done.set()

    def ready(self) -> bool:
        return self.done.is_set()

    def successful(self) -> bool:
        return self.outcome is not None

    def get(self, timeout: float | None = None, propagate: bool = True) -> Any:
        return self.outcome if self.outcome is not None else RuntimeError("the build failed")

    def revoke(self) -> None:
        self.done.set()


@dataclass
class Admin:
    port: int
    zk: Any
    submitted: list[tuple[tuple, HeldTask]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def post(self, segment: str, token: str | None = None) -> tuple[int, Any]:
        request = urllib.request.Request(
            f"http://{HOST}:{self.port}/reingestSegment/{segment}", data=b'""', method="POST"
        )
        request.add_header("Authorization", f"Bearer {token or cluster_token()}")
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, json.loads(exc.read())

    def jobs(self) -> list[dict[str, Any]]:
        return admin_get(self.port, "/reingestSegment/jobs")

    def metadata(self, meta: SegmentZKMetadata) -> str:
        create_record(self.zk, PATHS.segment(TABLE, meta.segment_name), meta.to_znrecord())
        return meta.segment_name


@pytest.fixture
def admin(cluster, topic, tmp_path: Path) -> Iterator[Admin]:
    """githubEvents served by one in-process server whose admin port has re-ingestion with a
    held submission and a recorded failure count."""
    port = free_port()
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
    state = Admin(free_port(), cluster)

    def submit(*args: object) -> HeldTask:
        task = HeldTask()
        state.submitted.append((args, task))
        return task

    reingestion = SegmentReingestion(instance, submit, state.failures.append, poll_s=0.05)
    server = AdminServer(instance, HOST, state.port, lambda: (b"", "text/plain"), None, reingestion)
    instance.start()
    server.start()
    try:
        wait_until(lambda: cluster.exists(PATHS.liveinstance(instance.instance_id)), what="live")
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


def _committing(segment: str, **fields: Any) -> SegmentZKMetadata:
    values = {"start_offset": "1", "end_offset": "101", **fields}
    return SegmentZKMetadata(segment, status=SegmentStatus.COMMITTING, **values)


def test_a_name_not_in_llc_format_is_400(admin):
    assert admin.post("notASegment") == (
        400,
        {"code": 400, "error": "Segment name is not in LLC format: notASegment"},
    )


def test_without_the_cluster_token_the_post_is_401(admin):
    segment = admin.metadata(_committing(_name(0, 7)))
    status, body = admin.post(segment, token="wrong")
    assert (status, body["code"]) == (401, 401)
    assert admin.submitted == [] and admin.jobs() == []


def test_a_table_this_server_does_not_serve_is_404(admin):
    segment = "otherTable__0__3__20240501T1030Z"
    assert admin.post(segment) == (
        404,
        {"code": 404, "error": "Table data manager not found for table: otherTable_REALTIME"},
    )


def test_a_segment_without_zk_metadata_is_404(admin):
    segment = _name(0, 42)
    assert admin.post(segment) == (
        404,
        {"code": 404, "error": f"Segment ZK metadata not found for segment: {segment}"},
    )


@pytest.mark.parametrize("url", ["", "http://controller/segments/githubEvents/x"])
def test_a_download_url_present_even_empty_is_400(admin, url):
    segment = admin.metadata(_committing(_name(1, 7), download_url=url))
    assert admin.post(segment) == (
        400,
        {
            "code": 400,
            "error": f"Download URL is already present for segment: {segment}. "
            "No need to re-ingest.",
        },
    )


@pytest.mark.parametrize("missing", ["start_offset", "end_offset"])
def test_a_missing_offset_is_500(admin, missing):
    segment = admin.metadata(_committing(_name(2, 7), **{missing: None}))
    assert admin.post(segment) == (
        500,
        {"code": 500, "error": f"Null start/end offset for segment: {segment}"},
    )
    assert admin.submitted == []


def test_a_job_is_listed_while_it_runs_and_a_second_request_is_409(admin):
    segment = admin.metadata(_committing(_name(3, 7)))
    encoded = segment.replace("__", "%5F%5F")  # the name is URL-decoded
    status, job = admin.post(encoded)
    assert status == 200
    assert set(job) == {"jobId", "segmentName", "startTimeMs"}
    assert job["segmentName"] == segment
    assert admin.jobs() == [job]
    wait_until(lambda: admin.submitted, what="the rebuild submitted")
    assert admin.submitted[0][0] == (TABLE, segment, 1, 101)  # [startOffset, endOffset)

    assert admin.post(segment) == (
        409,
        {"code": 409, "error": f"Re-ingestion for segment: {segment} is already in progress."},
    )
    assert len(admin.submitted) == 1

    admin.submitted[0][1].release(None)  # the Spark task failed: the worker counted it
    wait_until(lambda: admin.jobs() == [], what="the job to leave the list")
    assert admin.failures == []
    status, again = admin.post(segment)  # a new job may start once the old one ended
    assert status == 200 and again["jobId"] != job["jobId"]


def test_a_failure_after_the_rebuild_is_logged_and_counted(admin, caplog):
    segment = admin.metadata(_committing(_name(0, 8)))
    assert admin.post(segment)[0] == 200
    wait_until(lambda: admin.submitted, what="the rebuild submitted")
    missing = builds.deep_store().uri_for(f"githubEvents/{segment}.missing")
    admin.submitted[0][1].release({"download_uri": missing, "rows": 100})
    wait_until(lambda: admin.jobs() == [], what="the job to end")
    assert admin.failures == ["githubEvents"]
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert any(segment in r.getMessage() for r in errors)
