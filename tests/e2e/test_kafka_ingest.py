"""Pinot's own Kafka table configs, ingested end to end from a Kafka cluster (issue 19).

Every `*_realtime_table_config.json` of ../shared/fixtures/pinot with `streamType: kafka` is
created as written, only `stream.kafka.broker.list` pointed at librdkafka's mock cluster, which
runs in a process of its own (`tests.kafka_mock`): the controller, the servers, the Spark worker
and the producers connect to it as to a real cluster. One stack for the module (the mock, a
controller and two servers in the Celery workers' ZooKeeper chroot, the session's Spark worker);
every table is created and fed before the first test, so they all consume at once.

Each topic is created on the mock first (the mock has no Admin API) with `PARTITIONS` partitions,
then `manage.py produce --stream kafka` writes the folder's rows for the table when it has them
(githubEvents, dailySales), else `GENERATED_ROWS` rows generated from its schema (a field the
ingestion derives, one with a schema `transformFunction`, is left out), in two halves: each
half reaches every partition (the keys, 0, 1, ..., pick the partitions), and once the consumers
have read it, a force commit commits every table's consuming segments (the config's flush
thresholds stay as written: githubEvents also fills its 100-row segments). The halves of every
table go at once (`ingested`), so each partition has at least two DONE segments that hold rows.
Each test then checks that, and ends with `verify_ledger --rows` over its table: every produced
Kafka offset (from 0) in exactly one committed segment built by Spark (airlineStats and
dailySales through their epoch transforms, `fromEpochDays` and `toEpochDays`; meetupRsvp and
upsertMeetupRsvp through their schema's `toSphericalGeography(stPoint(group_lon,group_lat))`,
whose `location` bytes in a committed segment are checked against Pinot's serialized point). A
case fails at the first "build failed" a server logs for its table.

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
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from tables.builds import deep_store
from tables.cluster import context
from tables.cluster.errors import ServiceError
from tables.controller.force_commit import ForceCommitManager
from tables.controller.resources import ResourceManager
from tables.domain.ledger import LOST_OFFSETS_KEY
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import CUSTOM_MAP, SegmentStatus, SegmentZKMetadata
from tables.domain.znrecord import ZNRecord
from tables.models import DurableCounter, Job
from tables.segments.parquet_read import read_parquet
from tables.segments.segment_format import DATA_FILE, read_segment_files
from tables.streams.base import provider_for
from tables.streams.producer import partition_for_key, read_rows
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
HALVES = 2


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
    halves: list[Path | int] = field(default_factory=list)  # a file of rows, or a row count
    error: str | None = None  # what went wrong while its halves were ingested


def _config_on(name: str, bootstrap: str) -> dict:
    """The fixture config as written, every stream config's broker list pointed at the mock."""
    config = load(f"{name}{CONFIG_SUFFIX}")
    for stream_map in _stream_maps(config):
        stream_map[BROKER_LIST] = bootstrap
    return config


def _split(total: int) -> int:
    """Where `total` rows (keys 0, 1, ...) split into two halves that each reach every
    partition: the first such point from the middle on."""
    parts = [partition_for_key(key, PARTITIONS) for key in range(total)]
    for at in range(total // 2, total):
        if set(parts[:at]) == set(parts[at:]) == set(range(PARTITIONS)):
            return at
    raise AssertionError(f"{total} rows cannot reach every partition in two halves")


def _halves(name: str, folder: Path) -> list[Path | int]:
    """The table's rows in two halves: files of the rows as written, or generated counts."""
    if name not in ROW_FILES:
        at = _split(GENERATED_ROWS)
        return [at, GENERATED_ROWS - at]
    texts = [row.text or "" for row in read_rows(envdefaults.PINOT_FIXTURES / ROW_FILES[name])]
    at = _split(len(texts))
    halves: list[Path | int] = []
    for index, part in enumerate((texts[:at], texts[at:])):
        path = folder / f"{name}-{index}.json"
        path.write_text("\n".join(part) + "\n", encoding="utf-8")
        halves.append(path)
    return halves


def _produce(table: Table, bootstrap: str, log: Path, half: int) -> subprocess.Popen:
    args = ["produce", "--stream", "kafka", "--bootstrap", bootstrap, "--topic", table.topic]
    args += ["--partitions", str(PARTITIONS), "--rate", "0"]
    rows = table.halves[half]
    if isinstance(rows, Path):
        args += ["--file", str(rows)]
    else:
        schema = envdefaults.PINOT_FIXTURES / f"{table.name}_schema.json"
        args += ["--schema", str(schema), "--count", str(rows)]
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
    log: Path


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
            tables[name].halves = _halves(name, root)
            _create(tables[name], mock)
        log = cluster.log_dir / "kafka-ingest-producers.log"
        for table in tables.values():
            if table.refused is None:
                table.producer = _produce(table, mock.bootstrap, log, 0)
        yield KafkaStack(mock, cluster, tables, log)
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
    _consumed_then_force_commit(stack, table)
    return _wait_committed(stack, table)


def _consumed_then_force_commit(stack: KafkaStack, table: Table) -> None:
    name = table.name
    wait_until(lambda: _consumed_all(stack, table), timeout=120, what=f"{name}: rows consumed")
    ForceCommitManager(context.current()).force_commit(table.table)


def _wait_committed(stack: KafkaStack, table: Table) -> dict[int, tuple[int, int]]:
    return wait_until(
        lambda: _committed_all(stack, table),
        timeout=180,
        interval=0.5,
        what=f"{table.name}: rows committed",
    )


def _produced(stack: KafkaStack, table: Table) -> None:
    """The half's producer is done; `latest` is where each partition ends now."""
    assert table.producer is not None
    code = table.producer.wait(timeout=180)
    assert code == 0, f"producer exit {code}: {stack.cluster.log('producers')[-2000:]}"
    with provider_for(_stream_maps(table.config)[0], "") as stream:
        table.latest = {p: stream.latest_offset(p) for p in range(PARTITIONS)}


def _each(stack: KafkaStack, half: int, step: Callable[[KafkaStack, Table], object]) -> None:
    """`step` on every table still ingesting; a failure is kept for the table's own test."""
    for table in stack.tables.values():
        if table.refused is None and table.error is None:
            try:
                step(stack, table)
            except (AssertionError, TimeoutError, ServiceError, OSError) as exc:
                table.error = f"half {half + 1}: {type(exc).__name__}: {exc}"


def _second_half(stack: KafkaStack, table: Table) -> None:
    table.producer = _produce(table, stack.mock.bootstrap, stack.log, 1)


@pytest.fixture(scope="module")
def ingested(stack: KafkaStack) -> KafkaStack:
    """Every table's two halves, each consumed then force-committed, all tables at once (the
    first half's producers started with the stack)."""
    for half in range(HALVES):
        if half:
            _each(stack, half, _second_half)
        _each(stack, half, _produced)
        _each(stack, half, _consumed_then_force_commit)
        _each(stack, half, _wait_committed)
    return stack


def _done_with_rows(table: str) -> dict[int, list[tuple[str, SegmentZKMetadata]]]:
    """Per partition: the DONE segments that hold rows, with their metadata."""
    manager = ResourceManager(context.current())
    found: dict[int, list[tuple[str, SegmentZKMetadata]]] = {}
    for segment in sorted(manager.segment_names(table)):
        name = LLCSegmentName.parse(segment)
        meta = manager.segment_metadata(table, segment)
        if name is not None and meta.status is SegmentStatus.DONE and meta.total_docs:
            found.setdefault(name.partition_group_id, []).append((segment, meta))
    return found


def _derived_columns(name: str) -> list[str]:
    """The schema's columns with a transformFunction of their own (Pinot's older form)."""
    schema = load(f"{name}_schema.json")
    return [
        spec["name"]
        for kind in ("dimensionFieldSpecs", "metricFieldSpecs", "dateTimeFieldSpecs")
        for spec in schema.get(kind) or []
        if spec.get("transformFunction")
    ]


def _segment_rows(table: str, segment: str) -> list[dict]:
    """The rows of a committed segment, read from its data file in the deep store."""
    store = deep_store()
    with tempfile.TemporaryDirectory() as work:
        local = Path(work) / f"{segment}.tar.gz"
        store.download(store.segment_key(table.removesuffix("_REALTIME"), segment), local)
        data = read_segment_files(local)[DATA_FILE]
    return read_parquet(data).to_pylist()


def _geography_point(lon: float, lat: float) -> bytes:
    """Pinot's GeometrySerializer of a point with SRID 4326: type byte 0x80 (POINT | geography
    mask), then x and y as big-endian doubles (pinot-segment-local GeometrySerializer)."""
    return b"\x80" + struct.pack(">dd", lon, lat)


def _check_location(table: Table, segments: list[tuple[str, SegmentZKMetadata]]) -> None:
    segment, meta = segments[0]
    rows = _segment_rows(table.table, segment)
    assert len(rows) == meta.total_docs
    for row in rows:
        expected = _geography_point(row["group_lon"], row["group_lat"])
        assert row["location"] is not None, (segment, row)
        assert bytes(row["location"]) == expected, (segment, row)


@pytest.mark.parametrize("name", kafka_fixtures())
def test_fixture_table_ingests_from_kafka_with_an_exact_ledger(ingested: KafkaStack, name: str):
    table = ingested.tables[name]
    assert table.refused is None, f"{name} as written was refused: {table.refused}"
    assert table.error is None, table.error
    assert sum(table.latest.values()) == _rows_produced(name), table.latest

    done = _done_with_rows(table.table)
    counts = {p: len(done.get(p, [])) for p in range(PARTITIONS)}
    assert all(count >= HALVES for count in counts.values()), counts
    if name == "githubEvents":  # 100-row segments filled besides the force commits
        assert sum(counts.values()) > HALVES * PARTITIONS, counts
    if "location" in _derived_columns(name):
        for partition in range(PARTITIONS):
            _check_location(table, done[partition])
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
