"""The healer's re-ingestion trigger (round 2 §A.6 case a, §C.1, §C.4) on the real ZooKeeper,
against a real HTTP endpoint standing in for a server's admin port: a COMMITTING segment with
every replica in ERROR makes the healer `POST /reingestSegment/<segment>` on a live replica with
the cluster token; each answer becomes an action or a waiting note, never a failed run; a
partial-upsert table in DEFAULT mode is left untouched, ALWAYS re-ingests; a table without
pauseless consumption keeps its ERROR resets."""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tables.cluster.context import ClusterContext
from tables.controller.healing import HealingSettings, RealtimeSegmentValidationManager
from tables.controller.healing_errors import ErrorRepairer
from tables.controller.healing_report import HealingReport
from tables.controller.resources import ResourceManager
from tables.domain.segment_metadata import STATUS
from tables.domain.table_config import TableConfig, switch_stream_type
from tables.security import cluster_token
from tables.zk import codec
from tables.zk.messages import message_ids
from tables.zk.records import read_record, update_record
from tests.cluster_fixtures import PATHS, load

pytestmark = [pytest.mark.zk, pytest.mark.redis]
TABLE = "githubEvents_REALTIME"
UNRECOVERABLE = "pauselessSegmentsInUnrecoverableErrorCount"


class AdminPort:
    """A server's admin port as the test plays it: records each POST, answers `status`; its
    `GET /reingestSegment/jobs` lists `jobs`."""

    def __init__(self) -> None:
        self.status = 200
        self.jobs: list[dict[str, object]] = []
        self.requests: list[tuple[str, str, str | None, bytes]] = []
        self.lock = threading.Lock()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with recorder.lock:
                    data = json.dumps(recorder.jobs).encode()
                self.send_response(200 if self.path == "/reingestSegment/jobs" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                with recorder.lock:
                    recorder.requests.append(
                        ("POST", self.path, self.headers.get("Authorization"), body)
                    )
                    status = recorder.status
                segment = self.path.rsplit("/", 1)[-1]
                if status == 200:
                    answer = {"jobId": "job-42", "segmentName": segment, "startTimeMs": 1}
                else:
                    answer = {"code": status, "error": f"answer {status} for {segment}"}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def seen(self) -> list[tuple[str, str, str | None, bytes]]:
        with self.lock:
            return list(self.requests)


@pytest.fixture
def admin_port() -> Iterator[AdminPort]:
    port = AdminPort()
    port.thread.start()
    try:
        yield port
    finally:
        port.server.shutdown()
        port.server.server_close()
        port.thread.join()


@pytest.fixture
def ctx(servers, zk, settings):
    return ClusterContext(zk, PATHS, settings.REDIS_URL)


def _create(ctx, topic, *, pauseless=True, upsert=None, mode=None) -> TableConfig:
    rest = switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic, {})
    rest["segmentsConfig"]["replication"] = "2"
    if pauseless:
        rest["segmentsConfig"]["peerSegmentDownloadScheme"] = "http"
        stream = rest["ingestionConfig"]["streamIngestionConfig"]
        stream["pauselessConsumptionEnabled"] = True
        if mode is not None:
            stream["disasterRecoveryMode"] = mode
    if upsert is not None:
        rest["upsertConfig"] = {"mode": upsert}
        rest["routing"] = {"instanceSelectorType": "strictReplicaGroup"}
    manager = ResourceManager(ctx)
    keys = {"primaryKeyColumns": ["id"]} if upsert is not None else {}
    manager.add_schema({**load("githubEvents_schema.json"), **keys})
    return manager.add_table(rest)


def _segment(zk, partition: int) -> tuple[str, list[str]]:
    ideal = read_record(zk, PATHS.idealstate(TABLE)).record.map_fields
    segment = next(s for s in sorted(ideal) if s.startswith(f"githubEvents__{partition}__"))
    return segment, sorted(ideal[segment])


def _fail_everywhere(zk, segment: str, replicas: list[str], status: str = "COMMITTING") -> None:
    """The segment's status in ZooKeeper, and every replica ERROR in the ExternalView."""

    def with_status(record):
        out = record.copy()
        out.simple_fields[STATUS] = status
        return out

    update_record(zk, PATHS.segment(TABLE, segment), with_status)
    path = PATHS.externalview(TABLE)
    if read_record(zk, path) is None:
        base = read_record(zk, PATHS.idealstate(TABLE)).record.copy()
        zk.create(path, codec.encode(base), makepath=True)

    def errors(record):
        out = record.copy()
        out.map_fields[segment] = dict.fromkeys(replicas, "ERROR")
        return out

    update_record(zk, path, errors)


def _admin_at(zk, instances: list[str], port: int, *, key: str = "adminPort") -> None:
    """Point the instances' admin endpoint at `port`: their adminPort, or (key HELIX_PORT, no
    adminPort) their HELIX_PORT."""

    def point(record):
        out = record.copy()
        out.simple_fields.pop("adminPort", None)
        out.simple_fields[key] = str(port)
        return out

    for instance in instances:
        update_record(zk, PATHS.participant_config(instance), point)


def _repair(ctx, config: TableConfig) -> HealingReport:
    report = HealingReport(TABLE, uuid.uuid4().hex[:8], "test", 0)
    ErrorRepairer(ctx, "test").repair(config, report)
    return report


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_200_records_the_job_as_an_action(ctx, zk, topic, admin_port):
    config = _create(ctx, topic)
    segment, replicas = _segment(zk, 1)
    _fail_everywhere(zk, segment, replicas)
    _admin_at(zk, replicas, admin_port.port)
    report = _repair(ctx, config)
    (action,) = report.actions
    assert action.kind == "reingestTriggered" and action.segment == segment
    (server,) = action.instances
    assert server in replicas and "job-42" in action.detail and server in action.detail
    (request,) = admin_port.seen()
    assert request == ("POST", f"/reingestSegment/{segment}", f"Bearer {cluster_token()}", b'""')
    assert report.waiting == [] and report.error is None


def test_nothing_is_sent_while_a_replica_already_reingests_the_segment(ctx, zk, topic, admin_port):
    config = _create(ctx, topic)
    segment, replicas = _segment(zk, 1)
    _fail_everywhere(zk, segment, replicas)
    _admin_at(zk, replicas, admin_port.port)
    admin_port.jobs = [{"jobId": "job-7", "segmentName": segment, "startTimeMs": 1}]
    report = _repair(ctx, config)
    assert report.actions == [] and admin_port.seen() == []
    (note,) = report.waiting
    assert note.startswith(f"{segment}: re-ingestion already running on ") and note[-1] != " "
    admin_port.jobs = [{"jobId": "job-8", "segmentName": "another", "startTimeMs": 1}]
    (action,) = _repair(ctx, config).actions  # another segment's job changes nothing
    assert action.kind == "reingestTriggered"


def test_409_is_a_waiting_note_and_helix_port_serves_without_admin_port(ctx, zk, topic, admin_port):
    config = _create(ctx, topic)
    segment, replicas = _segment(zk, 2)
    _fail_everywhere(zk, segment, replicas)
    _admin_at(zk, replicas, admin_port.port, key="HELIX_PORT")
    admin_port.status = 409
    report = _repair(ctx, config)
    assert report.actions == []
    (note,) = report.waiting
    assert note.startswith(f"{segment}: re-ingestion already running on ")
    assert note.rsplit(" ", 1)[1] in replicas
    assert [r[1] for r in admin_port.seen()] == [f"/reingestSegment/{segment}"]


def test_500_is_a_waiting_note_and_the_run_does_not_fail(ctx, zk, topic, admin_port):
    _create(ctx, topic)
    segment, replicas = _segment(zk, 3)
    _fail_everywhere(zk, segment, replicas)
    _admin_at(zk, replicas, admin_port.port)
    admin_port.status = 500
    manager = RealtimeSegmentValidationManager(ctx, HealingSettings())
    report = manager.run_table("githubEvents", run_id="r1", trigger="test")
    assert report.error is None
    assert [a for a in report.actions if a.segment == segment] == []
    (note,) = [w for w in report.waiting if "re-ingestion" in w]
    assert "HTTP 500" in note and f"answer 500 for {segment}" in note
    assert len(admin_port.seen()) == 1


def test_an_unreachable_server_is_a_waiting_note(ctx, zk, topic):
    config = _create(ctx, topic)
    segment, replicas = _segment(zk, 1)
    _fail_everywhere(zk, segment, replicas)
    _admin_at(zk, replicas, _closed_port())
    report = _repair(ctx, config)
    assert report.actions == []
    (note,) = report.waiting
    assert note.startswith(f"{segment}: re-ingestion not started: ") and "cannot be reached" in note


def test_only_a_live_replica_is_asked_and_none_live_is_a_note(ctx, zk, topic, admin_port):
    config = _create(ctx, topic)
    segment, replicas = _segment(zk, 1)
    _fail_everywhere(zk, segment, replicas)
    _admin_at(zk, replicas, admin_port.port)
    zk.delete(PATHS.liveinstance(replicas[0]))
    report = _repair(ctx, config)
    (action,) = report.actions
    assert action.instances == (replicas[1],)
    zk.delete(PATHS.liveinstance(replicas[1]))
    again = _repair(ctx, config)
    assert again.actions == []
    (note,) = again.waiting
    assert segment in note and "no live server" in note
    assert len(admin_port.seen()) == 1


def test_partial_upsert_in_default_mode_is_untouched_and_reported(ctx, zk, topic, admin_port):
    config = _create(ctx, topic, upsert="PARTIAL")
    segment, replicas = _segment(zk, 1)
    _fail_everywhere(zk, segment, replicas)
    _admin_at(zk, replicas, admin_port.port)
    report = _repair(ctx, config)
    assert report.actions == []
    (note,) = report.waiting
    assert segment in note and "unrecoverable in DEFAULT mode" in note and UNRECOVERABLE in note
    assert admin_port.seen() == []
    assert all(len(message_ids(zk, PATHS, r)) == 0 for r in replicas)  # no reset either


def test_partial_upsert_in_always_mode_is_reingested(ctx, zk, topic, admin_port):
    config = _create(ctx, topic, upsert="PARTIAL", mode="ALWAYS")
    segment, replicas = _segment(zk, 1)
    _fail_everywhere(zk, segment, replicas)
    _admin_at(zk, replicas, admin_port.port)
    report = _repair(ctx, config)
    (action,) = report.actions
    assert action.kind == "reingestTriggered" and action.segment == segment
    assert [r[1] for r in admin_port.seen()] == [f"/reingestSegment/{segment}"]


def test_a_table_without_pauseless_keeps_its_error_resets(ctx, zk, topic, admin_port):
    config = _create(ctx, topic, pauseless=False)
    segment, replicas = _segment(zk, 1)
    _fail_everywhere(zk, segment, replicas, status="IN_PROGRESS")
    _admin_at(zk, replicas, admin_port.port)
    report = _repair(ctx, config)
    (action,) = report.actions
    assert action.kind == "errorReset" and list(action.instances) == replicas
    assert all(len(message_ids(zk, PATHS, r)) == 1 for r in replicas)
    assert admin_port.seen() == []
