"""Pinot's own Kafka table configs, ingested end to end from a Kafka cluster (issue 19).

Every `*_realtime_table_config.json` of ../shared/fixtures/pinot with `streamType: kafka` is
created as written, only `stream.kafka.broker.list` pointed at librdkafka's mock cluster, which
runs in a process of its own (`tests.kafka_mock`): the controller, the servers, the Spark worker
and the producers connect to it as to a real cluster. One stack for the module (the mock, a
controller and two servers in the Celery workers' ZooKeeper chroot, the session's Spark worker);
every table is created and fed before the first test, so they all consume at once.

Each topic is created on the mock first (the mock has no Admin API) with `PARTITIONS` partitions,
then `manage.py produce --stream kafka` writes the folder's rows for the table when it has them
(githubEvents, dailySales), else `GENERATED_ROWS` rows generated from its schema. Segments commit
through the completion protocol: githubEvents fills its 100-row segments, and a force commit
commits every table's consuming segments once their consumers have read every row. Each test
ends with `verify_ledger --rows` over its table: every produced Kafka offset (from 0) in exactly
one committed segment built by Spark (airlineStats and dailySales through their epoch
transforms, `fromEpochDays` and `toEpochDays`). A case fails at the first "build failed" a server
logs for its table.

Then, on the same stack: a committed githubEvents segment re-ingested by the spark worker
(`tables.spark_reingest_segment`, reading its offset range with the Kafka plugin) has the CRC its
build from staging wrote to ZooKeeper; and a table whose consumers are held (fault point
`server.<instanceId>.consumer_holds`, armed before the table exists, so librdkafka prefetched
nothing) sees its partition trimmed past its start offset by the mock's delete-records: the
consumer finds offsets 0..39 gone, logs them, declares `0-40` at commit end, the controller counts
`llcStreamDataLoss` once, and `verify_ledger --rows` excuses exactly those offsets.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from tables.cluster import context
from tables.cluster.errors import ServiceError
from tables.controller.force_commit import ForceCommitManager
from tables.controller.resources import ResourceManager
from tables.domain.ledger import LOST_OFFSETS_KEY
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import CUSTOM_MAP, SegmentStatus, SegmentZKMetadata
from tables.domain.znrecord import ZNRecord
from tables.models import DurableCounter, Job
from tables.streams.base import provider_for
from tables.tasks import spark_reingest_segment
from tables.zk.client import close_all, new_client
from tables.zk.records import update_record
from tests import envdefaults
from tests.cluster_fixtures import PATHS, load
from tests.ingest_cluster import IngestCluster, done_coverage, replicas_by_server, verify_rows
from tests.kafka_mock import KafkaMock, start_mock
from tests.poll import wait_until

pytestmark = [
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.celery,
    pytest.mark.spark,
    pytest.mark.kafka,
    pytest.mark.django_db(transaction=True),
]
PARTITIONS = 2
SERVERS = 2
GENERATED_ROWS = 300
ROW_FILES = {
    "githubEvents": "githubEvents_2021-07-21-few-hours.json",
    "dailySales": "dailySales.json",
}
CONFIG_SUFFIX = "_realtime_table_config.json"
BROKER_LIST = "stream.kafka.broker.list"
TOPIC_NAME = "stream.kafka.topic.name"
LOSS_TABLE = "githubEventsLoss"
LOSS_ROWS = 120
TRIM_TO = 40  # offsets 0..39 are gone before the held consumer reads anything
TASK_TIMEOUT = 240


def _stream_maps(config: dict) -> list[dict]:
    return config.get("ingestionConfig", {}).get("streamIngestionConfig", {}).get(
        "streamConfigMaps", []
    ) or [config.get("tableIndexConfig", {}).get("streamConfigs", {})]


def kafka_fixtures() -> list[str]:
    """The fixture tables whose (first) stream config is `streamType: kafka`."""
    names = []
    for path in sorted(envdefaults.PINOT_FIXTURES.glob(f"*{CONFIG_SUFFIX}")):
        maps = _stream_maps(json.loads(path.read_text()))
        if maps and maps[0].get("streamType") == "kafka":
            names.append(path.name.removesuffix(CONFIG_SUFFIX))
    return names


@dataclass
class Table:
    """One fixture table of the stack: its config as created, and how its creation went."""

    name: str
    config: dict
    topic: str
    table: str = ""
    refused: str | None = None
    producer: subprocess.Popen | None = None
    latest: dict[int, int] = field(default_factory=dict)


def _config_on(name: str, bootstrap: str) -> dict:
    """The fixture config as written, every stream config's broker list pointed at the mock."""
    config = load(f"{name}{CONFIG_SUFFIX}")
    for stream_map in _stream_maps(config):
        stream_map[BROKER_LIST] = bootstrap
    return config


def _produce(table: Table, bootstrap: str, log: Path) -> subprocess.Popen:
    args = ["produce", "--stream", "kafka", "--bootstrap", bootstrap, "--topic", table.topic]
    args += ["--partitions", str(PARTITIONS), "--rate", "0"]
    if table.name in ROW_FILES:
        args += ["--file", str(envdefaults.PINOT_FIXTURES / ROW_FILES[table.name])]
    else:
        schema = envdefaults.PINOT_FIXTURES / f"{table.name}_schema.json"
        args += ["--schema", str(schema), "--count", str(GENERATED_ROWS)]
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "manage.py", *args],
            cwd=envdefaults.ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _create(table: Table, mock: KafkaMock) -> None:
    """Topic on the mock, schema and table; a refusal is recorded for the table's test."""
    mock.create_topic(table.topic, PARTITIONS)
    manager = ResourceManager(context.current())
    manager.add_schema(load(f"{table.name}_schema.json"))
    try:
        table.table = manager.add_table(table.config).table_name_with_type
    except ServiceError as exc:
        table.refused = exc.message


class KafkaCluster(IngestCluster):
    """The servers and the controller with fault injection on (`faults`)."""

    def __init__(self, zk_hosts: str, data_dir: Path, faults: Path) -> None:
        super().__init__(zk_hosts, data_dir, "kafka-ingest")
        self.faults = faults

    def _env(self) -> dict[str, str]:
        return {**super()._env(), "FAULT_INJECTION_DIR": str(self.faults)}


@dataclass
class KafkaStack:
    mock: KafkaMock
    cluster: KafkaCluster
    tables: dict[str, Table]


@pytest.fixture(scope="module")
def stack(celery_workers, django_db_setup, tmp_path_factory) -> Iterator[KafkaStack]:
    root = tmp_path_factory.mktemp("kafka-ingest")
    (root / "faults").mkdir()
    mock = start_mock(brokers=3)
    cluster = KafkaCluster(celery_workers.zk_hosts, root / "servers", root / "faults")
    for old in cluster.log_dir.glob("kafka-ingest-*.log"):
        old.unlink()
    saved = django_settings.ZK_HOSTS
    django_settings.ZK_HOSTS = celery_workers.zk_hosts
    close_all()
    zk = new_client(celery_workers.zk_hosts)
    tables: dict[str, Table] = {}
    try:
        cluster.start_controller()
        for index in range(SERVERS):
            cluster.start_server(index)
        wanted = {cluster.controller_id, *(cluster.server_id(i) for i in range(SERVERS))}
        wait_until(
            lambda: (
                zk.exists(PATHS.liveinstances)
                and wanted <= set(zk.get_children(PATHS.liveinstances))
            ),
            timeout=90,
            what="controller and servers live",
        )
        for name in kafka_fixtures():
            config = _config_on(name, mock.bootstrap)
            tables[name] = Table(name, config, _stream_maps(config)[0][TOPIC_NAME])
            _create(tables[name], mock)
        log = cluster.log_dir / "kafka-ingest-producers.log"
        for table in tables.values():
            if table.refused is None:
                table.producer = _produce(table, mock.bootstrap, log)
        yield KafkaStack(mock, cluster, tables)
    finally:
        for table in tables.values():
            if table.producer is not None and table.producer.poll() is None:
                table.producer.kill()
                table.producer.wait()
        codes = cluster.stop()
        mock.stop()
        for child in zk.get_children("/"):
            zk.delete(f"/{child}", recursive=True)
        zk.stop()
        zk.close()
        close_all()
        django_settings.ZK_HOSTS = saved
        assert all(code == 0 for code in codes.values()), codes


def _consumed_all(stack: KafkaStack, table: Table) -> bool:
    """Every partition's CONSUMING segment (IdealState) has read to the partition's latest."""
    ideal = ResourceManager(context.current()).idealstate(table.table)
    wanted = {
        segment: table.latest[LLCSegmentName.parse(segment).partition_group_id]
        for segment, replicas in ideal.items()
        if "CONSUMING" in replicas.values()
    }
    if len(wanted) != len(table.latest):
        return False
    seen = {
        item["segmentName"]: item
        for items in replicas_by_server(stack.cluster, table.table, SERVERS).values()
        for item in items
        if item.get("phase") == "CONSUMING"
    }
    return all(
        segment in seen and seen[segment].get("nextOffset") == str(latest)
        for segment, latest in wanted.items()
    )


def _rows_produced(name: str) -> int:
    if name not in ROW_FILES:
        return GENERATED_ROWS
    text = (envdefaults.PINOT_FIXTURES / ROW_FILES[name]).read_text()
    return sum(1 for line in text.splitlines() if line.strip())


def _build_failure(stack: KafkaStack, table: Table) -> str | None:
    """The first "build failed" line a server logged for one of the table's segments."""
    for index in range(SERVERS):
        for line in stack.cluster.log(f"server{index}").splitlines():
            if f" {table.name}__" in line and ": build failed: " in line:
                return line
    return None


def _committed_all(stack: KafkaStack, table: Table) -> dict[int, tuple[int, int]] | None:
    """The DONE coverage once every row is committed; a build failure fails at once."""
    failure = _build_failure(stack, table)
    assert failure is None, failure
    coverage = done_coverage(table.table)
    done = all(coverage.get(p, (0, 0))[1] == latest for p, latest in table.latest.items())
    return coverage if done else None


def _commit_everything(stack: KafkaStack, table: Table) -> dict[int, tuple[int, int]]:
    """Once every row is consumed, a force commit; returns the DONE coverage up to `latest`."""
    name = table.name
    wait_until(lambda: _consumed_all(stack, table), timeout=120, what=f"{name}: rows consumed")
    ForceCommitManager(context.current()).force_commit(table.table)
    return wait_until(
        lambda: _committed_all(stack, table),
        timeout=180,
        interval=0.5,
        what=f"{name}: rows committed",
    )


@pytest.mark.parametrize("name", kafka_fixtures())
def test_fixture_table_ingests_from_kafka_with_an_exact_ledger(stack: KafkaStack, name: str):
    table = stack.tables[name]
    assert table.refused is None, f"{name} as written was refused: {table.refused}"
    assert table.producer is not None
    code = table.producer.wait(timeout=180)
    assert code == 0, stack.cluster.log("producers")
    with provider_for(_stream_maps(table.config)[0], "") as stream:
        table.latest = {p: stream.latest_offset(p) for p in range(PARTITIONS)}
    assert sum(table.latest.values()) == _rows_produced(name), table.latest

    coverage = _commit_everything(stack, table)
    if name == "githubEvents":  # 100-row segments filled before the force commit
        assert sum(count for count, _ in coverage.values()) > PARTITIONS, coverage
    report = verify_rows(table.table)
    assert "PROBLEM" not in report, report
    rows = sum(table.latest.values())
    assert f"{rows} rows checked" in report, report


def _done_segment(table: str) -> tuple[str, SegmentZKMetadata] | None:
    """A DONE segment of `table` that holds rows (the lowest name), with its metadata."""
    manager = ResourceManager(context.current())
    for segment in sorted(manager.segment_names(table)):
        meta = manager.segment_metadata(table, segment)
        if meta.status is SegmentStatus.DONE and meta.total_docs:
            return segment, meta
    return None


def test_a_reingested_kafka_segment_has_the_crc_of_its_original_build(stack: KafkaStack):
    table = stack.tables["githubEvents"]
    assert table.refused is None, table.refused
    segment, meta = wait_until(
        lambda: _done_segment(table.table), timeout=180, what="a committed githubEvents segment"
    )
    # The build's Job row is gone (each test empties the database): ZooKeeper keeps its CRC.
    assert meta.crc is not None, meta
    start, end = int(meta.start_offset or 0), int(meta.end_offset or 0)
    task = spark_reingest_segment.delay(table.table, segment, start, end)
    outcome = task.get(TASK_TIMEOUT)
    assert (outcome["rows"], outcome["crc"]) == (meta.total_docs, meta.crc), (outcome, meta)
    job = Job.objects.get(pk=outcome["job_id"])
    assert (job.kind, job.status, job.details["crc"]) == (
        Job.Kind.REINGEST,
        Job.Status.SUCCEEDED,
        meta.crc,
    )


def _loss_table(stack: KafkaStack) -> Table:
    """githubEvents as written on its own one-partition topic, renamed (schema and table)."""
    config = _config_on("githubEvents", stack.mock.bootstrap)
    config["tableName"] = LOSS_TABLE
    _stream_maps(config)[0][TOPIC_NAME] = LOSS_TABLE
    schema = load("githubEvents_schema.json")
    schema["schemaName"] = LOSS_TABLE
    stack.mock.create_topic(LOSS_TABLE, 1)
    manager = ResourceManager(context.current())
    manager.add_schema(schema)
    name = manager.add_table(config).table_name_with_type
    return Table(LOSS_TABLE, config, LOSS_TABLE, table=name, latest={0: LOSS_ROWS})


def _server_logs(stack: KafkaStack) -> str:
    return "\n".join(stack.cluster.log(f"server{index}") for index in range(SERVERS))


def test_offsets_trimmed_below_a_held_consumer_are_declared_counted_and_excused(
    stack: KafkaStack,
):
    """The consumer is held from before it starts (nothing prefetched), the partition is
    trimmed past its start offset, then it is let go: it finds offsets 0..TRIM_TO-1 gone."""
    holds = [
        stack.cluster.faults / f"server.{stack.cluster.server_id(i)}.consumer_holds"
        for i in range(SERVERS)
    ]
    rows = [
        line.encode()
        for line in (envdefaults.PINOT_FIXTURES / ROW_FILES["githubEvents"])
        .read_text()
        .splitlines()
        if line.strip()
    ][:LOSS_ROWS]
    for hold in holds:
        hold.touch()
    try:
        table = _loss_table(stack)
        (segment,) = ResourceManager(context.current()).idealstate(table.table)
        assert (
            ResourceManager(context.current()).segment_metadata(table.table, segment).start_offset
            == "0"
        )
        admin = stack.mock.admin()
        try:
            assert admin.produce(LOSS_TABLE, 0, rows, now_ms=0) == list(range(LOSS_ROWS))
            assert admin.trim_before(LOSS_TABLE, 0, TRIM_TO) == TRIM_TO
        finally:
            admin.close()
    finally:
        for hold in holds:
            hold.unlink(missing_ok=True)

    _commit_everything(stack, table)
    meta = ResourceManager(context.current()).segment_metadata(table.table, segment)
    assert (meta.status, meta.start_offset, meta.end_offset) == (
        SegmentStatus.DONE,
        "0",
        str(LOSS_ROWS),
    )
    assert meta.total_docs == LOSS_ROWS - TRIM_TO
    assert meta.custom_map.get(LOST_OFFSETS_KEY) == f"0-{TRIM_TO}", meta.custom_map
    reported = f"{segment}: offsets 0..{TRIM_TO - 1} were gone from the stream (data loss)"
    assert _server_logs(stack).count(reported) == 1, reported
    wait_until(
        lambda: DurableCounter.value_of("llcStreamDataLoss", LOSS_TABLE) == 1,
        timeout=30,
        what="llcStreamDataLoss counted once",
    )
    report = verify_rows(table.table)
    assert "PROBLEM" not in report, report
    assert f"{LOSS_ROWS - TRIM_TO} rows checked" in report, report
    excused = (
        f"partition 0: offsets [0, {TRIM_TO}) were gone from the stream when the segment was "
        "consumed (declared data loss): excused"
    )
    assert excused in report, report
    assert report.count("excused") == 1, report  # nothing else is excused
    assert "not verified" not in report, report

    # Without the declaration the ledger cannot tell the lost offsets from markers: it says so.
    _set_custom_map(table.table, segment, None)
    try:
        undeclared = verify_rows(table.table)
    finally:
        _set_custom_map(table.table, segment, meta.custom_map)
    assert "excused" not in undeclared, undeclared
    unverified = f"holds no row at offsets [0, {TRIM_TO}), which the stream no longer holds"
    assert undeclared.count(unverified) == 1, undeclared


def _set_custom_map(table: str, segment: str, custom: dict[str, str] | None) -> None:
    def with_map(record: ZNRecord) -> ZNRecord:
        out = record.copy()
        out.map_fields.pop(CUSTOM_MAP, None)
        if custom:
            out.map_fields[CUSTOM_MAP] = dict(custom)
        return out

    update_record(context.current().client, PATHS.segment(table, segment), with_map)
