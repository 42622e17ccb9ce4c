"""The healing manager's task body (`tables.periodic_runs.validate`) on a real ZooKeeper cluster and
Redis stream: each table's run recorded as a HealingRun, failures recorded with their reason, data
loss and Pinot's periodic-task meters counted, old runs pruned."""

from __future__ import annotations

import pytest
from django.utils import timezone

from tables.cluster import context
from tables.controller.healing import TASK_NAME
from tables.controller.llc import LLCSegmentManager
from tables.controller.resources import ResourceManager
from tables.domain.names import LLCSegmentName
from tables.domain.periods import (
    PERIODIC_TASKS,
    REALTIME_SEGMENT_VALIDATION,
    TASK_ERROR_COUNTER,
    TASK_RUN_COUNTER,
)
from tables.domain.table_config import switch_stream_type
from tables.models import DurableCounter, HealingRun
from tables.periodic_runs import healing_settings, new_run_id, validate
from tables.redisconn import get_redis
from tables.streams.redis_streams import RedisTopicAdmin
from tables.zk.records import read_record
from tests.cluster_fixtures import PATHS, load
from tests.tables.leaders import CONTROLLER, lead_every_partition

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]
TABLE = "githubEvents_REALTIME"


@pytest.fixture
def github(servers, topic, zk) -> str:
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(
        switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic)
    )
    lead_every_partition(zk)  # a live controller leads every table (tests/tables/leaders.py)
    return topic


def _runs() -> int:
    return DurableCounter.value_of(TASK_RUN_COUNTER, REALTIME_SEGMENT_VALIDATION)


def _errors() -> int:
    return DurableCounter.value_of(TASK_ERROR_COUNTER, REALTIME_SEGMENT_VALIDATION)


def test_the_task_names_are_the_services():
    assert TASK_NAME == REALTIME_SEGMENT_VALIDATION
    assert TASK_NAME in PERIODIC_TASKS


def test_a_healthy_table_is_recorded_with_nothing_done(github):
    # Counts as increments: the session's Celery workers share the database and may have run
    # the task for an earlier test.
    runs, errors = _runs(), _errors()
    summary = validate("githubEvents", "api", "api-0000beef")
    assert summary == {
        "runId": "api-0000beef",
        "tables": [{"table": TABLE, "actions": 0, "error": None, "leadController": CONTROLLER}],
        "error": None,
    }
    run = HealingRun.objects.get(run_id="api-0000beef")
    assert (run.table, run.trigger, run.action_count, run.error) == (TABLE, "api", 0, "")
    assert run.lead_controller == CONTROLLER
    assert run.finished_at >= run.started_at
    assert (_runs() - runs, _errors() - errors) == (1, 0)

    validate(None, "schedule", "api-0000beef")  # a redelivered task records its run once
    assert HealingRun.objects.filter(run_id="api-0000beef").count() == 1
    assert HealingRun.objects.get(run_id="api-0000beef").trigger == "schedule"
    assert _runs() - runs == 2


def test_a_repair_past_dropped_offsets_is_recorded_and_counted_as_data_loss(github, settings):
    admin = RedisTopicAdmin(get_redis(settings.REDIS_URL))
    admin.produce(github, 3, [b'{"id": "2"}'] * 5, now_ms=0)
    admin.trim_before(github, 3, 6)
    ideal = read_record(context.current().client, PATHS.idealstate(TABLE)).record.map_fields
    (segment,) = [
        s
        for s, states in ideal.items()
        if LLCSegmentName.parse(s).partition_group_id == 3 and "CONSUMING" in states.values()
    ]
    llc = LLCSegmentManager(context.current())
    for server in ideal[segment]:
        llc.segment_stopped_consuming(TABLE, segment, server)

    summary = validate("githubEvents_REALTIME", "mirror", "mirror-00000001")

    assert summary["tables"][0]["actions"] >= 1
    run = HealingRun.objects.get(run_id="mirror-00000001")
    (lost,) = [a for a in run.actions if a["data_loss"]]
    assert lost["partition"] == 3 and lost["segment"] == segment
    assert run.action_count == len(run.actions)
    assert (
        DurableCounter.value_of("llcStreamDataLoss", "githubEvents") == 1
    )  # raw, as commits count


def test_an_unknown_table_is_recorded_as_failed_and_counted(github):
    runs, errors = _runs(), _errors()
    summary = validate("nosuch", "api", "api-00000404")
    (result,) = summary["tables"]
    assert result["table"] == "nosuch_REALTIME"
    assert "NotFound" in result["error"] and "nosuch" in result["error"]
    run = HealingRun.objects.get(run_id="api-00000404")
    assert run.table == "nosuch_REALTIME" and "not found" in run.error
    assert (_runs() - runs, _errors() - errors) == (1, 1)


def test_zookeeper_down_is_recorded_with_the_reason(settings, db):
    settings.ZK_HOSTS = "127.0.0.1:1"  # nothing listens there
    settings.ZK_TIMEOUT_SECONDS = 0.5
    runs, errors = _runs(), _errors()
    summary = validate("githubEvents", "api", "api-0000dead")
    assert "ZooKeeper" in summary["error"]
    run = HealingRun.objects.get(run_id="api-0000dead")
    assert run.table == TABLE and "ZooKeeper" in run.error
    validate(None, "schedule", "schedule-0000dead")  # no table to record it against
    assert not HealingRun.objects.filter(run_id="schedule-0000dead").exists()
    assert (_runs() - runs, _errors() - errors) == (2, 2)


def test_a_trigger_outside_pinots_is_refused(db):
    refused = "trigger 'cron' is not one of schedule, mirror, api, leader"
    with pytest.raises(ValueError, match=refused):
        validate(None, "cron", "cron-1")


def test_run_ids_and_settings(settings):
    assert new_run_id("api", "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b") == "api-0f1e2d3c"
    assert len(new_run_id("schedule")) == len("schedule-") + 8
    settings.PARTIAL_OFFLINE_REPLICA_REPAIR_ENABLED = True
    settings.SEGMENT_ERROR_AUTO_RESET = False
    settings.TMP_FILE_RETENTION_SECONDS = 60
    made = healing_settings()
    assert (made.partial_offline_repair, made.error_auto_reset, made.tmp_retention_s) == (
        True,
        False,
        60,
    )


def test_only_the_newest_runs_of_a_table_are_kept(db, monkeypatch):
    monkeypatch.setattr(HealingRun, "RUNS_KEPT_PER_TABLE", 3)
    start = int(timezone.now().timestamp() * 1000)
    for i in range(5):
        for table in ("a_REALTIME", "b_REALTIME"):
            HealingRun.record(
                {"table": table, "runId": f"r{i}", "trigger": "schedule", "startedMs": start + i}
            )
    kept = HealingRun.objects.filter(table="a_REALTIME").values_list("run_id", flat=True)
    assert list(kept) == ["r4", "r3", "r2"]
    assert HealingRun.objects.filter(table="b_REALTIME").count() == 3
    # Runs started in the same millisecond are ordered by insertion.
    same = start + 10_000
    for run_id in ("s1", "s2", "s3"):
        HealingRun.record(
            {"table": "a_REALTIME", "runId": run_id, "trigger": "api", "startedMs": same}
        )
    kept = HealingRun.objects.filter(table="a_REALTIME").values_list("run_id", flat=True)
    assert list(kept) == ["s3", "s2", "s1"]
    assert HealingRun.prune("a_REALTIME", keep=1) == 2
