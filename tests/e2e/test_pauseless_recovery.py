"""Pauseless disaster recovery end to end (issue 17; round 2 §A.6, §B.4, §C), each scenario ending
with `verify_ledger --rows` clean.

One stack for the module: a controller and two servers as processes in the Celery workers'
ZooKeeper chroot (the session's Celery and Spark workers build and re-ingest), fault injection on
in every process (`FAULTS`, the workers' FAULT_INJECTION_DIR, see tests/procs.py). Each scenario
has its own one-partition table (replication 2, pauseless, peer download scheme http, a segment
every `SEGMENT_ROWS` rows, replicas waiting `DOWNLOAD_TIMEOUT_S` for a download URL) and topic,
fed by `manage.py produce`, dropped afterwards. Healing runs come from the test
(`RealtimeSegmentValidationManager.run_table`, as the Celery task runs it, with
`controller.segment.error.autoReset` on); runs the workers start on their own may repair too, so
what is asserted is what ZooKeeper, the jobs and the reports show.
- The first segment's Spark build fails on the committer (`spark.<segment>.build_fails`): no
  server has it, both replicas time out waiting for its download URL (ERROR), the healer has a
  live replica re-ingest it, it becomes DONE and its replicas ONLINE. Its CRC is compared with a
  control: the same rows, read back from the stream at the segment's offsets, built through the
  normal build path (`tables.spark_build_segment` from a staging file, as a committer builds).
- A partial-upsert pauseless table in disasterRecoveryMode DEFAULT with its segment ERROR on
  every replica, as above: the healer reports it unrecoverable (the report and the mirror's
  `pauselessSegmentsInUnrecoverableErrorCount`) and leaves it alone; switched to ALWAYS, the next
  run re-ingests it.
- The controller exits right after step 1 of a pauseless commit start (fault
  `controller.commit.after_step1`): the segment is COMMITTING, still CONSUMING in the IdealState,
  with no next segment. After a restart the healer, once the guard (3 s here) has passed, puts it
  ONLINE and starts the next segment at its end offset (Pinot's case 1 with `statusPostStep1`
  COMMITTING); the unbuilt segment's replicas time out (ERROR) and it is re-ingested; ingestion
  goes on.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from prometheus_client import generate_latest

from monitoring.controller_metrics import controller_registry
from tables.builds import deep_store
from tables.cluster import context
from tables.controller.healing import HealingReport, HealingSettings
from tables.controller.healing import RealtimeSegmentValidationManager as Healer
from tables.controller.resources import ResourceManager
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentStatus
from tables.mirror import sync
from tables.models import Job
from tables.redisconn import get_redis
from tables.segments.staging import write_staging
from tables.streams.redis_streams import RedisStreamProvider, RedisTopicAdmin
from tables.zk.client import close_all, new_client
from tables.zk.records import update_record
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
GUARD_KEY = "max.segment.completion.time.millis"
FAULTS = Path(envdefaults.VAR_DIR) / "faults"  # the Celery workers' FAULT_INJECTION_DIR
SEGMENT_ROWS = 200
DOWNLOAD_TIMEOUT_S = 4
SPARK_TIMEOUT = 300


class RecoveryCluster(IngestCluster):
    def _env(self) -> dict[str, str]:
        return {**super()._env(), "FAULT_INJECTION_DIR": str(FAULTS)}


def _clear_faults() -> None:
    for armed in FAULTS.glob("*"):
        armed.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def stack(celery_workers, tmp_path_factory) -> Iterator[RecoveryCluster]:
    FAULTS.mkdir(parents=True, exist_ok=True)
    _clear_faults()
    root = tmp_path_factory.mktemp("pauseless-recovery")
    cluster = RecoveryCluster(celery_workers.zk_hosts, root / "servers", "pauseless-recovery")
    saved = django_settings.ZK_HOSTS
    django_settings.ZK_HOSTS = celery_workers.zk_hosts
    zk = new_client(celery_workers.zk_hosts)
    cluster.start_controller()
    for index in range(2):
        cluster.start_server(index)
    wanted = {cluster.controller_id, cluster.server_id(0), cluster.server_id(1)}

    def live() -> bool:
        found = zk.get_children(PATHS.liveinstances) if zk.exists(PATHS.liveinstances) else []
        return wanted <= set(found)

    try:
        wait_until(live, timeout=90, what="controller and 2 servers live")
        yield cluster
    finally:
        cluster.stop()
        _clear_faults()
        for child in zk.get_children("/"):
            zk.delete(f"/{child}", recursive=True)
        zk.stop()
        zk.close()
        close_all()
        django_settings.ZK_HOSTS = saved


class Table:
    """One scenario's one-partition pauseless table, its topic and its reads."""

    def __init__(self) -> None:
        self.name = f"pl{uuid.uuid4().hex[:6]}"
        self.table = f"{self.name}_REALTIME"
        self.topic = f"topic-{uuid.uuid4().hex[:10]}"
        self.redis = get_redis(django_settings.REDIS_URL)
        self.admin = RedisTopicAdmin(self.redis)
        self.admin.create_topic(self.topic, 1)
        self.manager = ResourceManager(context.current())

    def config(self, mode: str | None = None, **extra: object) -> dict:
        """The table's config; `mode`: its disasterRecoveryMode; `extra`: top-level sections."""
        rest = table_config(
            self.topic,
            **{
                "realtime.segment.flush.threshold.segment.rows": str(SEGMENT_ROWS),
                "realtime.segment.flush.threshold.time": "1h",
                "realtime.segment.pauseless.download.timeoutSeconds": str(DOWNLOAD_TIMEOUT_S),
            },
        )
        rest["tableName"] = self.name
        rest["segmentsConfig"]["schemaName"] = self.name
        rest["segmentsConfig"]["peerSegmentDownloadScheme"] = "http"
        stream = rest["ingestionConfig"]["streamIngestionConfig"]
        stream["pauselessConsumptionEnabled"] = True
        if mode is not None:
            stream["disasterRecoveryMode"] = mode
        rest.update(extra)
        if "upsertConfig" in extra or "dedupConfig" in extra:  # Pinot's rule for such tables
            rest["routing"] = {"instanceSelectorType": "strictReplicaGroup"}
        return rest

    def create(self, schema_extra: dict | None = None, **config: object) -> str:
        """Create the table (`config`: `mode` and sections); returns its first consuming segment."""
        schema = {**load("githubEvents_schema.json"), **(schema_extra or {})}
        schema["schemaName"] = self.name
        self.manager.add_schema(schema)
        self.manager.add_table(self.config(**config))
        (segment,) = self.ideal()
        return segment

    def produce(self, count: int) -> None:
        """`count` generated rows through `manage.py produce`, as its own process."""
        schema = envdefaults.PINOT_FIXTURES / "githubEvents_schema.json"
        args = ["produce", "--topic", self.topic, "--partitions", "1", "--rate", "0"]
        args += ["--schema", str(schema), "--count", str(count)]
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=envdefaults.ROOT,
            capture_output=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout.decode(errors="replace")

    def heal(self) -> HealingReport:
        healer = Healer(
            context.current(), HealingSettings(error_auto_reset=True), deep_store=deep_store
        )
        report = healer.run_table(self.table, run_id=uuid.uuid4().hex[:8], trigger="test")
        assert report.error is None, report.error
        return report

    def heal_until(self, done: Callable[[], object], what: str, timeout: float = 180) -> object:
        def healed() -> object:
            self.heal()
            return done()

        return wait_until(healed, timeout=timeout, interval=1, what=what)

    def ideal(self) -> dict[str, dict[str, str]]:
        return self.manager.idealstate(self.table)

    def replicas(self, segment: str) -> list[str]:
        return sorted(self.manager.externalview(self.table).get(segment, {}).values())

    def meta(self, segment: str):
        return self.manager.segment_metadata(self.table, segment)

    def all_error(self, segment: str) -> bool:
        return self.replicas(segment) == ["ERROR", "ERROR"]

    def online(self, segment: str) -> bool:
        return self.replicas(segment) == ["ONLINE", "ONLINE"]

    def done(self, segment: str) -> bool:
        return self.meta(segment).status is SegmentStatus.DONE

    def finish(self) -> None:
        """Heal until every produced row is in a DONE segment, then the ledger must be exact."""
        latest = RedisStreamProvider(self.redis, self.topic).latest_offset(0)

        def committed() -> bool:
            ends = [
                int(self.meta(s).end_offset)
                for s in self.manager.segment_names(self.table)
                if self.done(s)
            ]
            return max(ends, default=0) == latest

        self.heal_until(committed, f"every row of {self.table} committed")
        report = verify_rows(self.table)
        assert "PROBLEM" not in report, report

    def drop(self) -> None:
        with contextlib.suppress(Exception):
            self.manager.delete_table(self.table)
        with contextlib.suppress(Exception):
            self.admin.delete_topic(self.topic)


@pytest.fixture
def table(stack) -> Iterator[Table]:
    found = Table()
    try:
        yield found
    finally:
        found.drop()
        _clear_faults()


def _build_fails(table: Table, segment: str) -> None:
    """Arm the build fault of `segment`, produce its rows, wait for both replicas in ERROR."""
    point = FAULTS / f"spark.{segment}.build_fails"
    point.touch()
    table.produce(SEGMENT_ROWS)
    wait_until(lambda: not point.exists(), timeout=120, what="the committer's build to fail")
    wait_until(lambda: table.all_error(segment), timeout=60, what=f"{segment} ERROR x2")
    assert table.meta(segment).status is SegmentStatus.COMMITTING
    failed = Job.objects.get(kind=Job.Kind.BUILD, segment=segment)
    assert failed.status == Job.Status.FAILED and "fault injection" in failed.error


def _recovered(table: Table, segment: str) -> None:
    """The healer re-ingests `segment`: DONE by a re-ingestion job, replicas ONLINE."""
    table.heal_until(lambda: table.done(segment), f"{segment} re-ingested")
    wait_until(lambda: table.online(segment), timeout=60, what=f"{segment} ONLINE x2")
    job = Job.objects.get(kind=Job.Kind.REINGEST, segment=segment)
    assert job.status == Job.Status.SUCCEEDED and job.rows == table.meta(segment).total_docs


def _normal_build_crc(table: Table, segment: str, start: int, end: int, tmp_path: Path) -> int:
    """The CRC of a committer's build of the rows at `[start, end)` of the stream."""
    from tables.tasks import spark_build_segment  # imports pyspark

    provider = RedisStreamProvider(table.redis, table.topic)
    batch = provider.fetch(0, start, end - start, 0)
    assert [m.offset for m in batch.messages] == list(range(start, end))
    local = tmp_path / "rows.parquet"
    write_staging(((m.offset, m.value) for m in batch.messages), local)
    store = deep_store()
    staging = store.staging_key(table.name, f"{segment}.control")
    output = f"{table.name}/{segment}.tmp.control"
    store.publish(local, staging)
    try:
        outcome = spark_build_segment.delay(table.table, segment, staging, start, end, output).get(
            SPARK_TIMEOUT
        )
    finally:
        store.delete(staging)
        store.delete(output)
    assert outcome["rows"] == end - start
    return int(outcome["crc"])


def test_a_segment_whose_build_failed_everywhere_is_reingested(table, tmp_path):
    """The CRC control: the segment's rows read back from the stream, built as a committer's."""
    segment = table.create()
    _build_fails(table, segment)

    _recovered(table, segment)
    meta = table.meta(segment)
    assert meta.total_docs == SEGMENT_ROWS and meta.download_url
    start, end = int(meta.start_offset), int(meta.end_offset)
    assert int(meta.crc) == _normal_build_crc(table, segment, start, end, tmp_path)
    table.finish()


def _unrecoverable_count(raw: str) -> float | None:
    sync.sync_cluster(context.current())
    text = generate_latest(controller_registry()).decode()
    pattern = (
        r'^pinot_controller_pauselessSegmentsInUnrecoverableErrorCount_Value\{table="'
        + re.escape(raw)
        + r'",tableType="REALTIME"\} (\S+)$'
    )
    found = re.search(pattern, text, re.MULTILINE)
    return None if found is None else float(found.group(1))


def test_partial_upsert_in_default_mode_is_left_alone_until_always(table):
    upsert = {"mode": "PARTIAL", "defaultPartialUpsertStrategy": "OVERWRITE"}
    segment = table.create({"primaryKeyColumns": ["id"]}, mode="DEFAULT", upsertConfig=upsert)
    _build_fails(table, segment)

    report = table.heal()
    assert any(segment in w and "unrecoverable" in w for w in report.waiting), report
    assert not [a for a in report.actions if a.segment == segment], report.actions
    assert _unrecoverable_count(table.name) == 1
    assert table.meta(segment).status is SegmentStatus.COMMITTING and table.all_error(segment)
    assert not Job.objects.filter(kind=Job.Kind.REINGEST, segment=segment).exists()

    table.manager.update_table(table.table, table.config("ALWAYS", upsertConfig=upsert))
    _recovered(table, segment)
    assert _unrecoverable_count(table.name) == 0
    table.finish()


def _consuming(table: Table) -> list[str]:
    return sorted(s for s, st in table.ideal().items() if "CONSUMING" in st.values())


@pytest.fixture
def short_guard(stack) -> Iterator[Callable[[str | None], None]]:
    zk = context.current().client

    def guard(value: str | None):
        def change(record):
            out = record.copy()
            if value is None:
                out.simple_fields.pop(GUARD_KEY, None)
            else:
                out.simple_fields[GUARD_KEY] = value
            return out

        update_record(zk, PATHS.cluster_config, change)

    guard("3000")
    try:
        yield guard
    finally:
        guard(None)
        if not stack.alive("controller"):  # the scenario failed before its restart
            stack.start_controller()


def test_a_controller_dead_after_commit_start_is_repaired_after_the_guard(
    stack, table, short_guard
):
    segment = table.create()
    (FAULTS / "controller.commit.after_step1").touch()
    table.produce(SEGMENT_ROWS)
    code = wait_until(
        lambda: stack.procs["controller"].poll(), timeout=120, interval=0.05, what="the exit"
    )
    assert code == 86  # fault injection's exit status
    assert table.meta(segment).status is SegmentStatus.COMMITTING
    assert _consuming(table) == [segment]  # step 3 never ran: no next segment
    stack.start_controller()

    def repaired() -> str | None:
        following = [s for s in _consuming(table) if s != segment]
        return following[0] if following and segment not in _consuming(table) else None

    following = table.heal_until(repaired, f"{segment}'s partition repaired", timeout=90)
    short_guard(None)  # the pauseless commit end honours the guard too: back to the default
    assert LLCSegmentName.parse(following).sequence_number == 1
    assert table.meta(following).start_offset == table.meta(segment).end_offset
    assert set(table.ideal()[segment].values()) == {"ONLINE"}

    table.heal_until(lambda: table.done(segment), f"{segment} DONE")
    wait_until(lambda: table.online(segment), timeout=60, what=f"{segment} ONLINE x2")
    table.produce(SEGMENT_ROWS)  # ingestion goes on: the next segment commits normally
    table.finish()
    assert table.done(following)
