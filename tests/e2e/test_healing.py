"""The healing manager's repair cases with real processes, each ending with `verify_ledger --rows`.

One stack for the module (a controller and three servers as processes, in the Celery workers'
ZooKeeper chroot, with fault injection on), one table and topic per test, dropped afterwards. The
cluster's `max.segment.completion.time.millis` is 3 s, so guarded repairs are due within seconds.
Healing runs come from the test (`RealtimeSegmentValidationManager`, as the Celery task runs it) and
may also come from the workers (mirror-triggered); the assertions are on what ZooKeeper shows, so
either may repair. Cases:
- the controller exits right after commit step 1 (seen and repaired through the console's
  doctor and "Run healer now" in Chromium), and right after step 2 (fault points);
- both replicas of a partition fail their consumers (stoppedConsuming: all OFFLINE) after the stream
  was trimmed past the segment's start: a new segment from the earliest offset, the loss recorded
  and excused exactly;
- the consuming segment deleted (IdealState entry and metadata): a new one from the last end offset;
- a partition added to the stream: sequence 0 from its earliest offset;
Tables have two partitions and little data: every commit is a Spark build on the session's one
Spark worker, and this module shares `make test`'s time budget.
- a replica whose download failed (ERROR on a DONE segment): reset, it downloads again;
- one replica's consumer failing with the partial-OFFLINE switch on: back to CONSUMING.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from tables.builds import deep_store
from tables.cluster import context
from tables.cluster.leadership import table_leaders
from tables.controller.healing import HealingSettings, RealtimeSegmentValidationManager
from tables.controller.resources import ResourceManager
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentStatus
from tables.redisconn import get_redis
from tables.streams.redis_streams import RedisStreamProvider, RedisTopicAdmin
from tables.zk.client import close_all, new_client
from tables.zk.records import read_record, update_record
from tests import envdefaults
from tests.cluster_fixtures import PATHS, load
from tests.ingest_cluster import IngestCluster, table_config, verify_rows
from tests.poll import wait_until

pytestmark = [
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.celery,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]
GUARD_MS = 3000
PASSWORD = "a-long-test-password"
ARTIFACTS = Path(envdefaults.VAR_DIR) / "artifacts"


class HealingCluster(IngestCluster):
    def __init__(self, zk_hosts: str, data_dir: Path, faults: Path) -> None:
        super().__init__(zk_hosts, data_dir, "healing")
        self.faults = faults
        self.dead_session: int | None = None  # set by `_stuck_at_exit`

    def _env(self) -> dict[str, str]:
        return {**super()._env(), "FAULT_INJECTION_DIR": str(self.faults)}

    def arm(self, point: str) -> None:
        (self.faults / point).touch()


@pytest.fixture(scope="module")
def stack(celery_workers, tmp_path_factory) -> Iterator[HealingCluster]:
    root = tmp_path_factory.mktemp("healing")
    (root / "faults").mkdir()
    cluster = HealingCluster(celery_workers.zk_hosts, root / "servers", root / "faults")
    saved = django_settings.ZK_HOSTS
    django_settings.ZK_HOSTS = celery_workers.zk_hosts
    zk = new_client(celery_workers.zk_hosts)
    cluster.start_controller()
    for index in range(3):
        cluster.start_server(index)
    wanted = {cluster.controller_id, *(cluster.server_id(i) for i in range(3))}

    def live() -> bool:
        found = zk.get_children(PATHS.liveinstances) if zk.exists(PATHS.liveinstances) else []
        return wanted <= set(found)

    try:
        wait_until(live, timeout=90, what="controller and 3 servers live")

        def guard(record):
            out = record.copy()
            out.simple_fields["max.segment.completion.time.millis"] = str(GUARD_MS)
            return out

        update_record(zk, PATHS.cluster_config, guard)
        yield cluster
    finally:
        cluster.stop()
        for child in zk.get_children("/"):
            zk.delete(f"/{child}", recursive=True)
        zk.stop()
        zk.close()
        close_all()
        django_settings.ZK_HOSTS = saved


class Case:
    """One table of the module's stack: its own name, topic and producer."""

    def __init__(self, stack: HealingCluster, partitions: int = 2, replication: int = 2):
        self.stack = stack
        self.name = f"heal{uuid.uuid4().hex[:6]}"
        self.table = f"{self.name}_REALTIME"
        self.topic = f"topic-{uuid.uuid4().hex[:10]}"
        self.partitions = partitions
        self.replication = replication
        self.redis = get_redis(django_settings.REDIS_URL)
        self.admin = RedisTopicAdmin(self.redis)
        self.admin.create_topic(self.topic, partitions)
        self.ctx = context.current()
        self.manager = ResourceManager(self.ctx)

    def produce(self, count: int, rate: int) -> subprocess.Popen:
        """`manage.py produce` over the topic's partitions, as its own process."""
        schema = envdefaults.PINOT_FIXTURES / "githubEvents_schema.json"
        args = ["produce", "--topic", self.topic, "--partitions", str(self.partitions)]
        args += ["--rate", str(rate), "--schema", str(schema), "--count", str(count)]
        return subprocess.Popen(
            [sys.executable, "manage.py", *args],
            cwd=envdefaults.ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )

    def create(self, **stream: str) -> None:
        schema = load("githubEvents_schema.json")
        schema["schemaName"] = self.name
        rest = table_config(self.topic, **stream)
        rest["tableName"] = self.name
        rest["segmentsConfig"]["schemaName"] = self.name
        rest["segmentsConfig"]["replication"] = str(self.replication)
        self.manager.add_schema(schema)
        self.manager.add_table(rest)

    def heal(self, **settings: object) -> list[str]:
        healer = RealtimeSegmentValidationManager(
            context.current(), HealingSettings(**settings), deep_store=deep_store
        )
        report = healer.run_table(self.table, run_id=uuid.uuid4().hex[:8], trigger="test")
        assert report.error is None, report.error
        return [a.kind for a in report.actions]

    # --- reads --------------------------------------------------------------------------------
    def ideal(self) -> dict[str, dict[str, str]]:
        return self.manager.idealstate(self.table)

    def meta(self, segment: str):
        return self.manager.segment_metadata(self.table, segment)

    def of_partition(self, partition: int) -> dict[str, dict[str, str]]:
        return {
            s: st
            for s, st in self.ideal().items()
            if LLCSegmentName.parse(s).partition_group_id == partition
        }

    def consuming(self, partition: int) -> list[str]:
        return sorted(
            s for s, st in self.of_partition(partition).items() if "CONSUMING" in st.values()
        )

    def stuck_after_step1(self) -> list[str]:
        """DONE segments that are still CONSUMING in the IdealState."""
        return [
            segment
            for segment, states in self.ideal().items()
            if "CONSUMING" in states.values() and self.meta(segment).status == SegmentStatus.DONE
        ]

    def orphan_of(self, stuck: str) -> str | None:
        """The segment after `stuck` when its metadata exists but the IdealState lacks it (its
        commit end stopped after step 2)."""
        name = LLCSegmentName.parse(stuck)
        for segment in self.manager.segment_names(self.table):
            following = LLCSegmentName.parse(segment)
            if (
                following.partition_group_id == name.partition_group_id
                and following.sequence_number == name.sequence_number + 1
                and segment not in self.ideal()
            ):
                return segment
        return None

    def replica_states(self, segment: str) -> dict[str, str]:
        found = read_record(self.ctx.client, PATHS.externalview(self.table))
        return {} if found is None else dict(found.record.map_fields.get(segment, {}))

    # --- finishing ----------------------------------------------------------------------------
    def all_committed(self) -> bool:
        provider = RedisStreamProvider(self.redis, self.topic)
        latest = {p: provider.latest_offset(p) for p in range(self.partitions)}
        ends: dict[int, int] = {}
        for segment in self.manager.segment_names(self.table):
            name = LLCSegmentName.parse(segment)
            meta = self.meta(segment)
            if meta.status == SegmentStatus.DONE:
                p = name.partition_group_id
                ends[p] = max(ends.get(p, 0), int(meta.end_offset))
        return all(ends.get(p, latest[p] if latest[p] <= 1 else 0) >= latest[p] for p in latest)

    def finish(self, producer=None) -> str:
        if producer is not None:
            output, _ = producer.communicate(timeout=300)
            assert producer.returncode == 0, output.decode(errors="replace")

        def committed() -> bool:
            self.heal()  # whatever is still broken is repaired; a healthy table is untouched
            return self.all_committed()

        wait_until(committed, timeout=300, interval=1, what=f"every row of {self.table} committed")
        report = verify_rows(self.table)
        assert "PROBLEM" not in report, report
        return report

    def drop(self) -> None:
        with contextlib.suppress(Exception):
            self.manager.delete_table(self.table)
        with contextlib.suppress(Exception):
            self.admin.delete_topic(self.topic)


@pytest.fixture
def case(stack) -> Iterator[Case]:
    found = Case(stack)
    try:
        yield found
    finally:
        found.drop()


FAST = {
    "realtime.segment.flush.threshold.segment.rows": "1000",
    "realtime.segment.flush.threshold.time": "6s",
}


def _stuck_at_exit(stack: HealingCluster, case: Case, step: int = 1) -> tuple[str, str | None]:
    """Wait for the controller's fault exit after commit step `step`; the DONE segment it left
    CONSUMING and (step 2) the next segment's metadata that step 2 made, read before the guard
    lets anyone repair them; then start the controller again and wait until it leads the table.
    Other commit ends running when the process exited may have stopped after step 1: a segment
    with an orphan is the one the fault point stopped. `stack.dead_session`: the dead process's
    session, owner of its live instance znode until the session expires."""
    code = wait_until(
        lambda: stack.procs["controller"].poll(), timeout=120, interval=0.02, what="the exit"
    )
    assert code == 86  # fault injection's exit status
    found = [(stuck, case.orphan_of(stuck)) for stuck in case.stuck_after_step1()]
    ctx = context.current()
    live = ctx.client.exists(ctx.paths.liveinstance(stack.controller_id))
    stack.dead_session = live.ephemeralOwner if live is not None else None
    stack.start_controller()
    # The healer acts for a table's live lead controller only, else a run is rightly skipped,
    # and servers' calls meanwhile are answered NOT_LEADER: wait for the restarted controller's
    # own live instance (the dead one's ephemeral znode, same id, lasts until its session
    # expires) and for it to lead the table.
    wait_until(
        lambda: _live_again(stack, case.table), timeout=90, what="the restarted controller leading"
    )
    wanted = [(stuck, orphan) for stuck, orphan in found if step == 1 or orphan is not None]
    assert wanted, f"no DONE segment left CONSUMING by an exit after step {step}: {found}"
    return wanted[0]


def test_controller_stopped_after_commit_step2_is_repaired(stack, case):
    case.create(**FAST)
    stack.arm("controller.commit.after_step2")
    producer = case.produce(2_500, rate=1_000)
    stuck, orphan = _stuck_at_exit(stack, case, step=2)  # step 2 made `orphan`, step 3 not
    partition = LLCSegmentName.parse(stuck).partition_group_id

    def repaired() -> bool:
        case.heal()
        return case.consuming(partition) == [orphan] or orphan in case.ideal()

    wait_until(repaired, timeout=60, interval=0.5, what=f"{orphan} added")
    assert set(case.of_partition(partition)[stuck].values()) == {"ONLINE"}
    case.finish(producer)


def test_stopped_consumers_after_a_retention_trim_lose_only_the_dropped_offsets(stack, case):
    case.create(
        **{
            "realtime.segment.flush.threshold.segment.rows": "100000",
            "realtime.segment.flush.threshold.time": "8s",
        }
    )
    (segment,) = case.consuming(1)
    start = int(case.meta(segment).start_offset)
    case.admin.produce(case.topic, 1, [b'{"id": "x%d"}' % i for i in range(300)], now_ms=0)
    instances = sorted(case.of_partition(1)[segment])
    trim_to = start + 120
    case.admin.trim_before(case.topic, 1, trim_to)  # retention ate rows nobody committed
    for instance in instances:
        stack.arm(f"server.{instance}.{segment}.consumer_fails")

    def all_offline() -> bool:
        states = case.of_partition(1)[segment]
        return set(states.values()) == {"OFFLINE"}

    wait_until(all_offline, timeout=60, what="both replicas stopped consuming")

    def repaired() -> list[str]:
        case.heal()
        return case.consuming(1)

    (new,) = wait_until(repaired, timeout=60, interval=0.5, what="partition 1 consuming again")
    meta = case.meta(new)
    assert int(meta.start_offset) == trim_to
    assert meta.custom_map["consumption.startReason"] == "dataLoss"
    assert meta.custom_map["consumption.previousOffset"] == str(start)
    wait_until(
        lambda: "ERROR" not in case.replica_states(segment).values(),
        timeout=60,
        what="no replica left in ERROR",
    )
    report = case.finish()
    assert "dropped by the stream" in report


def test_a_deleted_consuming_segment_is_replaced_from_the_last_end_offset(stack, case):
    case.create(**FAST)
    producer = case.produce(4_000, rate=1_000)
    wait_until(
        lambda: any(LLCSegmentName.parse(s).sequence_number >= 1 for s in case.consuming(0)),
        timeout=120,
        what="partition 0 past its first commit",
    )
    (segment,) = case.consuming(0)

    def without(record):
        out = record.copy()
        out.map_fields.pop(segment, None)
        return out

    update_record(case.ctx.client, PATHS.idealstate(case.table), without)
    case.ctx.client.delete(PATHS.segment(case.table, segment))
    previous = max(case.of_partition(0), key=lambda s: LLCSegmentName.parse(s).sequence_number)

    def repaired() -> list[str]:
        case.heal()
        return case.consuming(0)

    (new,) = wait_until(repaired, timeout=60, interval=0.5, what="partition 0 consuming again")
    assert case.meta(new).start_offset == case.meta(previous).end_offset
    case.finish(producer)


def test_a_new_stream_partition_is_consumed_from_its_earliest_offset(stack, case):
    case.create(**FAST)
    producer = case.produce(2_000, rate=1_000)
    provider = RedisStreamProvider(case.redis, case.topic)
    wait_until(lambda: provider.latest_offset(0) > 1, timeout=60, what="the producer writing")
    case.admin.add_partitions(case.topic, 3)
    case.partitions = 3
    case.admin.produce(case.topic, 2, [b'{"id": "n%d"}' % i for i in range(500)], now_ms=0)

    def repaired() -> list[str]:
        case.heal()
        return case.consuming(2)

    (new,) = wait_until(repaired, timeout=60, interval=0.5, what="partition 2 consuming")
    assert LLCSegmentName.parse(new).sequence_number == 0
    case.finish(producer)
    names = case.manager.segment_names(case.table)
    assert any(LLCSegmentName.parse(s).partition_group_id == 2 for s in names)


def test_an_error_replica_is_reset_and_downloads_again(stack, case):
    case.create(**FAST)
    stack.arm("server.any.download_fails")
    producer = case.produce(4_000, rate=1_000)

    def errored() -> tuple[str, str] | None:
        found = read_record(case.ctx.client, PATHS.externalview(case.table))
        for segment, states in found.record.map_fields.items() if found else []:
            for instance, state in states.items():
                if state == "ERROR":
                    return segment, instance
        return None

    segment, instance = wait_until(errored, timeout=120, what="a replica in ERROR")

    def reset() -> bool:
        case.heal()
        return case.replica_states(segment).get(instance) == "ONLINE"

    wait_until(reset, timeout=60, interval=0.5, what=f"{segment} on {instance} ONLINE again")
    case.finish(producer)


def test_partial_offline_replicas_consume_again_behind_the_switch(stack, case):
    case.create(
        **{
            "realtime.segment.flush.threshold.segment.rows": "100000",
            "realtime.segment.flush.threshold.time": "15s",
        }
    )
    (segment,) = case.consuming(1)
    instance = sorted(case.of_partition(1)[segment])[0]
    stack.arm(f"server.{instance}.{segment}.consumer_fails")
    case.admin.produce(case.topic, 1, [b'{"id": "p%d"}' % i for i in range(200)], now_ms=0)
    wait_until(
        lambda: case.of_partition(1)[segment].get(instance) == "OFFLINE",
        timeout=60,
        what="one replica stopped consuming",
    )
    assert "partialOfflineReplicas" not in case.heal()  # the switch is off by default

    def back() -> bool:
        case.heal(partial_offline_repair=True)
        return case.replica_states(segment).get(instance) == "CONSUMING"

    wait_until(back, timeout=60, interval=0.5, what=f"{instance} consuming {segment} again")
    case.finish()


@pytest.mark.browser
def test_the_doctor_explains_a_stopped_commit_and_run_healer_now_repairs_it(
    stack, case, new_context
):
    """The controller exits right after commit step 1 (the repair case), seen in Chromium through
    the controller process's console: the partition page's doctor names the segment left
    DONE-but-CONSUMING, and the operator's "Run healer now" (a Celery run on the session's
    workers) repairs it: old replicas ONLINE, the next segment from its end offset. Screenshots:
    var/test[/slot-N]/artifacts/healing-*.png."""
    from django.contrib.auth.models import User
    from playwright.sync_api import expect

    from tables.mirror import sync
    from tests.accounts import grant

    grant(User.objects.create_user("oncall", password=PASSWORD), "operator")
    case.create(**FAST)
    stack.arm("controller.commit.after_step1")
    producer = case.produce(3_000, rate=1_000)
    stuck, _ = _stuck_at_exit(stack, case)
    partition = LLCSegmentName.parse(stuck).partition_group_id
    wait_until(lambda: _answers(stack), timeout=60, what="the restarted controller serving")
    sync.sync_cluster(context.current())  # the pages read the mirror

    url = f"http://127.0.0.1:{stack.controller_port}"
    page = new_context(base_url=url).new_page()
    page.set_default_timeout(60_000)
    page.goto("/login/")
    page.fill("input[name=username]", "oncall")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.goto(f"/ui/tables/{case.table}/partitions/{partition}/")
    diagnosis = page.locator("#doctor-region .diagnosis")
    expect(diagnosis).to_have_attribute("data-diagnosis", "commitStoppedAfterStep1")
    expect(diagnosis).to_contain_text(f"{stuck} DONE at")
    expect(diagnosis).to_contain_text("still CONSUMING in the IdealState")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "healing-doctor.png"), full_page=True)

    page.click("#doctor-heal-button")
    expect(page).to_have_url(re.compile(r"healing_run=api-[0-9a-f]{8}"))
    result = page.locator("#healing-run-result")
    expect(result).to_contain_text("controller stopped after commit step 1", timeout=120_000)
    page.screenshot(path=str(ARTIFACTS / "healing-run-result.png"), full_page=True)
    assert set(case.of_partition(partition)[stuck].values()) == {"ONLINE"}
    sequence = LLCSegmentName.parse(stuck).sequence_number + 1
    following = [
        s
        for s in case.of_partition(partition)
        if LLCSegmentName.parse(s).sequence_number == sequence
    ]
    assert len(following) == 1
    assert case.meta(following[0]).start_offset == case.meta(stuck).end_offset

    sync.sync_cluster(context.current())
    page.goto(f"/ui/tables/{case.table}/partitions/{partition}/")
    expect(diagnosis).not_to_have_attribute("data-diagnosis", "commitStoppedAfterStep1")
    page.screenshot(path=str(ARTIFACTS / "healing-doctor-after.png"), full_page=True)
    case.finish(producer)


def _live_again(stack: HealingCluster, table: str) -> bool:
    """The controller's live instance belongs to the restarted process (not the dead one's
    session, `stack.dead_session`) and it leads `table`."""
    ctx = context.current()
    stat = ctx.client.exists(ctx.paths.liveinstance(stack.controller_id))
    if stat is None or stat.ephemeralOwner == stack.dead_session:
        return False
    return table_leaders(ctx).leader(table) == stack.controller_id


def _answers(stack: HealingCluster) -> bool:
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{stack.controller_port}/login/", timeout=2
        ) as reply:
            return reply.status == 200
    except OSError:
        return False
