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
from tables.domain.names import LLCSegmentName
from tables.streams.base import provider_for
from tables.zk.client import close_all, new_client
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


@dataclass
class KafkaStack:
    mock: KafkaMock
    cluster: IngestCluster
    tables: dict[str, Table]


@pytest.fixture(scope="module")
def stack(celery_workers, django_db_setup, tmp_path_factory) -> Iterator[KafkaStack]:
    root = tmp_path_factory.mktemp("kafka-ingest")
    mock = start_mock(brokers=3)
    cluster = IngestCluster(celery_workers.zk_hosts, root / "servers", "kafka-ingest")
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
            tables[name] = Table(name, config, _stream_maps(config)[0]["stream.kafka.topic.name"])
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
    if len(wanted) != PARTITIONS:
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
    done = all(coverage.get(p, (0, 0))[1] == table.latest[p] for p in range(PARTITIONS))
    return coverage if done else None


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

    wait_until(lambda: _consumed_all(stack, table), timeout=120, what=f"{name}: rows consumed")
    ForceCommitManager(context.current()).force_commit(table.table)
    coverage = wait_until(
        lambda: _committed_all(stack, table),
        timeout=180,
        interval=0.5,
        what=f"{name}: rows committed",
    )
    if name == "githubEvents":  # 100-row segments filled before the force commit
        assert sum(count for count, _ in coverage.values()) > PARTITIONS, coverage
    report = verify_rows(table.table)
    assert "PROBLEM" not in report, report
    rows = sum(table.latest.values())
    assert f"{rows} rows checked" in report, report
