"""Kafka (`streamType: kafka`) on confluent-kafka (librdkafka), read as Pinot's configs write it.

Config (parsed and checked in `tables.streams.kafka_config`). The keys are Pinot's:
`stream.kafka.topic.name`, `stream.kafka.broker.list`,
`stream.kafka.consumer.prop.auto.offset.reset` (smallest/largest), `stream.kafka.decoder.class.name`
(one of Pinot's JSON decoders, `JSON_DECODERS`), `stream.kafka.consumer.factory.class.name`
(Pinot's Kafka consumer factories: `org.apache.pinot.plugin.stream.kafka<NN>.KafkaConsumerFactory`,
default kafka30), `stream.kafka.isolation.level` (read_committed / read_uncommitted) and
`stream.kafka.connection.timeout.millis` (metadata and watermark requests; 10 s here, 30 s in
Pinot). Pinot hands the whole stream config map to the Kafka client, so client settings written
as plain keys (`security.protocol`, `sasl.mechanism`, `ssl.ca.location`, ...) reach it as written;
so do `stream.kafka.consumer.prop.<name>` keys, prefix removed. Each such key that librdkafka
knows is passed to it; keys it does not know are left out, as the Java client ignores unknown
keys. Java-only settings are translated where librdkafka has an equivalent (`sasl.jaas.config`
of the PLAIN and SCRAM login modules -> `sasl.username`/`sasl.password`; a PEM
`ssl.truststore.location` -> `ssl.ca.location`) and reported by `config_problems` otherwise (a
JKS truststore, a Kerberos JAAS config). `config_problems(stream_config)` lists everything wrong,
each message naming its key; the provider factory refuses a config that has any.

Offsets are Kafka offsets (the first message of a partition is offset 0). Earliest and latest are
the low and high watermarks (`get_watermark_offsets`; with read_committed the high one is the last
stable offset). Offsets of transaction markers and of compacted-away records are skipped without
being data loss: `next_offset` moves past them.

Reading. Each partition fetched gets its own consumer (manually assigned, no group membership, no
commits), held by the provider and locked per partition: the consumers of one server share their
table's provider, one thread per partition. A fetch continuing where the previous one stopped
reads librdkafka's prefetch queue; another start offset re-assigns the partition. `fetch`
returns as soon as any message is there (first without waiting, then `poll` up to `timeout_ms`,
then whatever else is queued) and builds a columnar batch: offsets are a `range` when contiguous,
timestamps are read from the messages only when asked for. With `timeout_ms <= 0` it never waits
for new messages, but waits for the round trip that brings messages the partition already holds
(it asks for the watermarks first).

Data loss. librdkafka runs with `auto.offset.reset=error`: a fetch below the low watermark (or
one retention overtook) fails with "offset out of range", and `fetch` then reads the low watermark,
reports `data_loss` with `first_available_offset` = that watermark, and reads on from it. A start
offset beyond the high watermark is not loss: the fetch waits and returns nothing.

Outages. Metadata and watermark requests that time out or cannot reach a broker raise
`StreamUnavailable`; a topic the cluster does not know raises `TopicNotFound`; a partition it does
not have raises ValueError. A fetch while brokers are down returns empty batches (librdkafka keeps
reconnecting), as Pinot's consumer does.

`KafkaTopicAdmin` (produce command, tests) creates, grows and deletes topics and trims them
through the Admin API, and produces with an idempotent producer. librdkafka's mock cluster lacks
the Admin API: `tests/kafka_mock.py` does those through the mock's own C API.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic, TopicMetadata

from tables.streams.base import (
    SMALLEST,
    LazyColumn,
    MessageBatch,
    StreamError,
    StreamProvider,
    StreamUnavailable,
    TopicAdmin,
    TopicExists,
    TopicNotFound,
    check_fetch_arguments,
    register_stream_type,
)
from tables.streams.kafka_config import (
    CONSUMER_PROP,
    DEFAULT_TIMEOUT_MS,
    JSON_DECODERS,
    PREFIX,
    STREAM_TYPE,
    client_config,
    config_problems,
    timeout_ms,
)

__all__ = [
    "FIRST_OFFSET",
    "JSON_DECODERS",
    "STREAM_TYPE",
    "KafkaStreamProvider",
    "KafkaTopicAdmin",
    "client_config",
    "config_problems",
    "provider_from_config",
]

FIRST_OFFSET = 0
KAFKA_JSON_DECODER = "org.apache.pinot.plugin.stream.kafka.KafkaJSONMessageDecoder"
_UNAVAILABLE = {
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._TIMED_OUT,
    KafkaError._MSG_TIMED_OUT,
    KafkaError._WAIT_COORD,
    KafkaError._RESOLVE,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.BROKER_NOT_AVAILABLE,
    KafkaError.NETWORK_EXCEPTION,
}
_NO_TOPIC = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC}
_OUT_OF_RANGE = {KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE}


# --- errors ----------------------------------------------------------------------------------


def _error(exc: KafkaException | KafkaError, what: str) -> StreamError:
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else exc
    code = err.code() if isinstance(err, KafkaError) else None
    text = err.str() if isinstance(err, KafkaError) else str(err)
    if code in _NO_TOPIC:
        return TopicNotFound(f"{what}: {text}")
    if code in _UNAVAILABLE or (isinstance(err, KafkaError) and err.retriable()):
        return StreamUnavailable(f"{what}: Kafka is not reachable ({text})")
    return StreamError(f"{what}: {text}")


def _timestamp(message: Message) -> int:
    kind, value = message.timestamp()
    return value if kind else 0


def _columns(messages: list[Message], first_available: int, loss: bool) -> MessageBatch:
    first, last = messages[0].offset(), messages[-1].offset()
    offsets: Sequence[int]
    if last - first + 1 == len(messages):
        offsets = range(first, last + 1)
    else:  # transaction markers or compaction left gaps
        offsets = [m.offset() for m in messages]
    values = [m.value() or b"" for m in messages]
    return MessageBatch.of_columns(
        offsets, values, LazyColumn(messages, _timestamp), last + 1, first_available, loss
    )


# --- reading ---------------------------------------------------------------------------------


class _PartitionReader:
    """One partition's consumer, where its prefetch queue stands (`position`) and the watermarks
    read when it was last assigned (`low` never exceeds the partition's real low watermark)."""

    def __init__(self, provider: KafkaStreamProvider, partition: int) -> None:
        self.provider = provider
        self.partition = partition
        self.lock = threading.Lock()
        self.consumer = Consumer(provider.config)
        self.position: int | None = None
        self.low = FIRST_OFFSET
        self._high: int | None = None  # from the assignment, used once

    def assign(self, offset: int) -> int:
        """Read from `offset`, or from the low watermark when it is below; returns where."""
        self.low, self._high = self.provider.watermarks(self.partition)
        start = max(offset, self.low)
        self.consumer.assign([TopicPartition(self.provider.topic, self.partition, start)])
        self.position = start
        return start

    def _high_now(self) -> int:
        high, self._high = self._high, None
        return high if high is not None else self.provider.watermarks(self.partition)[1]

    def read(self, max_messages: int, deadline: float, wait_for_new: bool) -> list[Message]:
        messages = self.consumer.consume(max_messages, 0)
        if messages:
            return messages
        if not wait_for_new:  # wait only for messages the partition already holds
            high = self._high_now()
            if self.position is None or self.position >= high:
                return []
            deadline = time.monotonic() + self.provider.timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            first = self.consumer.poll(remaining if wait_for_new else min(remaining, 0.2))
            if first is not None:
                more = self.consumer.consume(max_messages - 1, 0) if max_messages > 1 else []
                return [first, *more]
            if not wait_for_new and self._consumer_position(-1) >= high:
                return []  # only transaction markers were left: the consumer passed them

    def _consumer_position(self, default: int) -> int:
        tp = TopicPartition(self.provider.topic, self.partition)
        position = self.consumer.position([tp])[0].offset
        return position if position >= 0 else default

    def fetch(self, start: int, max_messages: int, timeout_ms: int) -> MessageBatch:
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        read_from = start
        for _ in range(3):
            if self.position != read_from:
                read_from = self.assign(read_from)
            messages = self.read(max_messages, deadline, timeout_ms > 0)
            failed = next((i for i, m in enumerate(messages) if m.error() is not None), None)
            if failed is None:
                break
            error = messages[failed].error()
            self.position = None  # the fetcher stopped on the error: re-assign next time
            if failed:
                messages = messages[:failed]
                break
            if error.code() not in _OUT_OF_RANGE:
                raise self.provider.partition_error(self.partition, error)
            # Retention overtook the reader (re-assigning reads the new low watermark), or the
            # offset is not produced yet: then wait as for an empty partition.
            read_from = self.assign(read_from)
            if read_from > self._high_now():
                self.position = None
                time.sleep(max(0.0, deadline - time.monotonic()))
                messages = []
                break
        else:
            messages = []
        loss = start < self.low
        if not messages:
            next_offset = read_from
            if self.position is not None:
                next_offset = self.position = max(read_from, self._consumer_position(read_from))
            return MessageBatch.of_columns([], [], [], next_offset, self.low, loss)
        batch = _columns(messages, self.low, loss)
        self.position = batch.next_offset
        return batch


class KafkaStreamProvider(StreamProvider):
    """Reads one Kafka topic; safe to share between threads (one consumer per partition)."""

    def __init__(self, topic: str, config: Mapping[str, str], timeout_ms: int = DEFAULT_TIMEOUT_MS):
        super().__init__(topic)
        self.config = dict(config)
        self.timeout_s = timeout_ms / 1000
        self._lock = threading.Lock()
        self._meta: Consumer | None = None
        self._readers: dict[int, _PartitionReader] = {}
        self._closed = False

    def _metadata_client(self) -> Consumer:
        with self._lock:
            if self._closed:
                raise StreamError(f"the provider of {self.topic!r} is closed")
            if self._meta is None:
                self._meta = Consumer(self.config)
            return self._meta

    def partition_count(self) -> int:
        try:
            found = self._metadata_client().list_topics(self.topic, timeout=self.timeout_s)
        except KafkaException as exc:
            raise _error(exc, f"topic {self.topic!r}") from None
        meta = found.topics.get(self.topic)
        if meta is None:
            raise TopicNotFound(f"topic {self.topic!r} does not exist")
        if meta.error is not None:
            raise _error(meta.error, f"topic {self.topic!r}")
        return len(meta.partitions)

    def watermarks(self, partition: int) -> tuple[int, int]:
        """(low, high) watermarks of a partition, asked of its leader."""
        tp = TopicPartition(self.topic, partition)
        try:
            low, high = self._metadata_client().get_watermark_offsets(
                tp, timeout=self.timeout_s, cached=False
            )
        except KafkaException as exc:
            raise self.partition_error(partition, exc.args[0]) from None
        return low, high

    def partition_error(self, partition: int, error: KafkaError) -> Exception:
        """A partition-level error: a partition the topic lacks is a ValueError."""
        if error.code() in _NO_TOPIC or error.code() == KafkaError._UNKNOWN_PARTITION:
            count = self.partition_count()  # raises TopicNotFound when the topic is gone
            if not 0 <= partition < count:
                return ValueError(
                    f"topic {self.topic!r} has no partition {partition} ({count} partitions)"
                )
        return _error(error, f"topic {self.topic!r} partition {partition}")

    def earliest_offset(self, partition: int) -> int:
        return self.watermarks(partition)[0]

    def latest_offset(self, partition: int) -> int:
        return self.watermarks(partition)[1]

    def _reader(self, partition: int) -> _PartitionReader:
        with self._lock:
            if self._closed:
                raise StreamError(f"the provider of {self.topic!r} is closed")
            reader = self._readers.get(partition)
        if reader is None:
            count = self.partition_count()
            if not 0 <= partition < count:
                raise ValueError(
                    f"topic {self.topic!r} has no partition {partition} ({count} partitions)"
                )
            with self._lock:
                reader = self._readers.get(partition)
                if reader is None:
                    reader = self._readers[partition] = _PartitionReader(self, partition)
        return reader

    def fetch(
        self, partition: int, start_offset: int, max_messages: int, timeout_ms: int
    ) -> MessageBatch:
        check_fetch_arguments(start_offset, max_messages)
        reader = self._reader(partition)
        with reader.lock:
            return reader.fetch(start_offset, max_messages, timeout_ms)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            readers, self._readers = list(self._readers.values()), {}
            meta, self._meta = self._meta, None
        for reader in readers:
            with reader.lock:
                reader.consumer.close()
        if meta is not None:
            meta.close()


def provider_from_config(
    topic: str, stream_config: Mapping[str, str], default_redis_url: str
) -> KafkaStreamProvider:
    """The registered factory: a config with problems raises StreamError naming them all."""
    return KafkaStreamProvider(topic, client_config(stream_config), timeout_ms(stream_config))


register_stream_type(STREAM_TYPE, provider_from_config)


# --- writing ---------------------------------------------------------------------------------


class KafkaTopicAdmin(TopicAdmin):
    """Topics of a Kafka cluster through the Admin API; produces with an idempotent producer."""

    def __init__(
        self,
        bootstrap: str,
        extra: Mapping[str, str] | None = None,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> None:
        self.bootstrap = bootstrap
        self.config = {"bootstrap.servers": bootstrap, **(extra or {})}
        self.timeout_s = timeout_ms / 1000
        # Asking a producer-type client for one topic's metadata would create it.
        self._admin = AdminClient({**self.config, "allow.auto.create.topics": "false"})
        self._producer: Producer | None = None
        self._lock = threading.Lock()

    def stream_config(self, topic: str) -> dict[str, str]:
        """A Pinot stream config map for `topic` on this cluster (as the fixtures write it)."""
        return {
            "streamType": STREAM_TYPE,
            f"{PREFIX}topic.name": topic,
            f"{PREFIX}broker.list": self.bootstrap,
            f"{PREFIX}consumer.factory.class.name": (
                "org.apache.pinot.plugin.stream.kafka30.KafkaConsumerFactory"
            ),
            f"{PREFIX}decoder.class.name": KAFKA_JSON_DECODER,
            f"{CONSUMER_PROP}auto.offset.reset": SMALLEST,
            **self.config,
        }

    def provider(self, topic: str) -> KafkaStreamProvider:
        return KafkaStreamProvider(
            topic, client_config(self.stream_config(topic)), int(self.timeout_s * 1000)
        )

    def _topic_meta(self, topic: str) -> TopicMetadata | None:
        try:
            return self._admin.list_topics(topic, timeout=self.timeout_s).topics.get(topic)
        except KafkaException as exc:
            raise _error(exc, f"topic {topic!r}") from None

    def topic_exists(self, topic: str) -> bool:
        meta = self._topic_meta(topic)
        return meta is not None and meta.error is None

    def partition_count(self, topic: str) -> int:
        meta = self._topic_meta(topic)
        if meta is None or meta.error is not None:
            raise TopicNotFound(f"topic {topic!r} does not exist")
        return len(meta.partitions)

    def _admin_call(self, futures: dict, what: str) -> object:
        (future,) = futures.values()
        try:
            return future.result(timeout=self.timeout_s + 5)
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() in (KafkaError._TIMED_OUT, KafkaError._UNSUPPORTED_FEATURE):
                raise NotImplementedError(
                    f"{what}: the cluster did not answer the Admin API request ({err.str()}); "
                    "librdkafka's mock cluster does not implement it"
                ) from None
            raise _error(exc, what) from None

    def create_topic(self, topic: str, partitions: int) -> None:
        if partitions < 1:
            raise ValueError(f"a topic needs at least one partition, not {partitions}")
        if self.topic_exists(topic):
            raise TopicExists(f"topic {topic!r} already exists")
        try:
            self._admin_call(
                self._admin.create_topics(
                    [NewTopic(topic, partitions)], request_timeout=self.timeout_s
                ),
                f"creating topic {topic!r}",
            )
        except StreamError as exc:
            if "already exists" in str(exc).lower():
                raise TopicExists(f"topic {topic!r} already exists") from None
            raise

    def add_partitions(self, topic: str, new_count: int) -> None:
        current = self.partition_count(topic)
        if new_count <= current:
            raise ValueError(
                f"topic {topic!r} has {current} partitions; the count can only increase "
                f"(asked for {new_count})"
            )
        self._admin_call(
            self._admin.create_partitions(
                [NewPartitions(topic, new_count)], request_timeout=self.timeout_s
            ),
            f"adding partitions to {topic!r}",
        )

    def trim_before(self, topic: str, partition: int, offset: int) -> int:
        before = self.provider_watermarks(topic, partition)[0]
        if offset <= before:
            return 0
        result = self._admin_call(
            self._admin.delete_records(
                [TopicPartition(topic, partition, offset)], request_timeout=self.timeout_s
            ),
            f"trimming {topic!r} partition {partition}",
        )
        return max(0, int(getattr(result, "low_watermark", offset)) - before)

    def provider_watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        with self.provider(topic) as provider:
            return provider.watermarks(partition)

    def delete_topic(self, topic: str) -> bool:
        if not self.topic_exists(topic):
            return False
        self._admin_call(
            self._admin.delete_topics([topic], request_timeout=self.timeout_s),
            f"deleting topic {topic!r}",
        )
        return True

    def _producer_client(self) -> Producer:
        with self._lock:
            if self._producer is None:
                self._producer = Producer(
                    {
                        **self.config,
                        "enable.idempotence": "true",
                        "allow.auto.create.topics": "false",
                        "linger.ms": "5",
                    }
                )
            return self._producer

    def produce(self, topic: str, partition: int, values: list[bytes], now_ms: int) -> list[int]:
        return self.produce_many(topic, {partition: values}, now_ms).get(partition, [])

    def produce_many(
        self,
        topic: str,
        batches: Mapping[int, list[bytes]],
        now_ms: int,
        batch_id: str | None = None,
    ) -> dict[int, list[int]]:
        """Writes every batch and waits for all acknowledgements. Each partition's values keep
        their order; their offsets need not be contiguous (other producers, transactions)."""
        count = self.partition_count(topic)
        for partition in batches:
            if not 0 <= partition < count:
                raise ValueError(
                    f"topic {topic!r} has no partition {partition} ({count} partitions)"
                )
        producer = self._producer_client()
        offsets = {p: [-1] * len(values) for p, values in batches.items()}
        failures: list[KafkaError] = []

        def delivered(err: KafkaError | None, msg: Message, slot: tuple[int, int]) -> None:
            if err is not None:
                failures.append(err)
            else:
                offsets[slot[0]][slot[1]] = msg.offset()

        for partition, values in batches.items():
            for i, value in enumerate(values):
                slot = (partition, i)
                while True:
                    try:
                        producer.produce(
                            topic,
                            value,
                            partition=partition,
                            timestamp=now_ms,
                            on_delivery=lambda e, m, s=slot: delivered(e, m, s),
                        )
                        break
                    except BufferError:  # the local queue is full: let deliveries drain it
                        producer.poll(0.1)
        left = producer.flush(self.timeout_s * 3)
        if failures:
            raise _error(failures[0], f"producing to {topic!r}")
        if left:
            raise StreamUnavailable(f"producing to {topic!r}: {left} messages not acknowledged")
        return offsets

    def close(self) -> None:
        with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            producer.flush(self.timeout_s)
