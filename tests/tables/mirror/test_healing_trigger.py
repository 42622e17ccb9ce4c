"""Mirror-triggered healing runs (tables.healing_triggers, tables.mirror.sync) and the doctor over
the real mirror, against the real ZooKeeper and Redis; the runs a controller requests when it
becomes a table's lead controller (`request_leader_validation`, trigger "leader").

The task goes through Celery's real publish path to the broker (Redis); the tests count what was
published with Celery's own `before_task_publish` signal, not a stand-in.
"""

from __future__ import annotations

import json
import uuid

import pytest
from celery.signals import before_task_publish

from tables import healing_triggers
from tables.cluster import context
from tables.cluster.context import ClusterContext
from tables.controller.llc import MAX_SEGMENT_COMPLETION_TIME_KEY, LLCSegmentManager
from tables.controller.resources import ResourceManager
from tables.domain.idealstate import PauseState, with_pause_state
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import END_OFFSET, STATUS, new_in_progress
from tables.domain.table_config import switch_stream_type
from tables.domain.znrecord import ZNRecord
from tables.mirror.diagnose import diagnose_partition
from tables.mirror.sync import sync_cluster
from tables.models import HealingRun, MirroredTable, MirrorState, PartitionStatus
from tables.periodic_runs import validate
from tables.zk.cluster import init_cluster
from tables.zk.participants import register_participant
from tables.zk.records import create_record, read_record, update_record
from tables.zk.zookeeper import ZooKeeperStore
from tests.cluster_fixtures import PATHS, SERVERS, load
from tests.ingest_cluster import table_config
from tests.poll import wait_until
from tests.tables.leaders import lead_every_partition

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]
TASK = "tables.realtime_segment_validation"
QUEUE = "celery"  # the default queue: a Redis list of the broker's messages
GUARD = 300_000
TAG = "DefaultTenant_REALTIME"


@pytest.fixture(autouse=True)
def triggers_on(settings):
    """Off by default under tests (tests/envdefaults.py); these tests are about them."""
    settings.HEALING_TRIGGER_FROM_MIRROR = True


@pytest.fixture
def published(redis_client):
    """(task name, kwargs) of every task sent to the broker during the test. Afterwards the ones
    still queued are taken off the broker's queue: with no worker running yet, a later test's
    workers would run them and record healing runs in that test's database."""
    sent: list[tuple[str, dict]] = []

    def record(sender=None, headers=None, body=None, **_):
        if sender == TASK:
            sent.append((sender, dict(body[1])))

    before_task_publish.connect(record, weak=False)
    yield sent
    before_task_publish.disconnect(record)
    tables = {kwargs["table"] for _, kwargs in sent}
    for raw in redis_client.lrange(QUEUE, 0, -1):
        headers = json.loads(raw).get("headers", {})
        if headers.get("task") == TASK and any(t in headers.get("kwargsrepr", "") for t in tables):
            redis_client.lrem(QUEUE, 1, raw)


@pytest.fixture
def table_name(redis_client):
    raw = f"heal{uuid.uuid4().hex[:8]}"
    yield raw
    redis_client.delete(healing_triggers.key_for(f"{raw}_REALTIME"))


@pytest.fixture
def ctx(zk, servers, settings):
    return ClusterContext(ZooKeeperStore(zk), PATHS, settings.REDIS_URL)


# --- the debounce -----------------------------------------------------------------------------


def test_a_request_sends_one_run_per_debounce_window(redis_client, settings, published):
    settings.HEALING_TRIGGER_DEBOUNCE_SECONDS = 20
    table = f"t{uuid.uuid4().hex[:8]}_REALTIME"
    key = healing_triggers.key_for(table)
    try:
        assert healing_triggers.request_healing(table, "a repair is due")
        assert not healing_triggers.request_healing(table, "still due")
        assert published == [(TASK, {"table": table, "trigger": "mirror"})]
        assert redis_client.get(key) == b"a repair is due"
        assert 0 < redis_client.ttl(key) <= 20

        redis_client.delete(key)  # the window is over
        assert healing_triggers.request_healing(table, "due again")
        assert len(published) == 2
    finally:
        redis_client.delete(key)


def test_requests_are_off_when_the_setting_says_so(redis_client, settings, published):
    settings.HEALING_TRIGGER_FROM_MIRROR = False
    table = f"t{uuid.uuid4().hex[:8]}_REALTIME"
    assert not healing_triggers.request_healing(table, "a repair is due")
    assert published == [] and redis_client.get(healing_triggers.key_for(table)) is None


# --- the leader trigger -----------------------------------------------------------------------


def test_a_new_lead_controller_requests_one_run_per_gained_realtime_table(
    redis_client, settings, published
):
    settings.HEALING_TRIGGER_ON_LEADERSHIP = True  # off in the tests' environment
    settings.HEALING_TRIGGER_DEBOUNCE_SECONDS = 20
    raw = [f"t{uuid.uuid4().hex[:8]}" for _ in range(2)]
    typed = sorted(f"{name}_REALTIME" for name in raw)
    keys = [healing_triggers.leader_key_for(t, 1234) for t in typed]
    try:
        # Raw or with type; an OFFLINE table has no healing manager; each table once.
        gained = [raw[0], f"{raw[1]}_REALTIME", f"{raw[1]}_OFFLINE", raw[0]]
        assert healing_triggers.request_leader_validation(gained, "Controller_h_9000", 1234) == 2
        assert published == [
            (TASK, {"table": t, "trigger": "leader", "takeover_ms": 1234}) for t in typed
        ]
        assert [redis_client.get(k) for k in keys] == [b"Controller_h_9000"] * 2
        assert all(0 < redis_client.ttl(k) <= 20 for k in keys)

        # One run per takeover, apart from the mirror's requests: the same takeover again is
        # debounced, a later takeover (another controller, or the same one again) is not.
        assert healing_triggers.request_leader_validation(typed, "Controller_h_9000", 1234) == 0
        assert healing_triggers.request_healing(typed[0], "a repair is due")
        assert len(published) == 3
        assert healing_triggers.request_leader_validation(typed[:1], "Controller_h_9001", 5678) == 1
        assert published[-1] == (
            TASK,
            {"table": typed[0], "trigger": "leader", "takeover_ms": 5678},
        )
        keys.append(healing_triggers.leader_key_for(typed[0], 5678))

        # Without a takeover time: one run per table per window.
        keys += [healing_triggers.leader_key_for(t) for t in typed]
        assert healing_triggers.request_leader_validation(typed, "Controller_h_9001") == 2
        assert healing_triggers.request_leader_validation(typed, "Controller_h_9002") == 0
        redis_client.delete(keys[-1])  # that table's window is over
        assert healing_triggers.request_leader_validation(typed, "Controller_h_9002") == 1
        assert published[-1] == (
            TASK,
            {"table": typed[1], "trigger": "leader", "takeover_ms": None},
        )
    finally:
        redis_client.delete(*keys, *(healing_triggers.key_for(t) for t in typed))


def test_leader_requests_are_off_when_the_setting_says_so(redis_client, settings, published):
    settings.HEALING_TRIGGER_ON_LEADERSHIP = False
    table = f"t{uuid.uuid4().hex[:8]}_REALTIME"
    assert healing_triggers.request_leader_validation([table], "Controller_h_9000") == 0
    assert published == [] and redis_client.get(healing_triggers.leader_key_for(table)) is None


def test_redis_down_never_reaches_the_controller(published, caplog, settings):
    """Nothing listens where the debounce key would go: logged, nothing sent, no exception for
    the controller taking over."""
    settings.HEALING_TRIGGER_ON_LEADERSHIP = True
    table = f"t{uuid.uuid4().hex[:8]}_REALTIME"
    sent = healing_triggers.request_leader_validation(
        [table], "Controller_h_9000", redis_url="redis://127.0.0.1:1/0"
    )
    assert sent == 0 and published == []
    assert f"cannot request a run of {table} for Controller_h_9000" in caplog.text


# --- the mirror sync --------------------------------------------------------------------------


def _create(ctx, zk, topic: str, raw: str) -> str:
    rest = switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic, {})
    rest["tableName"] = raw
    rest["segmentsConfig"]["replication"] = "2"
    rest["segmentsConfig"]["schemaName"] = "githubEvents"
    manager = ResourceManager(ctx)
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(rest)
    table = f"{raw}_REALTIME"
    _converge(zk, table)
    return table


def _converge(zk, table: str, states: dict[str, dict[str, str]] | None = None) -> None:
    """Write the ExternalView the servers would reach (the IdealState's map, changed by
    `states`)."""
    ideal = read_record(zk, PATHS.idealstate(table)).record
    maps = {s: dict(r) for s, r in ideal.map_fields.items()}
    maps.update(states or {})
    view = ZNRecord(id=table, map_fields=maps)
    if zk.exists(PATHS.externalview(table)) is None:
        create_record(zk, PATHS.externalview(table), view)
    else:
        update_record(zk, PATHS.externalview(table), lambda _: view)


def _consuming(zk, table: str, partition: int) -> tuple[str, dict[str, str]]:
    ideal = read_record(zk, PATHS.idealstate(table)).record
    for segment, states in sorted(ideal.map_fields.items()):
        if f"__{partition}__" in segment:
            return segment, dict(states)
    raise AssertionError(f"no segment of partition {partition}")


def _step1(zk, table: str, segment: str, end: int) -> int:
    """What commit step 1 writes (the metadata DONE) and nothing else; returns the mtime."""

    def done(record: ZNRecord) -> ZNRecord:
        out = record.copy()
        out.simple_fields[STATUS] = "DONE"
        out.simple_fields[END_OFFSET] = str(end)
        return out

    update_record(zk, PATHS.segment(table, segment), done)
    return zk.exists(PATHS.segment(table, segment)).mtime


def test_an_error_replica_requests_exactly_one_run(ctx, zk, topic, table_name, published):
    table = _create(ctx, zk, topic, table_name)
    segment, states = _consuming(zk, table, 0)
    _converge(zk, table, {segment: {server: "ERROR" for server in states}})

    first = sync_cluster(ctx)
    second = sync_cluster(ctx)

    assert first.ok and second.ok, (first.lines(), second.lines())
    assert first.healing_requested == [table] and second.healing_requested == []
    assert published == [(TASK, {"table": table, "trigger": "mirror"})]
    assert f"healing runs requested: {table}" in first.lines()


def test_a_healthy_or_paused_table_requests_nothing(
    ctx, zk, topic, table_name, published, settings
):
    table = _create(ctx, zk, topic, table_name)
    report = sync_cluster(ctx)
    assert report.ok and report.healing_requested == [] and published == []
    assert MirroredTable.objects.get(name=table).stream_partitions == 4

    # Paused: a partition without its consuming segment waits for the resume.
    segment, states = _consuming(zk, table, 1)
    update_record(
        zk,
        PATHS.idealstate(table),
        lambda r: _paused(r, segment, {s: "ONLINE" for s in states}),
    )
    _step1(zk, table, segment, 5)
    _converge(zk, table)
    report = sync_cluster(ctx, now_ms=ctx.now_ms() + GUARD + 1000)
    assert report.ok and report.healing_requested == [] and published == []


def _paused(record: ZNRecord, segment: str, states: dict[str, str]) -> ZNRecord:
    out = with_pause_state(record, PauseState(True, comment="test", time_in_millis="1"))
    out.map_fields[segment] = states
    return out


def test_a_controller_stopped_after_step_1_is_seen_and_healed_after_the_guard(
    ctx, zk, topic, table_name, published
):
    table = _create(ctx, zk, topic, table_name)
    sync_cluster(ctx)
    segment, _states = _consuming(zk, table, 2)
    start = int(
        read_record(zk, PATHS.segment(table, segment)).record.simple_fields[
            "segment.realtime.startOffset"
        ]
    )
    mtime = _step1(zk, table, segment, start + 3)  # no IdealState change at all

    early = sync_cluster(ctx, now_ms=mtime + 60_000)
    assert early.ok and early.tables_changed == 1  # the metadata probe saw step 1
    assert early.healing_requested == [] and published == []
    owner = MirroredTable.objects.get(name=table)
    status = PartitionStatus.objects.get(table=owner, partition=2)
    found = diagnose_partition(owner, 2, status, now_ms=mtime + 60_000)
    assert found.kind == "commitStoppedAfterStep1" and found.due_ms == mtime + GUARD
    assert found.headline.startswith(f"{segment} DONE at ")
    assert "the controller stopped between commit steps" in found.headline
    assert MirrorState.objects.get(name="zk").max_completion_ms == GUARD

    late = sync_cluster(ctx, now_ms=mtime + GUARD + 1000)
    assert late.healing_requested == [table]
    assert published == [(TASK, {"table": table, "trigger": "mirror"})]


def test_a_controller_stopped_after_step_2_shows_the_segment_missing_from_the_idealstate(
    ctx, zk, topic, table_name, published
):
    table = _create(ctx, zk, topic, table_name)
    sync_cluster(ctx)
    segment, _states = _consuming(zk, table, 3)
    _step1(zk, table, segment, 40)
    following = str(LLCSegmentName.create(table_name, 3, 1, ctx.now_ms()))
    meta = new_in_progress(following, "40", 2, 100_000, ctx.now_ms())
    create_record(zk, PATHS.segment(table, following), meta.to_znrecord())
    mtime = zk.exists(PATHS.segment(table, following)).mtime

    report = sync_cluster(ctx, now_ms=mtime + GUARD + 1000)

    owner = MirroredTable.objects.get(name=table)
    assert [u["name"] for u in owner.unassigned_segments] == [following]
    assert report.healing_requested == [table] and len(published) == 1
    status = PartitionStatus.objects.get(table=owner, partition=3)
    found = diagnose_partition(owner, 3, status, now_ms=mtime + GUARD + 1000)
    assert found.kind == "commitStoppedAfterStep2" and found.segment == following
    assert "the controller stopped after commit step 2" in found.headline
    assert found.fix.endswith(
        f"{segment} goes ONLINE and {following} is added CONSUMING; or Run healer now"
    )


# --- through a real worker --------------------------------------------------------------------


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_the_mirror_gets_a_stopped_commit_healed_by_a_worker_seconds_after_the_guard(
    celery_workers, worker_zk, settings, topic, redis_client
):
    """Commit step 1 only (the controller "died"), a 2 s guard from the cluster config: the
    mirror sync requests one run once the guard has passed, a worker's healing manager repairs
    it and records the run as triggered by the mirror; afterwards nothing is due."""
    settings.HEALING_TRIGGER_DEBOUNCE_SECONDS = 1
    zk = worker_zk
    init_cluster(zk, PATHS)
    for index, server in enumerate(SERVERS):
        register_participant(zk, PATHS, server, "127.0.0.1", 7001 + index, [TAG])
    lead_every_partition(zk)  # the worker heals on behalf of the table's lead controller

    def short_guard(record: ZNRecord) -> ZNRecord:
        out = record.copy()
        out.simple_fields[MAX_SEGMENT_COMPLETION_TIME_KEY] = "2000"
        return out

    update_record(zk, PATHS.cluster_config, short_guard)
    ctx = context.current()
    manager = ResourceManager(ctx)
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(table_config(topic))
    table = "githubEvents_REALTIME"
    _converge(zk, table)
    segment, _states = _consuming(zk, table, 0)
    try:
        mtime = _step1(zk, table, segment, 1)

        def requested():
            report = sync_cluster(ctx)
            assert report.ok, report.lines()
            return report.healing_requested

        assert wait_until(requested, timeout=30, interval=0.5, what="a run requested") == [table]
        assert ctx.now_ms() >= mtime + 2000  # not before the guard
        run = wait_until(
            lambda: HealingRun.objects.filter(table=table, trigger="mirror").first(),
            timeout=60,
            interval=0.2,
            what="the mirror's run recorded",
        )
        assert run.error == ""
        assert [a["kind"] for a in run.actions] == ["commitStoppedAfterStep1"]
        ideal = read_record(zk, PATHS.idealstate(table)).record.map_fields
        assert set(ideal[segment].values()) == {"ONLINE"}
        assert any(
            s.startswith("githubEvents__0__1__") and "CONSUMING" in r.values()
            for s, r in ideal.items()
        )
        redis_client.delete(healing_triggers.key_for(table))
        _converge(zk, table)
        after = sync_cluster(ctx)
        assert after.ok and after.healing_requested == []
        assert HealingRun.objects.filter(table=table, trigger="mirror").count() == 1
    finally:
        redis_client.delete(healing_triggers.key_for(table))


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_new_lead_controller_gets_its_table_healed_by_a_worker_at_once(
    celery_workers, worker_zk, topic, redis_client, settings
):
    """A repair is due while nobody leads the table: the scheduled run skips it. A controller
    becomes MASTER of its partition and asks for a run: a worker repairs it on its behalf."""
    settings.HEALING_TRIGGER_ON_LEADERSHIP = True
    zk = worker_zk
    init_cluster(zk, PATHS)
    for index, server in enumerate(SERVERS):
        register_participant(zk, PATHS, server, "127.0.0.1", 7001 + index, [TAG])
    ctx = context.current()
    manager = ResourceManager(ctx)
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(table_config(topic))
    table = "githubEvents_REALTIME"
    segment, states = _consuming(zk, table, 0)
    llc = LLCSegmentManager(ctx)
    for server in states:
        llc.segment_stopped_consuming(table, segment, server)
    validate(table, "schedule", "schedule-0000cafe")
    (skipped,) = HealingRun.objects.get(run_id="schedule-0000cafe").skipped
    assert skipped.startswith("leadControllerResource_15: no lead controller")

    controller = lead_every_partition(zk)
    try:
        assert healing_triggers.request_leader_validation(["githubEvents"], controller) == 1
        run = wait_until(
            lambda: HealingRun.objects.filter(table=table, trigger="leader").first(),
            timeout=60,
            interval=0.2,
            what="the leader's run recorded",
        )
        assert (run.lead_controller, run.error, run.skipped) == (controller, "", [])
        assert [(a["kind"], a["segment"]) for a in run.actions] == [("allReplicasOffline", segment)]
        ideal = read_record(zk, PATHS.idealstate(table)).record.map_fields
        assert any(
            s.startswith("githubEvents__0__1__") and "CONSUMING" in r.values()
            for s, r in ideal.items()
        )
    finally:
        redis_client.delete(healing_triggers.leader_key_for(table))
