"""The probes Kubernetes calls (issue 22), against real processes on a ZooKeeper and Redis of their
own (one stack for the module: a controller and one server):

- the controller's `GET /health` is `OK` without credentials, 503 with the reason while its
  ZooKeeper session is down (ZooKeeper SIGSTOPped until the controller notices), `OK` again after;
- a server restarted onto a backlog answers `/health/readiness` 503 while it catches up (the
  fault-injection hold `server.<id>.consumer_holds` keeps its consumer from reading, so the
  catch-up lasts exactly as long as the test wants) and `OK` once it has consumed up to the
  stream's latest offset at its start; `/health/liveness` is `OK` all along;
- the ready server's readiness is 503 while its ZooKeeper session is down, `OK` after.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.redisconn import get_redis
from tables.streams.redis_streams import RedisTopicAdmin
from tables.zk.client import close_all
from tests.cluster_fixtures import load
from tests.e2e.outage_stack import OutageStack
from tests.ingest_cluster import HOST, free_port, table_config
from tests.poll import wait_until

pytestmark = [
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.services,
    pytest.mark.django_db(transaction=True),
]
TABLE = "probes"
BACKLOG = 300


class ProbeStack(OutageStack):
    """A private ZooKeeper and Redis, a controller; servers started by the tests."""

    def __init__(self, var_dir: Path) -> None:
        super().__init__(var_dir)
        self.log_prefix = "probes"
        self.faults = var_dir / "faults"
        self.faults.mkdir()

    def _env(self) -> dict[str, str]:
        return {
            **super()._env(),
            "FAULT_INJECTION_DIR": str(self.faults),
            "REALTIME_CONSUMPTION_CATCHUP_WAIT_MS": "600000",
            "ENABLE_REALTIME_OFFSET_BASED_CONSUMPTION_STATUS_CHECKER": "true",
        }

    def start(self) -> None:
        self.start_stores()
        self.start_controller()

    def hold(self, server: str) -> Path:
        return self.faults / f"server.{server}.consumer_holds"


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[ProbeStack]:
    cluster = ProbeStack(tmp_path_factory.mktemp("probes"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def private(stack, settings) -> Iterator[ProbeStack]:
    settings.ZK_HOSTS, settings.REDIS_URL = stack.zk_hosts, stack.redis_url
    close_all()
    yield stack
    close_all()


def _get(port: int, path: str) -> tuple[int, str]:
    """(status, text body) without credentials; (0, why) while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def _answers(port: int, path: str, status: int, timeout: float = 60) -> str:
    """Poll until `path` answers `status`; its body."""
    seen: list[tuple[int, str]] = []

    def check() -> str | None:
        seen.append(_get(port, path))
        return seen[-1][1] if seen[-1][0] == status else None

    try:
        return wait_until(check, timeout=timeout, interval=0.1, what=f"{path} -> {status}")
    except TimeoutError as exc:
        raise AssertionError(f"{path}: last answers {seen[-3:]}") from exc


def _live(stack: ProbeStack, instance: str) -> bool:
    try:
        ctx = context.current()
        return instance in ctx.client.get_children(ctx.paths.liveinstances)
    except Exception:
        return False


def _create_table(admin: RedisTopicAdmin) -> None:
    admin.create_topic(TABLE, 1)
    schema = load("githubEvents_schema.json")
    schema["schemaName"] = TABLE
    config = table_config(
        TABLE,
        **{
            "realtime.segment.flush.threshold.segment.rows": "50000",
            "realtime.segment.flush.threshold.time": "24h",
        },
    )
    config["tableName"] = TABLE
    config["segmentsConfig"]["replication"] = "1"
    config["segmentsConfig"].pop("schemaName", None)
    manager = ResourceManager(context.current())
    manager.add_schema(schema)
    manager.add_table(config)


def test_controller_health_is_ok_without_credentials(private):
    assert _answers(private.controller_port, "/health", 200) == "OK"
    assert _get(private.controller_port, "/health?checkType=liveness") == (200, "OK")


def test_web_health_connects_on_first_call_and_says_why_it_cannot(private, settings):
    client = APIClient()  # no credentials, as a probe calls it
    reply = client.get("/health")
    assert (reply.status_code, reply.content, reply["Content-Type"]) == (
        200,
        b"OK",
        "text/plain; charset=utf-8",
    )
    settings.ZK_HOSTS, settings.ZK_TIMEOUT_SECONDS = f"{HOST}:{free_port()}", 1.0
    reply = client.get("/health")
    assert reply.status_code == 503
    assert b"unreachable" in reply.content, reply.content


def test_health_is_in_the_openapi_schema(django_user_model):
    client = APIClient()
    client.force_login(django_user_model.objects.create_user("probe-reader", password="pw-12345"))
    schema = client.get("/api/v1/schema/?format=json").json()
    assert "get" in schema["paths"]["/health"]


def test_server_readiness_waits_for_catch_up_on_a_backlog(private):
    instance = private.server_id(0)
    port = private.server_ports["server0"]
    private.start_server(0)
    wait_until(lambda: _live(private, instance), timeout=60, what=f"{instance} live")
    admin = RedisTopicAdmin(get_redis(private.redis_url))
    _create_table(admin)
    _answers(port, "/health/readiness", 200)  # an empty topic: nothing to catch up on

    # The backlog is written while the server is down; it comes back held before its first fetch.
    assert private.kill("server0", 15) == 0
    admin.produce(TABLE, 0, [b'{"id": %d}' % i for i in range(BACKLOG)], int(time.time() * 1000))
    latest = admin.provider(TABLE).latest_offset(0)
    private.hold(instance).touch()
    private.start_server(0)
    reason = wait_until(
        lambda: "catch up" in (r := _get(port, "/health/readiness")[1]) and r,
        timeout=60,
        what="readiness waits for catch-up",
    )
    assert f"of {latest}" in reason, reason
    assert _get(port, "/health/liveness") == (200, "OK")
    assert _get(port, "/health") == (200, "OK")  # Pinot's plain /health is kept as it was

    private.hold(instance).unlink()
    assert _answers(port, "/health/readiness", 200) == "OK"
    debug = _get(port, f"/debug/tables/{TABLE}")[1]
    assert f'"nextOffset": "{latest}"' in debug, debug


def test_probes_answer_503_while_zookeeper_is_lost(private):
    if "server0" not in private.procs or not private.alive("server0"):
        private.start_server(0)
    port = private.server_ports["server0"]
    _answers(port, "/health/readiness", 200)
    _answers(private.controller_port, "/health", 200)
    private.freeze("zookeeper")
    try:
        reason = _answers(private.controller_port, "/health", 503)
        assert "ZooKeeper" in reason, reason
        reason = _answers(port, "/health/readiness", 503)
        assert "ZooKeeper" in reason, reason
        assert _get(port, "/health/liveness") == (200, "OK")
    finally:
        private.thaw("zookeeper")
    assert _answers(private.controller_port, "/health", 200) == "OK"
    assert _answers(port, "/health/readiness", 200) == "OK"
