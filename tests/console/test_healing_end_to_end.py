"""The controller periodic tasks through the real broker and a real worker process: an operator's
`GET /periodictask/run` queues the healing manager under its `api-…` id, the worker runs it on
the cluster in ZooKeeper and records the run, which `GET /api/v1/healing/runs/{runId}` then
shows; the status checker task checks the mirror and /metrics counts both tasks' runs.

The workers write to the test database file, hence `transaction=True` (and the request's task is
sent at once: no transaction holds it back)."""

from __future__ import annotations

import pytest
from celery.result import AsyncResult
from rest_framework.test import APIClient

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.models import TableStatusCheck
from tables.tasks import segment_status_checker
from tests.accounts import grant
from tests.cluster_fixtures import load
from tests.console import mirror_factory as mf
from tests.ingest_cluster import table_config
from tests.poll import wait_until
from tests.tables.leaders import CONTROLLER, lead_every_partition

pytestmark = [
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.celery,
    pytest.mark.django_db(transaction=True),
]
TIMEOUT = 60


@pytest.fixture
def zk(worker_zk):
    """The cluster fixtures build on `zk`: here, the chroot the workers read."""
    return worker_zk


@pytest.fixture
def operator(django_user_model) -> APIClient:
    user = grant(
        django_user_model.objects.create_user("op", password="a-long-password"), "operator"
    )
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_run_healer_now_is_run_by_a_worker_and_recorded(
    celery_workers, zk, servers, topic, operator
):
    lead_every_partition(zk)  # the worker heals on behalf of the table's lead controller
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(table_config(topic))
    mf.table("githubEvents", idealstate_version=1)  # the mirror has the table (for /api/v1)

    resp = operator.get(
        "/periodictask/run",
        {"taskname": "RealtimeSegmentValidationManager", "tableName": "githubEvents"},
    )
    assert resp.status_code == 200, resp.content
    run_id = resp.json()["taskId"]

    summary = AsyncResult(run_id).get(timeout=TIMEOUT)
    assert summary["runId"] == run_id
    (result,) = summary["tables"]
    assert result == {
        "table": "githubEvents_REALTIME",
        "actions": 0,
        "error": None,
        "leadController": CONTROLLER,
    }
    found = wait_until(
        lambda: operator.get(f"/api/v1/healing/runs/{run_id}").status_code == 200,
        timeout=TIMEOUT,
        what=f"run {run_id} recorded",
    )
    assert found
    (run,) = operator.get(f"/api/v1/healing/runs/{run_id}").json()["results"]
    assert (run["table"], run["trigger"], run["error"], run["actions"]) == (
        "githubEvents_REALTIME",
        "api",
        None,
        [],
    )
    history = operator.get("/api/v1/tables/githubEvents/healing").json()
    assert [r["runId"] for r in history["results"]] == [run_id]


def test_the_status_checker_task_checks_the_mirror_and_metrics_count_it(celery_workers):
    events = mf.table("events", idealstate_version=1)
    mf.instance("Server_a_8001")
    mf.instance("Server_b_8002")
    mf.segment(events, 0, 0, external_states={"Server_a_8001": "ERROR", "Server_b_8002": "ONLINE"})

    assert segment_status_checker.delay().get(timeout=TIMEOUT)["checked"] == 1

    check = TableStatusCheck.objects.get(table=events)
    assert check.segments_in_error_state == 1
    text = APIClient().get("/metrics").content.decode()
    assert (
        'pinot_controller_controllerPeriodicTaskRun_Count{taskName="SegmentStatusChecker"} 1.0'
        in text
    )
    assert (
        'pinot_controller_segmentsWithLessReplicas_Value{table="events",tableType="REALTIME"} 1.0'
        in text
    )
