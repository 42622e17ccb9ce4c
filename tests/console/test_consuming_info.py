"""The controller's `GET /tables/{t}/consumingSegmentsInfo` (reference §4.6), over real HTTP.

Two real `ServerInstance`s in this process consume the githubEvents table (replication 2) beside a
third server that is registered but dead; the controller's answer must carry each live server's own
figures for its segments, count the dead one in `serversFailingToRespond`, and list every CONSUMING
segment. Small real HTTP servers stand in for servers that answer garbage, an error or nothing.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from tables import builds
from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.server.admin import AdminServer
from tables.server.instance import ServerInstance
from tables.zk.participants import register_participant
from tests.cluster_fixtures import PATHS, load
from tests.ingest_cluster import HOST, free_port, table_config
from tests.poll import wait_until

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]

RAW = "githubEvents"
TABLE = "githubEvents_REALTIME"
TAG = "DefaultTenant_REALTIME"
NEXT = {str(p): str(p + 2) for p in range(4)}  # the `topic` fixture's rows end at offset p+1


@pytest.fixture
def api(django_user_model) -> APIClient:
    """A signed-in account that is not an admin: reading takes no more."""
    client = APIClient()
    client.force_authenticate(django_user_model.objects.create_user("reader", password="x"))
    return client


def _create_table(topic: str, replication: int) -> dict[str, dict[str, str]]:
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    config = table_config(topic, **{"realtime.segment.flush.threshold.segment.rows": "1000"})
    config["segmentsConfig"]["replication"] = str(replication)
    manager.add_table(config)
    return manager.idealstate(TABLE)


def _admin_json(port: int, path: str) -> object:
    """The admin server's JSON, or None for a 404 (a table the server does not host yet)."""
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=10) as reply:
            return json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


def _as_controller_item(server: str, item: dict) -> dict:
    """A server's own item as the controller must show it."""
    offsets = item["partitionOffsetInfo"]
    return {
        "serverName": server,
        "consumerState": item["consumerState"],
        "lastConsumedTimestamp": item["lastConsumedTimestamp"],
        "partitionToOffsetMap": item["partitionToOffsetMap"],
        "partitionOffsetInfo": {
            "currentOffsetsMap": offsets["currentOffsets"],
            "latestUpstreamOffsetMap": offsets["latestUpstreamOffsets"],
            "recordsLagMap": offsets["recordsLag"],
            "availabilityLagMsMap": offsets["availabilityLagMs"],
        },
    }


@pytest.fixture
def two_servers(cluster, tmp_path: Path) -> Iterator[dict[str, AdminServer]]:
    """Two in-process servers with their admin HTTP: instance id -> admin server."""
    started: list[tuple[ServerInstance, AdminServer]] = []
    for index in range(2):
        port, admin_port = free_port(), free_port()
        instance = ServerInstance(
            f"Server_{HOST}_{port}",
            HOST,
            port,
            context.current,
            builds.deep_store,
            lambda *args: None,
            tmp_path / f"server{index}",
            admin_port=admin_port,
            tick_s=0.5,
        )
        admin = AdminServer(instance, HOST, admin_port, lambda: (b"", "text/plain"))
        admin.start()
        instance.start()
        started.append((instance, admin))
    try:
        for instance, _ in started:
            path = PATHS.liveinstance(instance.instance_id)
            wait_until(lambda path=path: cluster.exists(path), what="registered")
        yield {instance.instance_id: admin for instance, admin in started}
    finally:
        for instance, admin in started:
            instance.stop()
            admin.stop()


def test_the_controller_merges_every_servers_own_figures(cluster, topic, two_servers, api):
    # A third server of the tenant that was registered but is not running: nothing listens on its
    # admin port, yet the assignment gives it segments.
    dead = f"Server_{HOST}_{free_port()}"
    register_participant(cluster, PATHS, dead, HOST, 1, [TAG], admin_port=free_port())
    ideal = _create_table(topic, replication=2)
    assert len(ideal) == 4
    assert any(dead in replicas for replicas in ideal.values())

    def own_answers() -> dict[str, list[dict]] | None:
        """Each live server's own consumingSegmentsInfo, once it has read all its partitions."""
        out = {}
        for server, admin in two_servers.items():
            items = _admin_json(admin.port, f"/tables/{TABLE}/consumingSegmentsInfo")
            if items is None:
                return None
            hosted = [s for s, replicas in ideal.items() if server in replicas]
            current = {
                p: o for i in items for p, o in i["partitionOffsetInfo"]["currentOffsets"].items()
            }
            if sorted(i["segmentName"] for i in items) != sorted(hosted):
                return None
            if any(NEXT[p] != o for p, o in current.items()):
                return None
            out[server] = items
        return out

    own = wait_until(own_answers, what="both servers read their partitions")

    reply = api.get(f"/tables/{RAW}/consumingSegmentsInfo")
    assert reply.status_code == 200, reply.content
    body = reply.json()
    assert list(body) == [
        "serversFailingToRespond",
        "serversUnparsableRespond",
        "_segmentToConsumingInfoMap",
    ]
    assert body["serversFailingToRespond"] == 1  # the dead server
    assert body["serversUnparsableRespond"] == 0
    info = body["_segmentToConsumingInfoMap"]
    assert list(info) == sorted(ideal)
    expected: dict[str, list[dict]] = {segment: [] for segment in ideal}
    for server in sorted(own):
        for item in own[server]:
            expected[item["segmentName"]].append(_as_controller_item(server, item))
    assert info == expected
    for segment, replicas in ideal.items():
        live_replicas = sorted(s for s in replicas if s != dead)
        assert [i["serverName"] for i in info[segment]] == live_replicas
        for item in info[segment]:
            partition = next(iter(item["partitionToOffsetMap"]))
            assert item["consumerState"] == "CONSUMING"
            assert item["partitionOffsetInfo"]["currentOffsetsMap"] == {partition: NEXT[partition]}
            assert item["partitionOffsetInfo"]["recordsLagMap"] == {partition: "0"}
    # The name with its type answers the same (the figures are settled: nothing is produced).
    assert api.get(f"/tables/{TABLE}/consumingSegmentsInfo").json() == body


class _FakeServerHandler(BaseHTTPRequestHandler):
    """Answers as its server's `mode` says: "garbage", "object", "error", "hang" or a JSON list."""

    server: _FakeServer

    def do_GET(self) -> None:
        mode = self.server.mode
        if mode == "hang":
            self.server.release.wait(30)
            return
        status, body = 200, mode
        if mode == "garbage":
            body = "<html>not json</html>"
        elif mode == "object":
            body = json.dumps({"segmentName": "not a list"})
        elif mode == "error":
            status, body = 500, json.dumps({"code": 500, "error": "boom"})
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _FakeServer(ThreadingHTTPServer):
    daemon_threads = True
    mode: str
    release: threading.Event


def test_servers_failing_or_unparsable_are_counted(cluster, topic, api, settings):
    settings.SERVER_ADMIN_TIMEOUT_SECONDS = 0.5
    release = threading.Event()
    fakes: dict[str, _FakeServer] = {}
    instances: dict[str, str] = {}
    for mode in ("good", "garbage", "object", "error", "hang"):
        fake = _FakeServer((HOST, 0), _FakeServerHandler)
        fake.mode, fake.release = "[]", release
        threading.Thread(target=fake.serve_forever, daemon=True).start()
        instance = f"Server_{HOST}_{free_port()}"
        register_participant(
            cluster, PATHS, instance, HOST, 1, [TAG], admin_port=fake.server_address[1]
        )
        fakes[mode], instances[mode] = fake, instance
    try:
        ideal = _create_table(topic, replication=5)  # every server hosts every segment
        segment = sorted(ideal)[0]
        server_item = {
            "segmentName": segment,
            "consumerState": "NOT_CONSUMING",
            "lastConsumedTimestamp": 1_714_563_100_000,
            "partitionToOffsetMap": {"0": "17"},
            "partitionOffsetInfo": {
                "currentOffsets": {"0": "17"},
                "latestUpstreamOffsets": {"0": "20"},
                "recordsLag": {"0": "3"},
                "availabilityLagMs": {"0": "120"},
            },
        }
        fakes["good"].mode = json.dumps([server_item])
        for mode in ("garbage", "object", "error", "hang"):
            fakes[mode].mode = mode

        body = api.get(f"/tables/{TABLE}/consumingSegmentsInfo").json()
        assert body["serversFailingToRespond"] == 2  # the 500 and the one that never answers
        assert body["serversUnparsableRespond"] == 2  # not JSON; JSON but not a list
        good = instances["good"]
        assert body["_segmentToConsumingInfoMap"] == {
            s: ([_as_controller_item(good, server_item)] if s == segment else [])
            for s in sorted(ideal)
        }
    finally:
        release.set()
        for fake in fakes.values():
            fake.shutdown()
            fake.server_close()


def test_unknown_malformed_and_anonymous(cluster, api):
    reply = api.get("/tables/noSuchTable/consumingSegmentsInfo")
    assert reply.status_code == 404
    assert reply.json() == {"code": 404, "error": "Table noSuchTable_REALTIME not found!"}
    reply = api.get("/tables/bad__name/consumingSegmentsInfo")
    assert reply.status_code == 400
    assert reply.json()["code"] == 400
    assert APIClient().get("/tables/noSuchTable/consumingSegmentsInfo").status_code in (401, 403)
