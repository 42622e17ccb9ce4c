"""The Kafka stream plugin against librdkafka's mock cluster (`tests/kafka_mock.py`, one process per
session): offsets and watermarks, ordered and blocking fetches, data loss below the low watermark,
transaction markers, outages, Pinot's config keys (`config_problems`) and `manage.py produce
--stream kafka`."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from io import StringIO

import pytest
from confluent_kafka import Producer
from django.core.management import CommandError, call_command

from tables.streams import StreamError, StreamUnavailable, TopicNotFound, provider_for
from tables.streams.kafka import (
    KafkaStreamProvider,
    client_config,
    config_problems,
)
from tables.streams.producer import partition_for_key
from tests import envdefaults
from tests.kafka_mock import KafkaMock, MockTopicAdmin

pytestmark = pytest.mark.kafka

FIXTURES = envdefaults.PINOT_FIXTURES
NOW_MS = 1_700_000_000_000


@pytest.fixture
def topic() -> str:
    return f"k-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def provider(kafka_admin: MockTopicAdmin, topic: str):
    kafka_admin.create_topic(topic, 2)
    with provider_for(kafka_admin.stream_config(topic), "redis://unused") as reader:
        yield reader


def values(n: int, tag: str = "m") -> list[bytes]:
    return [json.dumps({"i": i, "tag": tag}).encode() for i in range(n)]


# --- offsets, fetches, data loss -----------------------------------------------------------------


def test_offsets_are_kafka_offsets_and_watermarks(kafka_admin, topic, provider):
    assert isinstance(provider, KafkaStreamProvider)
    assert provider.partition_count() == 2
    assert (provider.earliest_offset(0), provider.latest_offset(0)) == (0, 0)

    assert kafka_admin.produce(topic, 0, values(5), NOW_MS) == [0, 1, 2, 3, 4]
    assert kafka_admin.produce_many(topic, {0: values(2), 1: values(3)}, NOW_MS) == {
        0: [5, 6],
        1: [0, 1, 2],
    }
    assert (provider.earliest_offset(0), provider.latest_offset(0)) == (0, 7)
    assert provider.offset_for_criteria(1, "smallest") == 0
    assert provider.offset_for_criteria(1, "LARGEST") == 3


def test_fetch_reads_in_order_and_resumes_where_it_stopped(kafka_admin, topic, provider):
    sent = values(10)
    kafka_admin.produce(topic, 1, sent, NOW_MS)

    first = provider.fetch(1, 0, 4, timeout_ms=0)
    assert list(first.offsets) == [0, 1, 2, 3]
    assert first.next_offset == 4 and not first.data_loss
    rest = provider.fetch(1, first.next_offset, 100, timeout_ms=0)
    assert list(rest.offsets) == list(range(4, 10))
    assert list(first.values) + list(rest.values) == sent
    assert rest.timestamps[-1] == NOW_MS
    assert rest.messages[0].offset == 4 and rest.messages[0].value == sent[4]

    again = provider.fetch(1, 7, 100, timeout_ms=1000)  # another start: the partition re-seeks
    assert list(again.offsets) == [7, 8, 9] and again.first_available_offset == 0
    assert provider.fetch(1, 10, 100, timeout_ms=0).next_offset == 10


def test_fetch_on_an_empty_partition_waits_for_the_next_message(kafka_admin, topic, provider):
    empty = provider.fetch(0, 0, 10, timeout_ms=200)
    assert (len(empty), empty.next_offset, empty.data_loss) == (0, 0, False)

    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(provider.fetch, 0, 0, 10, 20_000)
        kafka_admin.produce(topic, 0, [b'{"late": true}'], NOW_MS)
        batch = waiting.result(timeout=30)
    assert list(batch.offsets) == [0] and batch.values[0] == b'{"late": true}'


def test_a_fetch_beyond_the_latest_offset_waits_and_is_not_loss(kafka_admin, topic, provider):
    ahead = provider.fetch(0, 5, 10, timeout_ms=300)  # the broker answers "out of range"
    assert (len(ahead), ahead.next_offset, ahead.data_loss) == (0, 5, False)
    kafka_admin.produce(topic, 0, values(7), NOW_MS)
    batch = provider.fetch(0, 5, 10, timeout_ms=2000)
    assert list(batch.offsets) == [5, 6] and not batch.data_loss


def test_partitions_are_fetched_by_several_threads_at_once(kafka_admin, topic, provider):
    kafka_admin.produce_many(topic, {0: values(300, "a"), 1: values(200, "b")}, NOW_MS)

    def read_all(partition: int) -> list[bytes]:
        got, offset = [], 0
        while offset < provider.latest_offset(partition):
            batch = provider.fetch(partition, offset, 64, timeout_ms=1000)
            got.extend(batch.values)
            offset = batch.next_offset
        return got

    with ThreadPoolExecutor(2) as pool:
        a, b = pool.map(read_all, [0, 1])
    assert a == values(300, "a") and b == values(200, "b")


def test_a_fetch_below_the_low_watermark_is_data_loss(kafka_admin, topic, provider):
    kafka_admin.produce(topic, 0, values(10), NOW_MS)
    assert list(provider.fetch(0, 0, 3, timeout_ms=0).offsets) == [0, 1, 2]
    assert kafka_admin.trim_before(topic, 0, 6) == 6
    assert provider.earliest_offset(0) == 6

    # This reader had already fetched 3..9 into librdkafka's queue before the trim: read, not lost.
    prefetched = provider.fetch(0, 3, 100, timeout_ms=1000)
    assert list(prefetched.offsets) == list(range(3, 10)) and not prefetched.data_loss

    with kafka_admin.provider(topic) as late:  # a reader starting at 3 after the trim
        batch = late.fetch(0, 3, 100, timeout_ms=1000)
        assert batch.data_loss and batch.first_available_offset == 6
        assert list(batch.offsets) == [6, 7, 8, 9] and batch.next_offset == 10

        kafka_admin.trim_before(topic, 0, 10)  # everything: the partition is empty
        gone = late.fetch(0, 0, 100, timeout_ms=0)
        assert gone.data_loss and len(gone) == 0
        assert gone.first_available_offset == gone.next_offset == 10


def test_a_missing_topic_or_partition_is_reported(kafka_admin, kafka_mock, topic, provider):
    with pytest.raises(ValueError, match="no partition 5"):
        provider.fetch(5, 0, 1, timeout_ms=0)
    with pytest.raises(ValueError, match="no partition 3"):
        provider.latest_offset(3)
    with (
        provider_for(kafka_admin.stream_config("no-such-topic"), "") as missing,
        pytest.raises(TopicNotFound),
    ):
        missing.partition_count()
    assert kafka_admin.delete_topic(topic) and not kafka_admin.delete_topic(topic)
    with pytest.raises(TopicNotFound):
        provider.partition_count()


def test_an_unreachable_cluster_is_unavailable(kafka_admin):
    config = kafka_admin.stream_config("t") | {
        "stream.kafka.broker.list": "127.0.0.1:1",
        "stream.kafka.connection.timeout.millis": "300",
    }
    with provider_for(config, "") as provider, pytest.raises(StreamUnavailable):
        provider.partition_count()


def test_transaction_markers_take_offsets_but_are_not_loss(
    kafka_mock: KafkaMock, kafka_admin, topic
):
    kafka_mock.create_topic(topic, 1)
    producer = Producer({"bootstrap.servers": kafka_mock.bootstrap, "transactional.id": topic})
    producer.init_transactions(10)
    for batch in (values(3, "t1"), values(2, "t2")):
        producer.begin_transaction()
        for value in batch:
            producer.produce(topic, value, partition=0)
        producer.commit_transaction(10)
    producer.flush(10)
    config = kafka_admin.stream_config(topic) | {"stream.kafka.isolation.level": "read_committed"}
    with provider_for(config, "") as provider:
        latest = provider.latest_offset(0)
        assert latest == 7  # 5 messages and 2 commit markers
        offsets, got, offset = [], [], 0
        while len(got) < 5:  # a fetch returns what has arrived: the two sets may come apart
            batch = provider.fetch(0, offset, 100, timeout_ms=2000)
            assert not batch.data_loss
            offsets += batch.offsets
            got += batch.values
            offset = batch.next_offset
        assert got == values(3, "t1") + values(2, "t2")
        assert offsets == [0, 1, 2, 4, 5]
        tail = provider.fetch(0, offset, 100, timeout_ms=0)
        assert len(tail) == 0 and not tail.data_loss
        assert tail.next_offset == latest  # past the last marker


# --- config --------------------------------------------------------------------------------------


def fixture_stream_configs() -> list[tuple[str, dict[str, str]]]:
    found = []
    for path in sorted(FIXTURES.glob("*_realtime_table_config.json")):
        table = json.loads(path.read_text(encoding="utf-8"))
        ingestion = table.get("ingestionConfig", {}).get("streamIngestionConfig", {})
        maps = ingestion.get("streamConfigMaps") or [
            table.get("tableIndexConfig", {}).get("streamConfigs", {})
        ]
        found += [(path.name, m) for m in maps if m.get("streamType") == "kafka"]
    return found


def test_every_kafka_fixture_config_is_accepted_as_written():
    configs = fixture_stream_configs()
    assert len(configs) == 5
    for name, config in configs:
        assert config_problems(config) == [], name
        assert client_config(config)["bootstrap.servers"] == "localhost:19092"


JSON_DECODER = "org.apache.pinot.plugin.inputformat.json.JSONMessageDecoder"
BASE = {
    "streamType": "kafka",
    "stream.kafka.topic.name": "events",
    "stream.kafka.broker.list": "kafka:9092",
    "stream.kafka.decoder.class.name": JSON_DECODER,
    "stream.kafka.consumer.factory.class.name": (
        "org.apache.pinot.plugin.stream.kafka20.KafkaConsumerFactory"
    ),
}


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"stream.kafka.topic.name": ""}, "stream.kafka.topic.name"),
        ({"stream.kafka.broker.list": " "}, "stream.kafka.broker.list"),
        ({"stream.kafka.decoder.class.name": "x.AvroDecoder"}, "stream.kafka.decoder.class.name"),
        (
            {"stream.kafka.consumer.factory.class.name": "x.KinesisConsumerFactory"},
            "stream.kafka.consumer.factory.class.name",
        ),
        (
            {"stream.kafka.consumer.prop.auto.offset.reset": "2d"},
            "stream.kafka.consumer.prop.auto.offset.reset",
        ),
        ({"stream.kafka.isolation.level": "serializable"}, "stream.kafka.isolation.level"),
        ({"security.protocol": "carrier-pigeon"}, "security.protocol"),
        ({"ssl.truststore.location": "/etc/kafka/trust.jks"}, "ssl.truststore.location"),
        ({"sasl.jaas.config": "Krb5LoginModule required;"}, "sasl.jaas.config"),
        ({"stream.kafka.connection.timeout.millis": "soon"}, "connection.timeout.millis"),
    ],
)
def test_config_problems_name_the_key(change, key):
    problems = config_problems(BASE | change)
    assert len(problems) == 1 and key in problems[0], problems
    with pytest.raises(StreamError, match=key.replace(".", r"\.")):
        provider_for(BASE | change, "")


def test_decoder_missing_is_a_problem():
    config = {k: v for k, v in BASE.items() if k != "stream.kafka.decoder.class.name"}
    assert any("decoder.class.name" in p for p in config_problems(config))


def test_client_settings_pass_through_as_pinot_passes_them():
    config = client_config(
        BASE
        | {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                'username="pinot" password="secret";'
            ),
            "ssl.truststore.location": "/etc/kafka/ca.pem",
            "ssl.truststore.type": "PEM",
            "stream.kafka.consumer.prop.fetch.min.bytes": "1024",
            "stream.kafka.consumer.prop.auto.offset.reset": "smallest",
            "stream.kafka.isolation.level": "read_committed",
            "key.deserializer": "org.apache.kafka.common.serialization.StringDeserializer",
            "realtime.segment.flush.threshold.rows": "1000",
        }
    )
    assert config["security.protocol"] == "SASL_SSL" and config["sasl.mechanism"] == "PLAIN"
    assert (config["sasl.username"], config["sasl.password"]) == ("pinot", "secret")
    assert config["ssl.ca.location"] == "/etc/kafka/ca.pem"
    assert config["fetch.min.bytes"] == "1024"
    assert config["isolation.level"] == "read_committed"
    assert config["auto.offset.reset"] == "error"  # loss is detected, never skipped silently
    assert config["enable.auto.commit"] == "false"
    assert "key.deserializer" not in config and "sasl.jaas.config" not in config
    assert not any(k.startswith(("stream.", "realtime.")) for k in config)


# --- manage.py produce --stream kafka ---------------------------------------------------------


def test_the_produce_command_writes_to_kafka(kafka_mock, kafka_admin, topic):
    kafka_admin.create_topic(topic, 3)
    out = StringIO()
    call_command(
        "produce",
        stream="kafka",
        bootstrap=kafka_mock.bootstrap,
        topic=topic,
        partitions=3,
        rate=0,
        count=40,
        file=str(FIXTURES / "githubEvents_2021-07-21-few-hours.json"),
        stdout=out,
    )
    assert "done: 40 rows" in out.getvalue()
    with kafka_admin.provider(topic) as provider:
        rows = 0
        for partition in range(3):
            batch = provider.fetch(partition, 0, 1000, timeout_ms=0)
            for value in batch.values:
                assert partition_for_key(json.loads(value)["__key"], 3) == partition
            rows += len(batch)
    assert rows == 40

    with pytest.raises(CommandError, match="refusing to decrease"):
        call_command(
            "produce",
            stream="kafka",
            bootstrap=kafka_mock.bootstrap,
            topic=topic,
            partitions=2,
            rate=0,
            count=1,
            file=str(FIXTURES / "githubEvents_2021-07-21-few-hours.json"),
            stdout=StringIO(),
        )


def test_the_produce_command_needs_a_bootstrap_for_kafka(topic):
    with pytest.raises(CommandError, match="--bootstrap"):
        call_command("produce", stream="kafka", topic=topic, partitions=1, rate=0, schema="x.json")
