"""Re-ingesting Kafka segments (`build_from_stream` with the Kafka plugin's `RangeSource`) against
librdkafka's mock cluster and a real SparkSession: the same CRC as the build from staging, data
loss below the low watermark with its exact range, transaction markers that are not loss."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from tables.segments import builder
from tables.segments.builder import (
    BuildError,
    BuildRequest,
    DataLoss,
    build_from_staging,
    build_from_stream,
    write_staging,
)
from tables.streams import range_source_for
from tables.streams.kafka_range import KafkaRangeSource
from tests.cluster_fixtures import github_rows, load

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

CREATED_MS = 1626847260123
SCHEMA = load("githubEvents_schema.json")
CONFIG = load("githubEvents_realtime_table_config.json")
LINES = github_rows()


def request(start: int, end: int, partition: int = 1) -> BuildRequest:
    name = f"githubEvents__{partition}__0__20210721T0600Z"
    return BuildRequest("githubEvents", name, SCHEMA, CONFIG, start, end, CREATED_MS)


def staged_build(spark, pairs, start, end, work, partition=1):
    """The segment as the committing server builds it: from the rows it staged."""
    staged = work / "staged.parquet"
    write_staging(pairs, staged)
    return build_from_staging(spark, request(start, end, partition), str(staged), work / "built")


@pytest.fixture
def topic() -> str:
    return f"re-{uuid.uuid4().hex[:10]}"


def test_a_reingested_kafka_segment_equals_its_original_build(
    spark, kafka_admin, topic, tmp_path, monkeypatch
):
    kafka_admin.create_topic(topic, 2)
    offsets = kafka_admin.produce(topic, 1, LINES, now_ms=CREATED_MS)
    assert offsets == list(range(800))
    kafka_admin.produce(topic, 0, LINES[:5], now_ms=CREATED_MS)  # another partition
    original = staged_build(spark, zip(offsets, LINES, strict=True), 0, 800, tmp_path / "orig")
    stream = kafka_admin.stream_config(topic)
    monkeypatch.setattr(builder, "_STREAM_CHUNK", 300)  # three Spark tasks, one consumer each

    again = build_from_stream(spark, request(0, 800), stream, 1, tmp_path / "re")
    assert again.total_docs == 800 and again.crc == original.crc
    assert again.tar_path.read_bytes() == original.tar_path.read_bytes()

    with pytest.raises(BuildError, match=r"holds offsets up to 799; .* not all produced yet"):
        build_from_stream(spark, request(0, 801), stream, 1, tmp_path / "late")


def test_a_start_below_the_low_watermark_is_data_loss_with_its_range(
    spark, kafka_admin, topic, tmp_path
):
    kafka_admin.create_topic(topic, 2)
    kafka_admin.produce(topic, 1, LINES[:300], now_ms=CREATED_MS)
    assert kafka_admin.trim_before(topic, 1, 100) == 100
    stream = kafka_admin.stream_config(topic)

    with pytest.raises(DataLoss) as lost:
        build_from_stream(spark, request(0, 300), stream, 1, tmp_path / "lost")
    assert str(lost.value) == (
        f"topic {topic!r} partition 1 no longer holds offset 0: the first available offset is "
        "100 (100 offsets of [0, 300) were trimmed)"
    )
    assert (lost.value.first_available_offset, lost.value.missing) == (100, 100)

    kept = build_from_stream(
        spark, request(0, 300), stream, 1, tmp_path / "kept", allow_data_loss=True
    )
    assert kept.total_docs == 200 and (kept.min_offset, kept.max_offset) == (100, 299)


class _StaleEarliest:
    """The real provider, but its earliest offset read before a trim: the driver's check passes
    and the Spark tasks meet the trim, as when retention overtakes a running re-ingestion."""

    def __init__(self, provider, earliest: int) -> None:
        self.provider, self.earliest = provider, earliest
        self.topic = provider.topic

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.provider.close()

    def earliest_offset(self, partition: int) -> int:
        return self.earliest

    def latest_offset(self, partition: int) -> int:
        return self.provider.latest_offset(partition)


def test_offsets_trimmed_while_reading_are_data_loss(
    spark, kafka_admin, topic, tmp_path, monkeypatch
):
    kafka_admin.create_topic(topic, 2)
    kafka_admin.produce(topic, 1, LINES[:300], now_ms=CREATED_MS)
    kafka_admin.trim_before(topic, 1, 150)
    real_provider_for = builder.provider_for
    monkeypatch.setattr(
        builder, "provider_for", lambda *args: _StaleEarliest(real_provider_for(*args), 0)
    )
    monkeypatch.setattr(builder, "_STREAM_CHUNK", 100)  # the loss spans two of three tasks
    stream = kafka_admin.stream_config(topic)

    with pytest.raises(DataLoss) as lost:
        build_from_stream(spark, request(0, 300), stream, 1, tmp_path / "lost")
    assert str(lost.value) == (
        f"topic {topic!r} partition 1: 150 offsets of [0, 300) are missing (below the low "
        "watermark when read); the first available offset is 150"
    )
    assert (lost.value.first_available_offset, lost.value.missing) == (150, 150)


def test_transaction_markers_are_not_loss(spark, kafka_mock, kafka_admin, topic, tmp_path):
    kafka_mock.create_topic(topic, 1)
    producer = Producer({"bootstrap.servers": kafka_mock.bootstrap, "transactional.id": topic})
    producer.init_transactions(10)
    for batch in (LINES[:3], LINES[3:5]):
        producer.begin_transaction()
        for value in batch:
            producer.produce(topic, value, partition=0, timestamp=CREATED_MS)
        producer.commit_transaction(10)
    producer.flush(10)
    stream = kafka_admin.stream_config(topic) | {"stream.kafka.isolation.level": "read_committed"}
    pairs = list(zip([0, 1, 2, 4, 5], LINES[:5], strict=True))  # commit markers at 3 and 6

    whole = build_from_stream(spark, request(0, 7, 0), stream, 0, tmp_path / "whole")
    original = staged_build(spark, pairs, 0, 7, tmp_path / "orig", partition=0)
    assert whole.total_docs == 5 and whole.crc == original.crc

    source = range_source_for(stream, 0, "")
    assert isinstance(source, KafkaRangeSource) and not source.dense
    losses: list[tuple[int, int]] = []
    assert [o for o, _ in source.read(0, 4, lambda a, b: losses.append((a, b)))] == [0, 1, 2]
    assert [o for o, _ in source.read(3, 7)] == [4, 5]  # starts and ends on a marker
    assert list(source.read(6, 7)) == [] and losses == []


def test_the_range_source_reports_what_lies_below_the_low_watermark(kafka_admin, topic):
    kafka_admin.create_topic(topic, 1)
    kafka_admin.produce(topic, 0, [b"%d" % i for i in range(2500)], now_ms=CREATED_MS)
    kafka_admin.trim_before(topic, 0, 40)
    source = range_source_for(kafka_admin.stream_config(topic), 0, "")
    source.page_size = 128  # several consume calls

    losses: list[tuple[int, int]] = []
    rows = list(source.read(10, 2400, lambda a, b: losses.append((a, b))))
    assert losses == [(10, 40)]
    assert [o for o, _ in rows] == list(range(40, 2400))
    assert all(value == b"%d" % offset for offset, value in rows)
    assert list(source.read(0, 30, lambda a, b: losses.append((a, b)))) == []
    assert losses[-1] == (0, 40)  # where the partition resumes, beyond the range
